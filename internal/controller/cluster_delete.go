package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// reconcileDelete deletes the volumes of a deleted cluster when its reclaim
// policy says so, or else keeps the Secrets their data needs with them;
// then lets it go. Pods, Services, the other Secrets and the rest are owned
// by the cluster and go with it.
func (r *ClusterReconciler) reconcileDelete(ctx context.Context, c *tuskv1alpha1.PostgresCluster) error {
	if !controllerutil.ContainsFinalizer(c, FinalizerCleanup) {
		return nil
	}
	if c.Spec.Storage.ReclaimPolicy == tuskv1alpha1.ReclaimDelete {
		err := r.DeleteAllOf(ctx, &corev1.PersistentVolumeClaim{}, client.InNamespace(c.Namespace), client.MatchingLabels(clusterLabels(c)))
		if err != nil {
			return fmt.Errorf("while deleting the volumes: %w", err)
		}
		r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonDeletedVolumes, "Delete", "Deleted the volumes of %s (reclaimPolicy Delete)", c.Name)
	} else if err := r.keepCredentials(ctx, c); err != nil {
		return err
	}
	patch := client.MergeFrom(c.DeepCopy())
	controllerutil.RemoveFinalizer(c, FinalizerCleanup)
	if err := r.Patch(ctx, c, patch); err != nil {
		return fmt.Errorf("while removing the finalizer: %w", err)
	}
	return nil
}

// keepCredentials keeps the superuser and owner Secrets of a cluster whose
// volumes stay: the data keeps those roles' passwords, so a cluster created
// again on the volumes (adoptVolumes) must log in with them, and a new
// password would lock its own instance managers out. Each is released from
// the cluster (garbage collection would delete it) and marked as kept for
// a cluster of this name, which takes it over (applyOwned). Secrets of the
// user's (spec.superuserSecret, the initdb Secret) are not Tusk's to keep.
func (r *ClusterReconciler) keepCredentials(ctx context.Context, c *tuskv1alpha1.PostgresCluster) error {
	var kept []string
	for _, name := range []string{superuserSecretName(c), appSecretName(c)} {
		s := &corev1.Secret{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, s); err != nil {
			if client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("while reading the Secret %s to keep it with the volumes: %w", name, err)
			}
			continue
		}
		if !metav1.IsControlledBy(s, c) {
			continue
		}
		s.OwnerReferences = nil
		setAnnotation(s, AnnotationKeptFor, c.Name)
		if err := r.Update(ctx, s); err != nil { // the operator may update Secrets, not patch them
			return fmt.Errorf("while keeping the Secret %s with the volumes: %w", name, err)
		}
		kept = append(kept, name)
	}
	if len(kept) > 0 {
		r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonKeptSecrets, "Delete",
			"Kept the Secrets %v with the volumes (reclaimPolicy Retain): a cluster %s created again on the volumes logs in with them; delete them with the volumes", kept, c.Name)
	}
	return nil
}

// keptFor says whether existing is a Secret keepCredentials kept for a
// cluster of owner's name: no controller, the mark and the cluster label.
func keptFor(existing, owner client.Object) bool {
	_, secret := existing.(*corev1.Secret)
	return secret && metav1.GetControllerOf(existing) == nil &&
		existing.GetAnnotations()[AnnotationKeptFor] == owner.GetName() &&
		existing.GetLabels()[LabelCluster] == owner.GetName()
}
