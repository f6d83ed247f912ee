package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// patchStatusIfChanged writes updated's status subresource as a merge patch
// against original, and skips the write when the status did not change, so
// a reconcile of a settled object costs no API write (and no watch event).
func patchStatusIfChanged(ctx context.Context, c client.Client, original, updated client.Object, oldStatus, newStatus any) error {
	if equality.Semantic.DeepEqual(oldStatus, newStatus) {
		return nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Updating status")
	if err := c.Status().Patch(ctx, updated, client.MergeFrom(original)); err != nil {
		return fmt.Errorf("while updating the status of %s: %w", client.ObjectKeyFromObject(updated), err)
	}
	return nil
}
