package instance

import (
	"testing"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/walarchive"
)

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/tusk-bin/tusk":             "/tusk-bin/tusk",
		"/run/tusk/wal-archive.json": "/run/tusk/wal-archive.json",
		"/tmp/my dir/tusk":           "'/tmp/my dir/tusk'",
		"/tmp/it's/tusk":             `'/tmp/it'\''s/tusk'`,
		"/tmp/100%p/tusk":            "/tmp/100%%p/tusk",
		"/tmp/$(reboot)/tusk":        "'/tmp/$(reboot)/tusk'",
		"":                           "''",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestArchiveFailing(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Second)
	for _, tc := range []struct {
		name             string
		archived, failed *time.Time
		want             bool
	}{
		{"nothing yet", nil, nil, false},
		{"successes only", &t0, nil, false},
		{"failures only", nil, &t0, true},
		{"failure after success", &t0, &t1, true},
		{"success after failure", &t1, &t0, false},
	} {
		if got := instanceapi.ArchiveFailing(tc.archived, tc.failed); got != tc.want {
			t.Errorf("%s: ArchiveFailing = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestWALArchiveOptionsValidate(t *testing.T) {
	good := func() *WALArchiveOptions {
		return &WALArchiveOptions{Binary: "/tusk-bin/tusk", Config: walarchive.Config{
			Cluster: "orders", ObjectStore: objectstore.Config{Endpoint: "http://s3:9000", Bucket: "b"},
		}}
	}
	var none *WALArchiveOptions
	if err := none.validate(); err != nil {
		t.Errorf("no archiving: %v", err)
	}
	if err := good().validate(); err != nil {
		t.Errorf("good options: %v", err)
	}
	for name, change := range map[string]func(*WALArchiveOptions){
		"relative binary":  func(o *WALArchiveOptions) { o.Binary = "tusk" },
		"no bucket":        func(o *WALArchiveOptions) { o.Config.ObjectStore.Bucket = "" },
		"no endpoint":      func(o *WALArchiveOptions) { o.Config.ObjectStore.Endpoint = "" },
		"no cluster":       func(o *WALArchiveOptions) { o.Config.Cluster = "" },
		"negative timeout": func(o *WALArchiveOptions) { o.Timeout = -time.Second },
	} {
		o := good()
		change(o)
		if err := o.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
