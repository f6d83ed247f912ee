package controller

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// A deleted cluster's counters and durations leave no series; another
// cluster's stay.
func TestForgetClusterCounters(t *testing.T) {
	gone := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "counters", Name: "gone"}}
	kept := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "counters", Name: "kept"}}
	observePrimaryChange(gone, "failover", time.Second)
	observePrimaryChange(gone, "switchover", time.Second)
	observePrimaryChange(kept, "switchover", time.Second)
	if got := testutil.ToFloat64(primaryChanges.WithLabelValues("counters", "gone", "failover")); got != 1 {
		t.Fatalf("failovers of counters/gone: %v, want 1", got)
	}
	if got := testutil.ToFloat64(primaryChangeSeconds.WithLabelValues("counters", "gone", "switchover")); got != 1 {
		t.Fatalf("last switchover of counters/gone took %vs, want 1", got)
	}
	forgetClusterCounters(types.NamespacedName{Namespace: "counters", Name: "gone"})
	if primaryChangeSeconds.DeleteLabelValues("counters", "gone", "failover") {
		t.Error("a failover duration of a deleted cluster is left")
	}
	for _, kind := range []string{"failover", "switchover"} {
		if primaryChanges.DeleteLabelValues("counters", "gone", kind) {
			t.Errorf("a %s series of a deleted cluster is left", kind)
		}
	}
	if !primaryChanges.DeleteLabelValues("counters", "kept", "switchover") {
		t.Error("forgetting one cluster dropped another's series")
	}
}

// A primary change is timed from when the reconciler noted its start,
// and the start is forgotten once it is recorded.
func TestPrimaryChangeIsTimedFromItsStart(t *testing.T) {
	r := &ClusterReconciler{}
	c := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "counters", Name: "timed"}}
	key := "counters/timed"
	r.changingPrimary.heldFor(key, time.Now().Add(-3*time.Second))
	r.observePrimaryChange(c, "failover")
	if got := testutil.ToFloat64(primaryChangeSeconds.WithLabelValues("counters", "timed", "failover")); got < 3 || got > 60 {
		t.Errorf("the failover took %vs, want about 3", got)
	}
	if held := r.changingPrimary.heldFor(key, time.Now()); held != 0 {
		t.Errorf("the start is still noted (%s ago) after the change was recorded", held)
	}
	forgetClusterCounters(types.NamespacedName{Namespace: "counters", Name: "timed"})
}
