package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// reconcileDelete deletes the volumes of a deleted cluster when its reclaim
// policy says so, then lets it go. Pods, Services, Secrets and the rest are
// owned by the cluster and go with it.
func (r *ClusterReconciler) reconcileDelete(ctx context.Context, c *tuskv1alpha1.PostgresCluster) error {
	if !controllerutil.ContainsFinalizer(c, FinalizerCleanup) {
		return nil
	}
	if c.Spec.Storage.ReclaimPolicy == tuskv1alpha1.ReclaimDelete {
		err := r.DeleteAllOf(ctx, &corev1.PersistentVolumeClaim{}, client.InNamespace(c.Namespace), client.MatchingLabels(clusterLabels(c)))
		if err != nil {
			return fmt.Errorf("while deleting the volumes: %w", err)
		}
		r.event(c, corev1.EventTypeNormal, "DeletedVolumes", "Delete", "Deleted the volumes of %s (reclaimPolicy Delete)", c.Name)
	}
	patch := client.MergeFrom(c.DeepCopy())
	controllerutil.RemoveFinalizer(c, FinalizerCleanup)
	if err := r.Patch(ctx, c, patch); err != nil {
		return fmt.Errorf("while removing the finalizer: %w", err)
	}
	return nil
}
