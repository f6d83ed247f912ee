//go:build integration

package controller

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// TestRecordDecisionWritesThroughTheOneWritePath: recordDecision against
// the API server. A write from a stale copy (refused with a conflict, the
// write's optimistic lock) leaves the status in memory as it was before
// the decision, conditions included; a write from a fresh copy keeps the
// decision; and the status stays written by StatusOwner alone.
func TestRecordDecisionWritesThroughTheOneWritePath(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	create(t, newCluster(ns))
	key := client.ObjectKey{Namespace: ns, Name: "pg"}
	c := clusterWhen(t, key, creating)
	r := &ClusterReconciler{Client: env.Client}
	decide := func(c *tuskv1alpha1.PostgresCluster) statusChange {
		return func(s *tuskv1alpha1.PostgresClusterStatus) error {
			s.LastInstanceSerial += 10
			markSwitched(c) // conditions and phase
			return nil
		}
	}

	// The cluster changes after c was read: c is stale.
	patch := client.MergeFrom(c.DeepCopy())
	stale := c.DeepCopy()
	c.Annotations = map[string]string{"example.com/touched": "yes"}
	if err := env.Client.Patch(ctx, c, patch); err != nil {
		t.Fatal(err)
	}
	before := stale.Status.DeepCopy()
	if err := r.recordDecision(ctx, stale, decide(stale)); !apierrors.IsConflict(err) {
		t.Fatalf("a write from a stale copy: %v, want a conflict", err)
	}
	if !equality.Semantic.DeepEqual(&stale.Status, before) {
		t.Errorf("a failed write left the decision in memory:\n got %+v\nwant %+v", stale.Status, *before)
	}

	// The reconciler may write between a read and the decision's write.
	var fresh *tuskv1alpha1.PostgresCluster
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		fresh = &tuskv1alpha1.PostgresCluster{}
		if err := env.Client.Get(ctx, key, fresh); err != nil {
			return err
		}
		return r.recordDecision(ctx, fresh, decide(fresh))
	})
	if err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(fresh.Status.Conditions, tuskv1alpha1.ConditionReady)
	if fresh.Status.LastInstanceSerial < 11 || ready == nil || ready.Reason != tuskv1alpha1.ReasonSwitchingOver {
		t.Errorf("the decision was not kept as written: lastInstanceSerial %d, Ready %+v", fresh.Status.LastInstanceSerial, ready)
	}
	if err := statusWriters(fresh, StatusOwner); err != nil {
		t.Error(err)
	}
}
