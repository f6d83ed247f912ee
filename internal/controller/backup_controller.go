package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// BackupReconciler takes the base backups PostgresBackups ask for.
type BackupReconciler struct {
	client.Client
}

// +kubebuilder:rbac:groups=tusk.dev,resources=postgresbackups,verbs=get;list;watch
// +kubebuilder:rbac:groups=tusk.dev,resources=postgresbackups/status,verbs=get;update;patch

// Reconcile observes one PostgresBackup and writes what it saw to status.
func (r *BackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	backup := &tuskv1alpha1.PostgresBackup{}
	if err := r.Get(ctx, req.NamespacedName, backup); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	original := backup.DeepCopy()
	setBackupStatus(backup)
	return ctrl.Result{}, patchStatusIfChanged(ctx, r.Client, original, backup, original.Status, backup.Status)
}

// setBackupStatus records that the backup is seen but cannot be taken by this
// build; it stays Pending rather than pretending to run or fail.
func setBackupStatus(backup *tuskv1alpha1.PostgresBackup) {
	backup.Status.ObservedGeneration = backup.Generation
	if backup.Status.Phase == "" {
		backup.Status.Phase = tuskv1alpha1.BackupPhasePending
	}
	meta.SetStatusCondition(&backup.Status.Conditions, metav1.Condition{
		Type:               ConditionReady,
		Status:             metav1.ConditionUnknown,
		Reason:             ReasonBackupNotImplemented,
		Message:            "This Tusk build records PostgresBackups but does not take base backups yet",
		ObservedGeneration: backup.Generation,
	})
}

// SetupWithManager registers the reconciler with mgr.
func (r *BackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&tuskv1alpha1.PostgresBackup{}).
		Named("postgresbackup").
		Complete(r)
}
