package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// ClusterReconciler drives PostgresClusters towards their spec.
type ClusterReconciler struct {
	client.Client
}

// +kubebuilder:rbac:groups=tusk.dev,resources=postgresclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=tusk.dev,resources=postgresclusters/status,verbs=get;update;patch

// Reconcile observes one PostgresCluster and writes what it saw to status.
// Later phases (create, scale, fail over, ...) slot in before the status
// write, which happens once, at the end, and only when something changed.
func (r *ClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster := &tuskv1alpha1.PostgresCluster{}
	if err := r.Get(ctx, req.NamespacedName, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	original := cluster.DeepCopy()
	setClusterStatus(cluster)
	return ctrl.Result{}, patchStatusIfChanged(ctx, r.Client, original, cluster, original.Status, cluster.Status)
}

// setClusterStatus records what this build knows: the spec generation it has
// seen, and that readiness is unknown because instances are not created yet.
func setClusterStatus(cluster *tuskv1alpha1.PostgresCluster) {
	cluster.Status.ObservedGeneration = cluster.Generation
	cluster.Status.Phase = tuskv1alpha1.ClusterPhasePending
	cluster.Status.Selector = metav1.FormatLabelSelector(&metav1.LabelSelector{
		MatchLabels: map[string]string{LabelCluster: cluster.Name},
	})
	meta.SetStatusCondition(&cluster.Status.Conditions, metav1.Condition{
		Type:               ConditionReady,
		Status:             metav1.ConditionUnknown,
		Reason:             ReasonLifecycleNotImplemented,
		Message:            "This Tusk build validates and records PostgresClusters but does not create PostgreSQL instances yet",
		ObservedGeneration: cluster.Generation,
	})
}

// SetupWithManager registers the reconciler with mgr.
func (r *ClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&tuskv1alpha1.PostgresCluster{}).
		Named("postgrescluster").
		Complete(r)
}
