package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// reconcileServices makes the -rw, -ro and -r Services exist. Endpoints
// list ready pods only, so -ro and -r follow instance readiness. After a
// cluster's logical import from this one is cut over, they select that
// cluster's instances instead (cluster_takeover.go).
// It returns the cluster they select when it is not c.
func (r *ClusterReconciler) reconcileServices(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (string, error) {
	by, err := r.servingCluster(ctx, c)
	if err != nil {
		return "", err
	}
	for _, svc := range clusterServices(c, by) {
		if err := r.applyOwned(ctx, c, svc); err != nil {
			return "", err
		}
	}
	return by, nil
}

// clusterServices are c's Services, selecting the instances of c, or of
// servedBy when it is set.
func clusterServices(c *tuskv1alpha1.PostgresCluster, servedBy string) []*corev1.Service {
	selected := c
	if servedBy != "" {
		selected = siblingCluster(c.Namespace, servedBy)
	}
	withRole := func(role instanceapi.Role) map[string]string {
		s := clusterLabels(selected)
		if role != "" {
			s[LabelRole] = string(role)
		}
		return s
	}
	return []*corev1.Service{
		service(c, rwServiceName(c), withRole(instanceapi.RolePrimary)),
		service(c, roServiceName(c), withRole(instanceapi.RoleReplica)),
		service(c, rServiceName(c), withRole("")),
	}
}

func service(c *tuskv1alpha1.PostgresCluster, name string, selector map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: objectMeta(c, name),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: selector,
			Ports: []corev1.ServicePort{{
				Name: "postgres", Port: postgresPort, TargetPort: intstr.FromString("postgres"), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// reconcilePDBs lets a voluntary disruption (a node drain, an eviction)
// take one instance at a time, and none while any instance is not ready.
// The primary is not exempt: its manager answers SIGTERM by waiting for a
// handover, which the operator makes a switchover to a streaming standby
// (reconcileHandover), so evicting it costs what a switchover costs. A
// budget that refused to evict the primary would block every drain of its
// node instead. A single instance has no budget: it would block every
// drain forever.
func (r *ClusterReconciler) reconcilePDBs(ctx context.Context, c *tuskv1alpha1.PostgresCluster) error {
	pdb := clusterPDB(c)
	if c.Spec.Instances > 1 {
		if err := r.applyOwned(ctx, c, pdb); err != nil {
			return err
		}
	} else if err := r.Delete(ctx, pdb); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	// Budgets of earlier versions: one kept the primary from ever being
	// evicted.
	for _, name := range []string{c.Name + "-primary", c.Name + "-replicas"} {
		old := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
		if err := r.deleteOwned(ctx, c, old); err != nil {
			return err
		}
	}
	return nil
}

func clusterPDB(c *tuskv1alpha1.PostgresCluster) *policyv1.PodDisruptionBudget {
	one := intstr.FromInt32(1)
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: objectMeta(c, c.Name),
		Spec: policyv1.PodDisruptionBudgetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: clusterLabels(c)},
			MaxUnavailable: &one,
		},
	}
}
