package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// StatusOwner is the field manager of every write of a PostgresCluster's
// status: the ClusterReconciler's writeStatus is its only writer, and the
// status's managedFields name no other manager.
const StatusOwner = "tusk-cluster-status"

// writeStatus is the one write of a PostgresCluster's status, by the
// ClusterReconciler alone: at the end of a reconcile, and, through
// recordDecision, before acting on a decision that must survive an
// operator restart (a new instance's serial, the target primary). It
// replaces the status subresource whole at c's resourceVersion (an
// optimistic lock: a write from a stale copy fails with a conflict) and
// leaves c as written; a failed write leaves c as it was.
func (r *ClusterReconciler) writeStatus(ctx context.Context, c *tuskv1alpha1.PostgresCluster) error {
	ctrl.LoggerFrom(ctx).V(1).Info("Writing the status")
	if err := r.Status().Update(ctx, c, client.FieldOwner(StatusOwner)); err != nil {
		return fmt.Errorf("while writing the status of %s: %w", client.ObjectKeyFromObject(c), err)
	}
	return nil
}

// statusChange is a decision recorded in a cluster's status (a target
// primary, a new instance's serial, an upgrade's phase). It may refuse,
// with an error: then nothing is written.
type statusChange func(*tuskv1alpha1.PostgresClusterStatus) error

// recordDecision is how the ClusterReconciler records a decision before it
// acts on it, so that an operator restarted half-way finds it: it applies
// change to c's status and writes the status at once (writeStatus). When
// the change refuses or the write fails, c's status is put back whole as
// it was before (conditions included), so nothing later in the pass, nor
// the status write that ends it, takes for decided what was not recorded.
func (r *ClusterReconciler) recordDecision(ctx context.Context, c *tuskv1alpha1.PostgresCluster, change statusChange) error {
	return recordStatus(ctx, c, change, r.writeStatus)
}

// recordStatus is recordDecision with the status writer as a parameter,
// for a test to make it fail.
func recordStatus(ctx context.Context, c *tuskv1alpha1.PostgresCluster, change statusChange,
	write func(context.Context, *tuskv1alpha1.PostgresCluster) error) error {
	before := c.Status.DeepCopy()
	err := change(&c.Status)
	if err == nil {
		err = write(ctx, c)
	}
	if err != nil {
		c.Status = *before
	}
	return err
}

// BackupStatusOwner is the field manager of every write of a
// PostgresBackup's status: the BackupReconciler's writeStatus is its only
// writer.
const BackupStatusOwner = "tusk-backup-status"

// writeStatus is the one write of a PostgresBackup's status: a merge patch
// against original, skipped when the status did not change, so a
// reconcile of a settled backup costs no API write (and no watch event).
// The patch carries original's resourceVersion (an optimistic lock): a
// status computed from a copy older than the object fails with a
// conflict, which the caller treats with ignoreConflict: the change that
// made the copy stale reconciles the backup again.
func (r *BackupReconciler) writeStatus(ctx context.Context, original, b *tuskv1alpha1.PostgresBackup) error {
	if equality.Semantic.DeepEqual(original.Status, b.Status) {
		return nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Writing the status")
	patch := client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})
	if err := r.Status().Patch(ctx, b, patch, client.FieldOwner(BackupStatusOwner)); err != nil {
		return fmt.Errorf("while writing the status of %s: %w", client.ObjectKeyFromObject(b), err)
	}
	return nil
}

// ignoreConflict drops a conflict error (see writeStatus): the
// object changed since it was read, and that change queues it again.
func ignoreConflict(ctx context.Context, err error) error {
	if apierrors.IsConflict(err) {
		ctrl.LoggerFrom(ctx).V(1).Info("Status not written: the object changed since it was read; reconciling it again")
		return nil
	}
	return err
}
