package plugin

import (
	"bytes"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// backupsOfOrders are PostgresBackups as the operator reports them: one of
// each phase of orders, and one of another cluster.
func backupsOfOrders() []tuskv1alpha1.PostgresBackup {
	at := func(min, sec int) *metav1.Time {
		t := metav1.NewTime(time.Date(2026, 11, 23, 10, min, sec, 0, time.UTC))
		return &t
	}
	backup := func(name, cluster string, created *metav1.Time, st tuskv1alpha1.PostgresBackupStatus) tuskv1alpha1.PostgresBackup {
		return tuskv1alpha1.PostgresBackup{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", CreationTimestamp: *created},
			Spec:       tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: cluster}},
			Status:     st,
		}
	}
	return []tuskv1alpha1.PostgresBackup{
		backup("orders-20261123-100500", "orders", at(5, 0), tuskv1alpha1.PostgresBackupStatus{
			Phase: tuskv1alpha1.BackupPhaseRunning, Instance: "orders-2", StartedAt: at(5, 1),
			Conditions: []metav1.Condition{{Type: tuskv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: tuskv1alpha1.ReasonBackupRunning,
				Message: "taking a base backup of orders on instance orders-2; waiting for the primary to archive WAL segment 000000010000000000000007, the backup's last"}},
		}),
		backup("orders-20261123-100000", "orders", at(0, 0), tuskv1alpha1.PostgresBackupStatus{
			Phase: tuskv1alpha1.BackupPhaseCompleted, Instance: "orders-3", StartedAt: at(0, 1), CompletedAt: at(1, 13),
			BeginLSN: "0/2000028", EndLSN: "0/3000100", Timeline: 1, SizeBytes: 3<<20 + 300<<10,
			Location: "s3://backups/orders/base/orders-20261123-100000/",
		}),
		backup("before-upgrade", "orders", at(2, 0), tuskv1alpha1.PostgresBackupStatus{
			Phase: tuskv1alpha1.BackupPhaseFailed, Instance: "orders-1", StartedAt: at(2, 1), CompletedAt: at(2, 3),
			Error: "WrongCredentials: while listing \"base/before-upgrade/\" in bucket \"backups\":\naccess denied",
		}),
		backup("second", "orders", at(5, 30), tuskv1alpha1.PostgresBackupStatus{
			Phase: tuskv1alpha1.BackupPhaseFailed, CompletedAt: at(5, 30),
			Error: "backup orders-20261123-100500 of the PostgresCluster orders is already running",
		}),
		backup("new", "orders", at(6, 0), tuskv1alpha1.PostgresBackupStatus{}),
		backup("users-1", "users", at(0, 0), tuskv1alpha1.PostgresBackupStatus{Phase: tuskv1alpha1.BackupPhaseCompleted}),
	}
}

func TestRenderBackupsGolden(t *testing.T) {
	var out bytes.Buffer
	if err := renderBackups(&out, "orders", backupsOfOrders()); err != nil {
		t.Fatal(err)
	}
	golden(t, "backups-orders", out.Bytes())
	out.Reset()
	if err := renderBackups(&out, "nothing", backupsOfOrders()); err != nil {
		t.Fatal(err)
	}
	if out.String() != "No PostgresBackups of nothing.\n" {
		t.Errorf("no backups: %q", out.String())
	}
}

func TestRenderBackupResultGolden(t *testing.T) {
	b := backupsOfOrders()[1]
	var out bytes.Buffer
	if err := renderBackupResult(&out, &b); err != nil {
		t.Fatal(err)
	}
	golden(t, "backup-completed", out.Bytes())
}

func TestBackupName(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 5, 9, 0, time.FixedZone("CET", 3600))
	if got := backupName("orders", at); got != "orders-20261123-090509" {
		t.Errorf("%q, want the time in UTC: orders-20261123-090509", got)
	}
}

func TestParseBackupTarget(t *testing.T) {
	for in, want := range map[string]tuskv1alpha1.BackupTarget{
		"": "", "primary": tuskv1alpha1.BackupTargetPrimary, "prefer-replica": tuskv1alpha1.BackupTargetPreferReplica,
	} {
		if got, err := parseBackupTarget(in); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"replica", "Primary", "pg-1"} {
		if _, err := parseBackupTarget(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
