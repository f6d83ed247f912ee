package controller

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestNextRuns(t *testing.T) {
	tests := []struct {
		name      string
		schedule  string
		last, now string
		due, next string // due "": nothing due
	}{
		{"a new cluster waits for the first scheduled time", "0 3 * * *", "2026-11-23T10:00:00Z", "2026-11-23T10:05:00Z", "", "2026-11-24T03:00:00Z"},
		{"due exactly at the scheduled time", "0 3 * * *", "2026-11-22T03:00:00Z", "2026-11-23T03:00:00Z", "2026-11-23T03:00:00Z", "2026-11-24T03:00:00Z"},
		{"one second before: not yet", "0 3 * * *", "2026-11-22T03:00:00Z", "2026-11-23T02:59:59Z", "", "2026-11-23T03:00:00Z"},
		{"already taken: not again", "0 3 * * *", "2026-11-23T03:00:00Z", "2026-11-23T03:00:30Z", "", "2026-11-24T03:00:00Z"},
		{"three missed days: one catch-up, the latest", "@daily", "2026-11-20T00:00:00Z", "2026-11-23T10:00:00Z", "2026-11-23T00:00:00Z", "2026-11-24T00:00:00Z"},
		{"every minute, missed for a year: the latest minute", "* * * * *", "2025-11-23T10:00:00Z", "2026-11-23T10:00:30Z", "2026-11-23T10:00:00Z", "2026-11-23T10:01:00Z"},
		{"every minute on 1 January, now in March: last 1 January's last minute", "* * 1 1 *", "2025-01-01T00:00:00Z", "2026-03-01T00:00:00Z", "2026-01-01T23:59:00Z", "2027-01-01T00:00:00Z"},
		{"29 February, missed for years", "0 0 29 2 *", "2020-01-01T00:00:00Z", "2026-11-23T00:00:00Z", "2024-02-29T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"a last run in the future (clock skew): nothing", "@hourly", "2026-11-23T12:00:00Z", "2026-11-23T10:30:00Z", "", "2026-11-23T11:00:00Z"},
		{"weekdays only: Friday to Monday", "30 1 * * 1-5", "2026-11-20T01:30:00Z", "2026-11-23T02:00:00Z", "2026-11-23T01:30:00Z", "2026-11-24T01:30:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := utc(tt.now)
			s, err := parseSchedule(tt.schedule, now)
			if err != nil {
				t.Fatal(err)
			}
			run := nextRuns(s, utc(tt.last), now)
			var due time.Time
			if tt.due != "" {
				due = utc(tt.due)
			}
			if !run.due.Equal(due) || !run.next.Equal(utc(tt.next)) {
				t.Errorf("due %v next %v, want %v %v", run.due, run.next, due, utc(tt.next))
			}
		})
	}
}

func TestParseScheduleErrors(t *testing.T) {
	now := utc("2026-11-23T10:00:00Z")
	for schedule, want := range map[string]string{
		"61 * * * *":   "is not a cron schedule: end of range (61) above maximum (59): 61",
		"0 0 30 2 *":   "never fires",
		"a b c d e":    "is not a cron schedule",
		"@fortnightly": "is not a cron schedule",
	} {
		_, err := parseSchedule(schedule, now)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "spec.backup.schedule") {
			t.Errorf("parseSchedule(%q) = %v, want an error naming the field and saying %q", schedule, err, want)
		}
	}
	for _, ok := range []string{"@daily", "@midnight", "@weekly", "0 */6 * * *", "15 2 * * SUN"} {
		if _, err := parseSchedule(ok, now); err != nil {
			t.Errorf("parseSchedule(%q): %v", ok, err)
		}
	}
}

func TestScheduledBackupName(t *testing.T) {
	got := scheduledBackupName("orders", time.Date(2026, 11, 23, 3, 0, 5, 999, time.FixedZone("CET", 3600)))
	if want := "orders-20261123020005"; got != want {
		t.Errorf("name %q, want %q", got, want)
	}
}

func TestRetentionDue(t *testing.T) {
	now := utc("2026-11-23T10:00:00Z")
	at := func(s string) *metav1.Time { return ptr.To(metav1.NewTime(utc(s))) }
	tests := []struct {
		name    string
		last    *metav1.Time
		changed bool
		retryAt time.Time
		due     bool
		next    time.Time
	}{
		{name: "never ran", due: true},
		{name: "ran a minute ago, nothing new", last: at("2026-11-23T09:59:00Z"), next: utc("2026-11-23T10:59:00Z")},
		{name: "a backup completed since", last: at("2026-11-23T09:59:00Z"), changed: true, due: true},
		{name: "exactly an hour ago", last: at("2026-11-23T09:00:00Z"), due: true, next: utc("2026-11-23T10:00:00Z")},
		{name: "a failure asks to wait, even with a new backup", last: at("2026-11-23T08:00:00Z"), changed: true, retryAt: utc("2026-11-23T10:03:00Z"), next: utc("2026-11-23T10:03:00Z")},
		{name: "the wait after a failure is over", last: at("2026-11-23T09:30:00Z"), changed: true, retryAt: utc("2026-11-23T10:00:00Z"), due: true},
	}
	for _, tt := range tests {
		due, next := retentionDue(tt.last, tt.changed, tt.retryAt, now)
		if due != tt.due || !next.Equal(tt.next) {
			t.Errorf("%s: due %v next %v, want %v %v", tt.name, due, next, tt.due, tt.next)
		}
	}
}

func TestSameLocation(t *testing.T) {
	c := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: "pg"}, Spec: tuskv1alpha1.PostgresClusterSpec{
		Backup: &tuskv1alpha1.BackupSpec{ObjectStore: tuskv1alpha1.ObjectStoreSpec{Endpoint: "https://s3", Bucket: "b"}},
	}}
	backup := func(s *tuskv1alpha1.ObjectStoreSpec) *tuskv1alpha1.PostgresBackup {
		return &tuskv1alpha1.PostgresBackup{
			Spec:   tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: "pg"}},
			Status: tuskv1alpha1.PostgresBackupStatus{ObjectStore: s},
		}
	}
	tests := []struct {
		name  string
		store *tuskv1alpha1.ObjectStoreSpec
		want  bool
	}{
		{"same, path defaulted on both sides", &tuskv1alpha1.ObjectStoreSpec{Endpoint: "https://s3", Bucket: "b"}, true},
		{"same, the default path spelled out", &tuskv1alpha1.ObjectStoreSpec{Endpoint: "https://s3", Bucket: "b", Path: "pg/"}, true},
		{"another bucket", &tuskv1alpha1.ObjectStoreSpec{Endpoint: "https://s3", Bucket: "c"}, false},
		{"another path", &tuskv1alpha1.ObjectStoreSpec{Endpoint: "https://s3", Bucket: "b", Path: "old"}, false},
		{"another endpoint", &tuskv1alpha1.ObjectStoreSpec{Endpoint: "https://s4", Bucket: "b"}, false},
		{"unknown: left alone", nil, false},
	}
	for _, tt := range tests {
		if got := inClusterLocation(c, backup(tt.store)); got != tt.want {
			t.Errorf("%s: sameLocation = %v, want %v", tt.name, got, tt.want)
		}
	}
}
