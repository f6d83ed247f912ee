package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

func TestSetClusterStatus(t *testing.T) {
	cluster := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: "orders", Generation: 4}}
	setClusterStatus(cluster)
	st := cluster.Status
	if st.ObservedGeneration != 4 || st.Phase != tuskv1alpha1.ClusterPhasePending || st.Selector != "tusk.dev/cluster=orders" {
		t.Fatalf("status %+v: want observedGeneration 4, phase Pending, selector tusk.dev/cluster=orders", st)
	}
	ready := meta.FindStatusCondition(st.Conditions, ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionUnknown || ready.Reason != ReasonLifecycleNotImplemented || ready.ObservedGeneration != 4 {
		t.Fatalf("Ready %+v: want Unknown, %s, observedGeneration 4", ready, ReasonLifecycleNotImplemented)
	}
}

func TestSetBackupStatusKeepsAFinalPhase(t *testing.T) {
	backup := &tuskv1alpha1.PostgresBackup{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	setBackupStatus(backup)
	if backup.Status.Phase != tuskv1alpha1.BackupPhasePending {
		t.Fatalf("new backup phase %q, want Pending", backup.Status.Phase)
	}
	backup.Status.Phase = tuskv1alpha1.BackupPhaseCompleted
	setBackupStatus(backup)
	if backup.Status.Phase != tuskv1alpha1.BackupPhaseCompleted {
		t.Fatalf("a completed backup went back to %q", backup.Status.Phase)
	}
}
