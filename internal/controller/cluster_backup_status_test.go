package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

func backupOf(cluster, name string) tuskv1alpha1.PostgresBackup {
	return tuskv1alpha1.PostgresBackup{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: cluster}}}
}

func TestScheduledRun(t *testing.T) {
	for _, tc := range []struct {
		cluster, name, of string
		want              string // "": not a scheduled run
	}{
		{"pg", "pg-20261123030000", "pg", "2026-11-23T03:00:00Z"},
		{"pg", "pg-20261123030000", "other", ""},
		{"pg-2", "pg-20261123030000", "pg", ""},
		{"pg", "pg-manual", "pg", ""},
		{"pg", "pg-2026112303000", "pg", ""},
		{"pg", "pg-20261323030000", "pg", ""},
		{"pg", "pg-x20261123030000", "pg", ""},
	} {
		b := backupOf(tc.of, tc.name)
		got, ok := scheduledRun(tc.cluster, &b)
		if (tc.want == "") == ok || (ok && !got.Equal(utc(tc.want))) {
			t.Errorf("scheduledRun(%s, %s of %s) = %v, %v; want %q", tc.cluster, tc.name, tc.of, got, ok, tc.want)
		}
	}
}

// TestLastScheduledRun: the latest run of the scheduled backups and of
// status, so a deleted backup's run is not taken again after a restart;
// runs after now and backups of other clusters or by hand do not count.
func TestLastScheduledRun(t *testing.T) {
	now := utc("2026-11-23T10:00:00Z")
	c := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: "pg"}}
	backups := []tuskv1alpha1.PostgresBackup{
		backupOf("pg", "pg-20261121030000"), backupOf("pg", "pg-20261122030000"), backupOf("pg", "pg-manual"),
		backupOf("other", "pg-20261123030000"), backupOf("pg", "pg-20991231000000"),
	}
	if _, ok := lastScheduledRun(c, nil, now); ok {
		t.Error("a run known without backups or status")
	}
	if got, _ := lastScheduledRun(c, backups, now); !got.Equal(utc("2026-11-22T03:00:00Z")) {
		t.Errorf("from the backups: %v", got)
	}
	c.Status.Backup = &tuskv1alpha1.BackupStatus{LastScheduleTime: ptr.To(metav1.NewTime(utc("2026-11-23T03:00:00Z")))}
	if got, _ := lastScheduledRun(c, backups, now); !got.Equal(utc("2026-11-23T03:00:00Z")) {
		t.Errorf("status later than the backups (the last one deleted): %v", got)
	}
	c.Status.Backup.LastScheduleTime = ptr.To(metav1.NewTime(utc("2026-11-24T03:00:00Z")))
	if got, _ := lastScheduledRun(c, backups, now); !got.Equal(utc("2026-11-22T03:00:00Z")) {
		t.Errorf("status in the future: %v", got)
	}
}

func scheduledCluster(schedule, retention string) *tuskv1alpha1.PostgresCluster {
	return &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: "pg", Generation: 3},
		Spec: tuskv1alpha1.PostgresClusterSpec{Backup: &tuskv1alpha1.BackupSpec{Schedule: schedule, Retention: retention}}}
}

func TestReportBackupsSchedule(t *testing.T) {
	now := utc("2026-11-23T10:00:30Z")
	backups := []tuskv1alpha1.PostgresBackup{backupOf("pg", "pg-20261123100000")}
	rep := reportBackups(scheduledCluster("* * * * *", ""), backups, nil, now)
	st := rep.status
	if st == nil || !st.LastScheduleTime.Time.Equal(utc("2026-11-23T10:00:00Z")) || st.LastScheduledBackup != "pg-20261123100000" ||
		!st.NextScheduleTime.Time.Equal(utc("2026-11-23T10:01:00Z")) {
		t.Errorf("status.backup %+v", st)
	}
	if rep.schedule == nil || rep.schedule.Status != metav1.ConditionTrue || rep.schedule.Reason != tuskv1alpha1.ReasonScheduled || rep.retention != nil {
		t.Errorf("conditions %+v, %+v", rep.schedule, rep.retention)
	}

	rep = reportBackups(scheduledCluster("0 0 30 2 *", ""), backups, nil, now)
	if rep.schedule == nil || rep.schedule.Reason != tuskv1alpha1.ReasonScheduleInvalid || rep.status.NextScheduleTime != nil ||
		rep.status.LastScheduledBackup != "pg-20261123100000" {
		t.Errorf("a schedule that never fires: %+v, %+v", rep.schedule, rep.status)
	}

	if rep := reportBackups(scheduledCluster("", ""), nil, nil, now); rep.status != nil || rep.schedule != nil {
		t.Errorf("no schedule, no backups: %+v", rep)
	}
	c := scheduledCluster("@daily", "")
	c.Spec.Backup = nil
	c.Status.Backup = &tuskv1alpha1.BackupStatus{LastScheduledBackup: "pg-x"}
	if rep := reportBackups(c, backups, nil, now); rep.status != nil || rep.schedule != nil || rep.retention != nil {
		t.Errorf("no spec.backup: %+v", rep)
	}
}

func TestReportBackupsRetention(t *testing.T) {
	now := utc("2026-11-23T10:00:30Z")
	c := scheduledCluster("", "7d")
	if rep := reportBackups(c, nil, nil, now); rep.retention != nil || rep.status != nil {
		t.Errorf("before retention ran: %+v", rep)
	}
	applied := &retentionResult{applied: true, reason: tuskv1alpha1.ReasonRetentionApplied, message: "kept",
		appliedAt: now.Add(123 * time.Millisecond), firstRecoverability: utc("2026-11-16T00:00:00Z")}
	rep := reportBackups(c, nil, applied, now)
	if st := rep.status; st == nil || !st.LastRetentionTime.Time.Equal(utc("2026-11-23T10:00:30Z")) || !st.FirstRecoverabilityPoint.Time.Equal(utc("2026-11-16T00:00:00Z")) {
		t.Errorf("applied: status.backup %+v", rep.status)
	}
	if rep.retention == nil || rep.retention.Status != metav1.ConditionTrue || rep.retention.Reason != tuskv1alpha1.ReasonRetentionApplied {
		t.Errorf("applied: %+v", rep.retention)
	}

	// After a restart: no outcome yet, status keeps its own.
	c.Status.Backup = rep.status
	setCondition(c, *rep.retention)
	if again := reportBackups(c, nil, nil, now); again.retention == nil || again.retention.Reason != tuskv1alpha1.ReasonRetentionApplied ||
		!again.status.FirstRecoverabilityPoint.Equal(rep.status.FirstRecoverabilityPoint) {
		t.Errorf("after a restart: %+v, %+v", again.retention, again.status)
	}

	// A failure keeps the last success's times.
	failed := &retentionResult{reason: tuskv1alpha1.ReasonRetentionFailed, message: "access denied"}
	if rep := reportBackups(c, nil, failed, now.Add(time.Hour)); rep.retention.Status != metav1.ConditionFalse ||
		rep.status.LastRetentionTime == nil || !rep.status.LastRetentionTime.Time.Equal(utc("2026-11-23T10:00:30Z")) {
		t.Errorf("failed: %+v, %+v", rep.retention, rep.status)
	}

	c.Spec.Backup.Retention = "7 days"
	if rep := reportBackups(c, nil, applied, now); rep.retention == nil || rep.retention.Reason != tuskv1alpha1.ReasonRetentionInvalid {
		t.Errorf("invalid: %+v", rep.retention)
	}
	c.Spec.Backup.Retention = ""
	if rep := reportBackups(c, nil, applied, now); rep.retention != nil || rep.status != nil {
		t.Errorf("no retention: %+v", rep)
	}
}

// TestBackupConditionEvents: a backup condition turning false, or failing
// otherwise, is told by a Warning Event once.
func TestBackupConditionEvents(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &ClusterReconciler{Recorder: rec}
	c := scheduledCluster("", "7d")
	fail := &metav1.Condition{Type: tuskv1alpha1.ConditionBackupRetention, Status: metav1.ConditionFalse, Reason: tuskv1alpha1.ReasonRetentionFailed, Message: "a"}
	r.setBackupCondition(c, tuskv1alpha1.ConditionBackupRetention, fail)
	r.setBackupCondition(c, tuskv1alpha1.ConditionBackupRetention, fail)
	other := *fail
	other.Message = "b"
	r.setBackupCondition(c, tuskv1alpha1.ConditionBackupRetention, &other)
	r.setBackupCondition(c, tuskv1alpha1.ConditionBackupRetention, &metav1.Condition{Type: tuskv1alpha1.ConditionBackupRetention,
		Status: metav1.ConditionTrue, Reason: tuskv1alpha1.ReasonRetentionApplied, Message: "ok"})
	if len(rec.Events) != 2 {
		t.Errorf("%d events, want two", len(rec.Events))
	}
	if got := meta.FindStatusCondition(c.Status.Conditions, tuskv1alpha1.ConditionBackupRetention); got == nil || got.ObservedGeneration != 3 {
		t.Errorf("condition %+v", got)
	}
	r.setBackupCondition(c, tuskv1alpha1.ConditionBackupRetention, nil)
	if len(c.Status.Conditions) != 0 {
		t.Errorf("conditions %+v, want none", c.Status.Conditions)
	}
}

// TestRetentionResultsWake: a changed outcome wakes the cluster's
// reconcile once; the same outcome again does not.
func TestRetentionResultsWake(t *testing.T) {
	s := newRetentionResults()
	key := client.ObjectKey{Namespace: "ns", Name: "pg"}
	res := retentionResult{applied: true, reason: tuskv1alpha1.ReasonRetentionApplied}
	s.record(key, res)
	s.record(key, res)
	if len(s.changed) != 1 {
		t.Fatalf("%d wake-ups, want 1", len(s.changed))
	}
	if e := <-s.changed; e.Object.GetName() != "pg" || e.Object.GetNamespace() != "ns" {
		t.Errorf("woke %s/%s", e.Object.GetNamespace(), e.Object.GetName())
	}
	if got, ok := s.get(key); !ok || got != res {
		t.Errorf("get: %+v, %v", got, ok)
	}
	s.forget(key)
	if _, ok := s.get(key); ok {
		t.Error("forgotten outcome still there")
	}
}

// TestSystemIdentifierComesFromThePrimary: status.systemIdentifier, which
// decides where retention may delete, is what the primary reports, kept
// while it does not answer; a replica's report (a different system
// after a mistake) never sets it.
func TestSystemIdentifierComesFromThePrimary(t *testing.T) {
	report := func(role instanceapi.Role, id string) *instanceapi.Status {
		return &instanceapi.Status{Role: role, SystemIdentifier: id}
	}
	for _, tc := range []struct {
		name string
		last string
		v    *view
		want string
	}{
		{"the primary reports it", "", &view{members: []*member{{name: "pg-1", status: report(instanceapi.RolePrimary, "71")}}}, "71"},
		{"the primary does not answer: kept", "71", &view{members: []*member{{name: "pg-1"}}}, "71"},
		{"a replica's report does not count", "", &view{members: []*member{
			{name: "pg-1"}, {name: "pg-2", status: report(instanceapi.RoleReplica, "99")}}}, ""},
		{"pg-1 is no primary now", "71", &view{members: []*member{{name: "pg-1", status: report(instanceapi.RoleReplica, "99")}}}, "71"},
		{"an empty report keeps it", "71", &view{members: []*member{{name: "pg-1", status: report(instanceapi.RolePrimary, "")}}}, "71"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &tuskv1alpha1.PostgresCluster{}
			c.Status.CurrentPrimary, c.Status.SystemIdentifier = "pg-1", tc.last
			if got := systemIdentifier(c, tc.v); got != tc.want {
				t.Errorf("systemIdentifier = %q, want %q", got, tc.want)
			}
		})
	}
}
