package controller

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// reconcileDelete has the primary of a deleted cluster drop its logical
// import's slots on the source (abandonImport), then deletes the volumes
// when the reclaim policy says so, or else keeps the Secrets their data
// needs with them; then lets it go. Pods, Services, the other Secrets and
// the rest are owned by the cluster and go with it.
func (r *ClusterReconciler) reconcileDelete(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(c, FinalizerCleanup) {
		return ctrl.Result{}, nil
	}
	if retry, err := r.abandonImport(ctx, c); err != nil || retry {
		return ctrl.Result{RequeueAfter: pollChanging}, err
	}
	return ctrl.Result{}, r.releaseVolumes(ctx, c)
}

// releaseVolumes deletes the volumes, or keeps the credentials their data
// needs, and removes the finalizer.
func (r *ClusterReconciler) releaseVolumes(ctx context.Context, c *tuskv1alpha1.PostgresCluster) error {
	if c.Spec.Storage.ReclaimPolicy == tuskv1alpha1.ReclaimDelete {
		err := r.DeleteAllOf(ctx, &corev1.PersistentVolumeClaim{}, client.InNamespace(c.Namespace), client.MatchingLabels(clusterLabels(c)))
		if err != nil {
			return fmt.Errorf("while deleting the volumes: %w", err)
		}
		r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonDeletedVolumes, "Delete", "Deleted the volumes of %s (reclaimPolicy Delete)", c.Name)
	} else if err := r.keepCredentials(ctx, c); err != nil {
		return err
	}
	if err := r.keys.remove(ctx, r.Client, c.Namespace, c.Name); err != nil {
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

// abandonGrace is how long a deleted cluster with a logical import not cut
// over waits for its primary to drop the import's slots on the source.
func (r *ClusterReconciler) abandonGrace() time.Duration {
	return cmp.Or(r.Config.ImportAbandonGrace, 2*time.Minute)
}

// abandonImport asks the primary of a deleted cluster whose logical import
// was not cut over to drop its subscriptions: each drops its slot on the
// source, which would otherwise keep the source's WAL without end. Until
// abandonGrace after the deletion a failed request is tried again (retry:
// the cluster stays); after it, or with no primary pod to ask, the
// deletion goes on and a Warning names the slots to drop by hand.
func (r *ClusterReconciler) abandonImport(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (retry bool, err error) {
	if !logicalImport(c) || (c.Status.Import != nil && c.Status.Import.Phase == tuskv1alpha1.ImportCutOver) {
		return false, nil
	}
	pod, err := r.primaryPod(ctx, c)
	if err != nil {
		return false, err
	}
	if pod == nil {
		if c.Status.Import != nil { // it followed the source: slots are there
			r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonImportSlotsLeft, "Delete", "%s", slotsLeftHint("the primary's pod is gone"))
		}
		return false, nil
	}
	res, err := r.askAbandonImport(ctx, c, pod)
	switch {
	case err != nil && time.Since(c.DeletionTimestamp.Time) < r.abandonGrace():
		ctrlLog(ctx).Info("Asking the primary to drop the logical import's slots on the source", "error", err.Error())
		return true, nil
	case err != nil:
		r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonImportSlotsLeft, "Delete", "%s", slotsLeftHint(err.Error()))
	case len(res.Left) > 0:
		r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonImportSlotsLeft, "Delete",
			"The source could not be reached: drop the slots %v there, or they keep its WAL (SELECT pg_drop_replication_slot('<slot>'))", res.Left)
	case len(res.Dropped) > 0:
		r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonImportAbandoned, "Delete",
			"Dropped the logical import's subscriptions and their slots %v on the source", res.Dropped)
	}
	return false, nil
}

// primaryPod is the pod of the cluster's current primary, nil when there
// is none.
func (r *ClusterReconciler) primaryPod(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (*corev1.Pod, error) {
	if c.Status.CurrentPrimary == "" {
		return nil, nil
	}
	pod := &corev1.Pod{}
	err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Status.CurrentPrimary}, pod)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pod, err
}

func slotsLeftHint(why string) string {
	return "Could not drop the logical import's slots on the source (" + why + "): drop them there, or they keep its WAL: " +
		"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'tusk_import_%' AND NOT active"
}

// askAbandonImport sends POST /v1/import/abandon to the primary's manager.
func (r *ClusterReconciler) askAbandonImport(ctx context.Context, c *tuskv1alpha1.PostgresCluster, pod *corev1.Pod) (instanceapi.ImportAbandonResult, error) {
	var res instanceapi.ImportAbandonResult
	ic, err := instanceClientFor(ctx, r.keys, &r.clients, c)
	if err != nil {
		return res, err
	}
	if ic == nil {
		return res, fmt.Errorf("the cluster %s has no keys Secret in the operator's namespace", c.Name)
	}
	err = ic.call(ctx, pod, http.MethodPost, instanceapi.PathImportAbandon, nil, &res)
	return res, err
}
