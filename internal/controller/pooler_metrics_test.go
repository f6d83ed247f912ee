package controller

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

func TestPoolerMetrics(t *testing.T) {
	p := &tuskv1alpha1.PostgresPooler{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-rw"},
		Spec: tuskv1alpha1.PostgresPoolerSpec{Cluster: corev1.LocalObjectReference{Name: "orders"}, Instances: 3}}
	p.Status.Instances, p.Status.ReadyInstances = 3, 2
	want := `
# HELP tusk_pooler_instances PgBouncer pods the pooler's spec asks for (labelled with the cluster it pools for).
# TYPE tusk_pooler_instances gauge
tusk_pooler_instances{cluster="orders",namespace="shop",pooler="orders-rw"} 3
# HELP tusk_pooler_instances_ready PgBouncer pods of the pooler that are ready (status.readyInstances).
# TYPE tusk_pooler_instances_ready gauge
tusk_pooler_instances_ready{cluster="orders",namespace="shop",pooler="orders-rw"} 2
`
	if err := testutil.CollectAndCompare(metricsOf(poolerMetrics(p)), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
