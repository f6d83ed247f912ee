//go:build integration

package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/testenv"
)

const waitTimeout = 30 * time.Second

// testConfig is the reconcilers' configuration in these tests; pods never
// run in envtest, so the image only has to be a valid name.
var testConfig = Config{InstanceManagerImage: "tusk/operator:test"}

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

	r := &ClusterReconciler{Client: env.Client, Config: testConfig}
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
