package controller

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// A deleted cluster's counters leave no series; another cluster's stay.
func TestForgetClusterCounters(t *testing.T) {
	gone := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "counters", Name: "gone"}}
	kept := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "counters", Name: "kept"}}
	observePrimaryChange(gone, "failover")
	observePrimaryChange(gone, "switchover")
	observePrimaryChange(kept, "switchover")
	if got := testutil.ToFloat64(primaryChanges.WithLabelValues("counters", "gone", "failover")); got != 1 {
		t.Fatalf("failovers of counters/gone: %v, want 1", got)
	}
	forgetClusterCounters(types.NamespacedName{Namespace: "counters", Name: "gone"})
	for _, kind := range []string{"failover", "switchover"} {
		if primaryChanges.DeleteLabelValues("counters", "gone", kind) {
			t.Errorf("a %s series of a deleted cluster is left", kind)
		}
	}
	if !primaryChanges.DeleteLabelValues("counters", "kept", "switchover") {
		t.Error("forgetting one cluster dropped another's series")
	}
}
