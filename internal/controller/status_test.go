package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

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
