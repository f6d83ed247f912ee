package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// patchStatusIfChanged writes updated's status subresource as a merge patch
// against original, and skips the write when the status did not change, so
// a reconcile of a settled object costs no API write (and no watch event).
//
// The patch carries updated's resourceVersion (an optimistic lock): a merge
// patch replaces the conditions list as a whole, so a patch computed from
// an older copy would drop the conditions another writer set since (the
// backup schedule reconciler's, on a cluster). Such a write fails with a
// conflict, which callers treat with ignoreConflict: the other write's
// watch event reconciles the object again, from the newer copy.
func patchStatusIfChanged(ctx context.Context, c client.Client, original, updated client.Object, oldStatus, newStatus any) error {
	if equality.Semantic.DeepEqual(oldStatus, newStatus) {
		return nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Updating status")
	if err := c.Status().Patch(ctx, updated, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("while updating the status of %s: %w", client.ObjectKeyFromObject(updated), err)
	}
	return nil
}

// ignoreConflict drops a conflict error (see patchStatusIfChanged): the
// object changed since it was read, and that change queues it again.
func ignoreConflict(ctx context.Context, err error) error {
	if apierrors.IsConflict(err) {
		ctrl.LoggerFrom(ctx).V(1).Info("Status not written: the object changed since it was read; reconciling it again")
		return nil
	}
	return err
}
