package controller

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

func instanceServiceAccountName(c *tuskv1alpha1.PostgresCluster) string { return c.Name + "-instance" }
func primaryLeaseName(c *tuskv1alpha1.PostgresCluster) string           { return c.Name + "-primary" }

// reconcileInstanceAccess gives the instance managers the rights they use:
// reading and renewing their cluster's primary Lease, which Tusk creates
// (empty) so they need no right to create Leases; and reading the
// namespace's EndpointSlices, so that a pod being deleted keeps its
// address until no Service sends it connections (instance.TerminationOptions).
func (r *ClusterReconciler) reconcileInstanceAccess(ctx context.Context, c *tuskv1alpha1.PostgresCluster) error {
	for _, obj := range instanceAccessObjects(c) {
		if err := r.applyOwned(ctx, c, obj); err != nil {
			return err
		}
	}
	return nil
}

func instanceAccessObjects(c *tuskv1alpha1.PostgresCluster) []client.Object {
	name := instanceServiceAccountName(c)
	return []client.Object{
		// Its built form never changes, so applyOwned never rewrites it
		// and the holder's spec is the instance managers' alone.
		&coordinationv1.Lease{ObjectMeta: objectMeta(c, primaryLeaseName(c))},
		&corev1.ServiceAccount{ObjectMeta: objectMeta(c, name)},
		&rbacv1.Role{
			ObjectMeta: objectMeta(c, name),
			Rules: []rbacv1.PolicyRule{{
				APIGroups:     []string{coordinationv1.GroupName},
				Resources:     []string{"leases"},
				ResourceNames: []string{primaryLeaseName(c)},
				Verbs:         []string{"get", "update"},
			}, {
				APIGroups: []string{discoveryv1.GroupName},
				Resources: []string{"endpointslices"},
				Verbs:     []string{"list"},
			}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: objectMeta(c, name),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: c.Namespace}},
		},
	}
}
