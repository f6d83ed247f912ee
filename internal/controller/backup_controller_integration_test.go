//go:build integration

package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/testenv"
)

func newBackup(ns, name, cluster string) *tuskv1alpha1.PostgresBackup {
	return &tuskv1alpha1.PostgresBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: cluster}},
	}
}

// backupWhen waits until the backup satisfies cond, which explains why not.
func backupWhen(t *testing.T, b *tuskv1alpha1.PostgresBackup, cond func(b *tuskv1alpha1.PostgresBackup) error) *tuskv1alpha1.PostgresBackup {
	t.Helper()
	got := &tuskv1alpha1.PostgresBackup{}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), got); err != nil {
			return err
		}
		return cond(got)
	})
	return got
}

// backupIn checks the phase and the Ready condition's reason, and that the
// status describes the current generation.
func backupIn(phase tuskv1alpha1.BackupPhase, reason string) func(b *tuskv1alpha1.PostgresBackup) error {
	return func(b *tuskv1alpha1.PostgresBackup) error {
		ready := meta.FindStatusCondition(b.Status.Conditions, tuskv1alpha1.ConditionReady)
		if b.Status.Phase != phase || ready == nil || ready.Reason != reason || b.Status.ObservedGeneration != b.Generation {
			return fmt.Errorf("backup %s: phase %q, Ready %+v, observed generation %d of %d; want %s with reason %s",
				b.Name, b.Status.Phase, ready, b.Status.ObservedGeneration, b.Generation, phase, reason)
		}
		return nil
	}
}

// TestBackupWaitsForItsCluster: a backup of a cluster that does not exist
// stays Pending with ClusterNotFound and one Warning Event; creating the
// cluster wakes it through the PostgresCluster watch alone (nothing is
// requeued), and a cluster without spec.backup fails it, saying so.
func TestBackupWaitsForItsCluster(t *testing.T) {
	ns := newNamespace(t)
	b := newBackup(ns, "nightly", "pg")
	create(t, b)
	got := backupWhen(t, b, backupIn(tuskv1alpha1.BackupPhasePending, tuskv1alpha1.ReasonClusterNotFound))
	if ready := meta.FindStatusCondition(got.Status.Conditions, tuskv1alpha1.ConditionReady); ready.Status != metav1.ConditionFalse ||
		!strings.Contains(ready.Message, "PostgresCluster pg does not exist") {
		t.Errorf("Ready %+v: want False, saying the cluster does not exist", ready)
	}
	e := waitForEvent(t, ns, tuskv1alpha1.ReasonClusterNotFound, "PostgresCluster pg does not exist")
	if e.Type != corev1.EventTypeWarning || e.Regarding.Name != "nightly" {
		t.Errorf("Event %s about %s, want a Warning about nightly", e.Type, e.Regarding.Name)
	}

	create(t, newCluster(ns)) // without spec.backup
	got = backupWhen(t, b, backupIn(tuskv1alpha1.BackupPhaseFailed, tuskv1alpha1.ReasonBackupNotConfigured))
	if !strings.Contains(got.Status.Error, "has no spec.backup") || got.Status.CompletedAt == nil || got.Status.StartedAt != nil {
		t.Errorf("status %+v: want the reason in error, an end and no start", got.Status)
	}
	waitForEvent(t, ns, tuskv1alpha1.ReasonBackupFailed, "has no spec.backup")
	// The backup reconciler alone wrote its status.
	if err := statusWriters(get(t, ns, "nightly", &tuskv1alpha1.PostgresBackup{}), BackupStatusOwner); err != nil {
		t.Error(err)
	}
}

// TestBackupRefusedWhileAnotherRuns: a second backup of a cluster whose
// backup is Running fails at once with BackupAlreadyRunning naming the
// running one; the running one is left alone.
func TestBackupRefusedWhileAnotherRuns(t *testing.T) {
	ns := newNamespace(t)
	create(t, newBackupCluster(ns))
	first := newBackup(ns, "first", "pg")
	create(t, first)
	// No instance is ready in envtest: the first one waits for one...
	backupWhen(t, first, backupIn(tuskv1alpha1.BackupPhasePending, tuskv1alpha1.ReasonWaitingForInstance))
	// ...and is made Running as if one had taken it.
	updateBackupStatus(t, first, func(s *tuskv1alpha1.PostgresBackupStatus) {
		s.Phase, s.Instance = tuskv1alpha1.BackupPhaseRunning, "pg-1"
		s.StartedAt = ptrTime(first.CreationTimestamp.Time)
	})

	second := newBackup(ns, "second", "pg")
	second.Spec.Target = tuskv1alpha1.BackupTargetPrimary
	create(t, second)
	refused := backupWhen(t, second, backupIn(tuskv1alpha1.BackupPhaseFailed, tuskv1alpha1.ReasonBackupAlreadyRunning))
	if !strings.Contains(refused.Status.Error, "backup first of the PostgresCluster pg is already running") {
		t.Errorf("error %q: want it to name the running backup", refused.Status.Error)
	}
	waitForEvent(t, ns, tuskv1alpha1.ReasonBackupFailed, "backup first of the PostgresCluster pg is already running")
	if running := get(t, ns, "first", &tuskv1alpha1.PostgresBackup{}); running.Status.Phase != tuskv1alpha1.BackupPhaseRunning {
		t.Errorf("the running backup became %s", running.Status.Phase)
	}
}
