package instance

import (
	"strings"
	"testing"
	"time"

	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/postgres"
	"tusk.dev/tusk/internal/walarchive"
)

func TestChooseBackup(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)
	at := func(h int) *time.Time { v := t0.Add(time.Duration(h) * time.Hour); return &v }
	lsn := func(v uint64) *postgres.LSN { l := postgres.LSN(v); return &l }
	backups := []*basebackup.Record{
		{Name: "b", EndTime: *at(2), EndLSN: 200},
		{Name: "a", EndTime: *at(1), EndLSN: 100},
		{Name: "c", EndTime: *at(3), EndLSN: 300},
	}
	for _, tc := range []struct {
		name    string
		records []*basebackup.Record
		target  basebackup.Target
		want    string // backup, or the error's start
	}{
		{"no target: the newest", backups, basebackup.Target{}, "c"},
		{"a restore point: the newest", backups, basebackup.Target{Name: "before-upgrade"}, "c"},
		{"a time between two", backups, basebackup.Target{Time: at(2)}, "b"},
		{"a time after all", backups, basebackup.Target{Time: at(9)}, "c"},
		{"a time before all", backups, basebackup.Target{Time: at(0)}, "error: no backup ended before the recovery target time 2026-11-23T03:00:00Z (the first ended 2026-11-23T04:00:00Z)"},
		{"an LSN between two", backups, basebackup.Target{LSN: lsn(250)}, "b"},
		{"an LSN before all", backups, basebackup.Target{LSN: lsn(50)}, "error: no backup ended before the recovery target LSN"},
		{"no backups", nil, basebackup.Target{}, "error: there are no complete backups"},
		{"same end time: the later LSN", []*basebackup.Record{{Name: "x", EndTime: *at(1), EndLSN: 1}, {Name: "y", EndTime: *at(1), EndLSN: 2}},
			basebackup.Target{}, "y"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := chooseBackup(tc.records, tc.target)
			got := ""
			if err != nil {
				got = "error: " + err.Error()
			} else {
				got = rec.Name
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("chose %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPostmasterStatus(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"1234\n/data\n1700000000\n5432\n/run/tusk/socket\n\n  5432001         0\nready   \n", "ready"},
		{"1234\n/data\n1700000000\n5432\n/run/tusk/socket\n\n  5432001         0\nstarting\n", "starting"},
		{"1234\n/data\n1700000000\n5432\n/run/tusk/socket\n\n  5432001         0\nstandby \n", "standby"},
		{"1234\n/data\n1700000000\n5432\n", ""}, // being written
		{"", ""},
	} {
		if got := postmasterStatus(tc.file); got != tc.want {
			t.Errorf("postmasterStatus(%q) = %q, want %q", tc.file, got, tc.want)
		}
	}
}

func TestParseControlData(t *testing.T) {
	out := `pg_control version number:            1300
Database system identifier:           7441234567890123456
Database cluster state:               shut down
Latest checkpoint location:           0/5000028
Latest checkpoint's REDO location:    0/5000028
Latest checkpoint's TimeLineID:       2
Latest checkpoint's PrevTimeLineID:   2
Minimum recovery ending location:     0/0
`
	want := controlData{state: "shut down", timeline: 2, systemID: "7441234567890123456", checkpoint: "0/5000028", minRecovery: "0/0"}
	if got := parseControlData(out); got != want {
		t.Errorf("parseControlData = %+v, want %+v", got, want)
	}
	inRecovery := strings.Replace(out, "shut down", "in archive recovery", 1)
	if got := parseControlData(inRecovery); got.state != "in archive recovery" {
		t.Errorf("parseControlData state = %q, want in archive recovery", got.state)
	}
	if got := parseControlData("garbage"); got != (controlData{}) {
		t.Errorf("parseControlData(garbage) = %+v, want nothing", got)
	}
}

func TestSameLocation(t *testing.T) {
	loc := func(cluster, endpoint, bucket, path string) walarchive.Config {
		return walarchive.Config{Cluster: cluster, ObjectStore: objectstore.Config{Endpoint: endpoint, Bucket: bucket, Path: path}}
	}
	src := loc("new", "https://s3.example.com", "backups", "orders")
	for _, tc := range []struct {
		name string
		own  walarchive.Config
		want bool
	}{
		{"the same", loc("new", "https://s3.example.com", "backups", "orders"), true},
		{"slashes and case of the endpoint", loc("new", "https://S3.example.com/", "backups", "/orders/"), true},
		{"own path defaults to the cluster's name", loc("orders", "https://s3.example.com", "backups", ""), true},
		{"another path", loc("new", "https://s3.example.com", "backups", "orders-2"), false},
		{"another bucket", loc("new", "https://s3.example.com", "other", "orders"), false},
		{"another endpoint", loc("new", "https://s3.other.com", "backups", "orders"), false},
		{"default path of another name", loc("new", "https://s3.example.com", "backups", ""), false},
	} {
		if got := SameLocation(tc.own, src); got != tc.want {
			t.Errorf("%s: SameLocation = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRecoveryOptionsValidate(t *testing.T) {
	good := func() *RecoveryOptions {
		return &RecoveryOptions{Binary: "/tusk-bin/tusk", Backup: LatestBackup, Source: walarchive.Config{Cluster: "new",
			ObjectStore: objectstore.Config{Endpoint: "https://s3.example.com", Bucket: "backups", Path: "orders"}}}
	}
	now := time.Now()
	for _, tc := range []struct {
		name   string
		change func(*RecoveryOptions)
		own    *WALArchiveOptions
		want   string
	}{
		{"valid", func(*RecoveryOptions) {}, nil, ""},
		{"a relative binary", func(o *RecoveryOptions) { o.Binary = "tusk" }, nil, "absolute path"},
		{"no path", func(o *RecoveryOptions) { o.Source.ObjectStore.Path = "/" }, nil, "endpoint, bucket and path"},
		{"a bad backup name", func(o *RecoveryOptions) { o.Backup = "Not_A_Name" }, nil, "is not valid"},
		{"two targets", func(o *RecoveryOptions) { o.Target = basebackup.Target{Time: &now, Name: "x"} }, nil, "at most one recovery target"},
		{"the own archive", func(*RecoveryOptions) {}, &WALArchiveOptions{Config: walarchive.Config{Cluster: "new",
			ObjectStore: objectstore.Config{Endpoint: "https://s3.example.com", Bucket: "backups", Path: "orders"}}},
			"it is where this cluster archives its own WAL"},
	} {
		o := good()
		tc.change(o)
		err := o.validate(tc.own)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}

func TestCloneOptionsValidate(t *testing.T) {
	good := func() *CloneOptions {
		return &CloneOptions{Source: instanceapi.Upstream{Host: "orders-rw", Port: 5432}, TLSDir: "/etc/tusk/tls/clone-source"}
	}
	for _, tc := range []struct {
		name     string
		change   func(*CloneOptions)
		recovery *RecoveryOptions
		want     string
	}{
		{"valid", func(*CloneOptions) {}, nil, ""},
		{"no host", func(o *CloneOptions) { o.Source.Host = "" }, nil, "the source's host and port"},
		{"no port", func(o *CloneOptions) { o.Source.Port = 0 }, nil, "the source's host and port"},
		{"no certificate", func(o *CloneOptions) { o.TLSDir = "" }, nil, "only over TLS"},
		{"and a recovery", func(*CloneOptions) {}, &RecoveryOptions{}, "not both"},
	} {
		o := good()
		tc.change(o)
		err := o.validate(tc.recovery)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}
