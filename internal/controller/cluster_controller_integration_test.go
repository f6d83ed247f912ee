//go:build integration

package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/testenv"
)

const waitTimeout = 30 * time.Second

func newCluster(ns string) *tuskv1alpha1.PostgresCluster {
	return &tuskv1alpha1.PostgresCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "pg", Namespace: ns},
		Spec: tuskv1alpha1.PostgresClusterSpec{
			Instances: 3,
			Storage:   tuskv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
		},
	}
}

// observed waits until the cluster's status describes its current spec.
func observed(t *testing.T, key client.ObjectKey) *tuskv1alpha1.PostgresCluster {
	t.Helper()
	got := &tuskv1alpha1.PostgresCluster{}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		if err := env.Client.Get(ctx, key, got); err != nil {
			return err
		}
		if got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", got.Status.ObservedGeneration, got.Generation)
		}
		return nil
	})
	return got
}

func TestClusterStatusIsWritten(t *testing.T) {
	ctx := context.Background()
	cluster := newCluster(newNamespace(t))
	if err := env.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	got := observed(t, client.ObjectKeyFromObject(cluster))

	ready := meta.FindStatusCondition(got.Status.Conditions, ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionUnknown || ready.Reason != ReasonLifecycleNotImplemented {
		t.Fatalf("Ready condition %+v, want Unknown/%s", ready, ReasonLifecycleNotImplemented)
	}
	if got.Status.Phase != tuskv1alpha1.ClusterPhasePending {
		t.Errorf("phase %q, want Pending", got.Status.Phase)
	}
	if got.Status.Selector != "tusk.dev/cluster=pg" {
		t.Errorf("selector %q, want tusk.dev/cluster=pg", got.Status.Selector)
	}

	// A spec change is observed; the unchanged condition keeps its
	// transition time, so users can tell how long it has been so.
	got.Spec.PostgreSQL.Parameters = map[string]string{"work_mem": "8MB"}
	if err := env.Client.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	updated := observed(t, client.ObjectKeyFromObject(cluster))
	if updated.Generation != 2 {
		t.Fatalf("generation %d after one spec change, want 2", updated.Generation)
	}
	after := meta.FindStatusCondition(updated.Status.Conditions, ConditionReady)
	if !after.LastTransitionTime.Equal(&ready.LastTransitionTime) || after.ObservedGeneration != 2 {
		t.Errorf("Ready after the change %+v; want transition time %v kept and observedGeneration 2", after, ready.LastTransitionTime)
	}
}

// TestSettledClusterIsNotRewritten: reconciling an object whose status is
// already right makes no API write, so an operator restart or resync changes
// nothing that is healthy.
func TestSettledClusterIsNotRewritten(t *testing.T) {
	ctx := context.Background()
	cluster := newCluster(newNamespace(t))
	if err := env.Client.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	settled := observed(t, client.ObjectKeyFromObject(cluster))

	r := &ClusterReconciler{Client: env.Client}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cluster)}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	again := &tuskv1alpha1.PostgresCluster{}
	if err := env.Client.Get(ctx, req.NamespacedName, again); err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != settled.ResourceVersion {
		t.Fatalf("resourceVersion went from %s to %s: a settled cluster was rewritten", settled.ResourceVersion, again.ResourceVersion)
	}
}

func TestReconcileOfDeletedClusterIsQuiet(t *testing.T) {
	r := &ClusterReconciler{Client: env.Client}
	req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: newNamespace(t), Name: "gone"}}
	if res, err := r.Reconcile(context.Background(), req); err != nil || !res.IsZero() {
		t.Fatalf("reconcile of a missing cluster: %+v, %v; want no requeue and no error", res, err)
	}
}
