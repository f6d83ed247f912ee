package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// operatorPodLabels are the labels of the operator's pods
// (config/manager/deployment.yaml).
var operatorPodLabels = map[string]string{"app.kubernetes.io/name": "tusk", "app.kubernetes.io/component": "operator"}

// reconcileNetworkPolicy keeps the NetworkPolicy <cluster>, or deletes
// Tusk's when the user disabled it.
func (r *ClusterReconciler) reconcileNetworkPolicy(ctx context.Context, c *tuskv1alpha1.PostgresCluster) error {
	np := clusterNetworkPolicy(c, r.Config.OperatorNamespace)
	if c.Spec.NetworkPolicy != nil && c.Spec.NetworkPolicy.Disabled {
		return r.deleteOwned(ctx, c, np)
	}
	return r.applyOwned(ctx, c, np)
}

// clusterNetworkPolicy admits to the cluster's pods: PostgreSQL from
// anyone (or from spec.networkPolicy.postgresFrom, the cluster's own
// instances, its SLI probe and its PostgresPoolers' pods), and the instance managers' port from the operator's pods
// (in operatorNamespace; any namespace when unknown) and
// spec.networkPolicy.metricsFrom. The managers' commands need the
// operator's client certificate anyway; the policy keeps everyone else
// from even trying, or from asking for readiness and metrics in a loop.
// The kubelet's probes come from the node, which network plugins admit.
func clusterNetworkPolicy(c *tuskv1alpha1.PostgresCluster, operatorNamespace string) *networkingv1.NetworkPolicy {
	spec := tuskv1alpha1.NetworkPolicySpec{}
	if c.Spec.NetworkPolicy != nil {
		spec = *c.Spec.NetworkPolicy
	}
	tcp := func(port int) []networkingv1.NetworkPolicyPort {
		p := intstr.FromInt(port)
		proto := corev1.ProtocolTCP
		return []networkingv1.NetworkPolicyPort{{Protocol: &proto, Port: &p}}
	}
	instances := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: clusterLabels(c)}}
	var postgresFrom []networkingv1.NetworkPolicyPeer
	if len(spec.PostgresFrom) > 0 {
		postgresFrom = append([]networkingv1.NetworkPolicyPeer{instances}, spec.PostgresFrom...)
		if probeEnabled(c) {
			probe := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelProbeOf: c.Name}}}
			postgresFrom = append(postgresFrom, probe)
		}
		poolers := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelPoolerOf: c.Name}}}
		postgresFrom = append(postgresFrom, poolers)
	}
	operator := networkingv1.NetworkPolicyPeer{
		PodSelector:       &metav1.LabelSelector{MatchLabels: operatorPodLabels},
		NamespaceSelector: &metav1.LabelSelector{},
	}
	if operatorNamespace != "" {
		operator.NamespaceSelector.MatchLabels = map[string]string{corev1.LabelMetadataName: operatorNamespace}
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: objectMeta(c, c.Name),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: clusterLabels(c)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: tcp(postgresPort), From: postgresFrom},
				{Ports: tcp(instanceapi.DefaultStatusPort), From: append([]networkingv1.NetworkPolicyPeer{operator}, spec.MetricsFrom...)},
			},
		},
	}
}
