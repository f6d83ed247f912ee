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
// list ready pods only, so -ro and -r follow instance readiness.
func (r *ClusterReconciler) reconcileServices(ctx context.Context, c *tuskv1alpha1.PostgresCluster) error {
	for _, svc := range clusterServices(c) {
		if err := r.applyOwned(ctx, c, svc); err != nil {
			return err
		}
	}
	return nil
}

func clusterServices(c *tuskv1alpha1.PostgresCluster) []*corev1.Service {
	withRole := func(role instanceapi.Role) map[string]string {
		s := clusterLabels(c)
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

// reconcilePDBs keeps a voluntary disruption (a node drain) from taking the
// primary, or more than one replica at a time. A single instance has no
// budget: it would block every drain forever.
func (r *ClusterReconciler) reconcilePDBs(ctx context.Context, c *tuskv1alpha1.PostgresCluster) error {
	for _, pdb := range clusterPDBs(c) {
		if c.Spec.Instances > 1 {
			if err := r.applyOwned(ctx, c, pdb); err != nil {
				return err
			}
			continue
		}
		if err := r.Delete(ctx, pdb); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

func clusterPDBs(c *tuskv1alpha1.PostgresCluster) []*policyv1.PodDisruptionBudget {
	pdb := func(name string, role instanceapi.Role, minAvailable, maxUnavailable *intstr.IntOrString) *policyv1.PodDisruptionBudget {
		sel := clusterLabels(c)
		sel[LabelRole] = string(role)
		return &policyv1.PodDisruptionBudget{
			ObjectMeta: objectMeta(c, name),
			Spec: policyv1.PodDisruptionBudgetSpec{
				Selector:       &metav1.LabelSelector{MatchLabels: sel},
				MinAvailable:   minAvailable,
				MaxUnavailable: maxUnavailable,
			},
		}
	}
	one := intstr.FromInt32(1)
	return []*policyv1.PodDisruptionBudget{
		pdb(c.Name+"-primary", instanceapi.RolePrimary, &one, nil),
		pdb(c.Name+"-replicas", instanceapi.RoleReplica, nil, &one),
	}
}
