//go:build integration

package controller

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// A target primary set by hand (kubectl patch, kubectl tusk promote) that
// is not an instance of the cluster is put back, with a Warning Event, and
// the primary keeps its label.
func TestUnknownSwitchoverTargetIsRefused(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cluster := newCluster(ns)
	create(t, cluster)
	key := client.ObjectKeyFromObject(cluster)
	clusterWhen(t, key, creating)

	// The controller writes status too: a conflict means our read was
	// stale, so read again and set the target on what it wrote.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &tuskv1alpha1.PostgresCluster{}
		if err := env.Client.Get(ctx, key, c); err != nil {
			return err
		}
		patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
		c.Status.TargetPrimary = "pg-9"
		return env.Client.Status().Patch(ctx, c, patch)
	})
	if err != nil {
		t.Fatal(err)
	}
	e := waitForEvent(t, ns, tuskv1alpha1.ReasonSwitchoverRefused, "pg-9")
	if e.Type != corev1.EventTypeWarning {
		t.Errorf("Event %s, want a Warning", e.Type)
	}
	clusterWhen(t, key, func(c *tuskv1alpha1.PostgresCluster) error {
		if c.Status.TargetPrimary != "pg-1" || c.Status.CurrentPrimary != "pg-1" {
			return fmt.Errorf("targetPrimary %q, currentPrimary %q; want both pg-1", c.Status.TargetPrimary, c.Status.CurrentPrimary)
		}
		return nil
	})
	if pod := get(t, ns, "pg-1", &corev1.Pod{}); pod.Labels[LabelRole] != "primary" {
		t.Errorf("pg-1 has role label %q, want primary", pod.Labels[LabelRole])
	}
}

// A pod deleted since the pass read it needs no label: labelling it is not
// an error, which would have stopped the pass before it labelled the new
// primary (a failed primary's pod goes away while its failover runs).
func TestLabellingAGonePodIsNotAnError(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg-1", Labels: map[string]string{LabelRole: "primary"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres"}}},
	}
	create(t, pod)
	read := pod.DeepCopy()
	if err := env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	r := &ClusterReconciler{Client: env.Client}
	if err := r.labelRole(ctx, &member{name: "pg-1", pod: read}, "replica"); err != nil {
		t.Fatalf("labelling a deleted pod: %v", err)
	}
	live := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg-2", Labels: map[string]string{LabelRole: "replica"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres"}}},
	}
	create(t, live)
	if err := r.labelRole(ctx, &member{name: "pg-2", pod: live}, "primary"); err != nil {
		t.Fatal(err)
	}
	if got := get(t, ns, "pg-2", &corev1.Pod{}); got.Labels[LabelRole] != "primary" {
		t.Errorf("pg-2 has role label %q, want primary", got.Labels[LabelRole])
	}
}

// A switchover asked for with the annotation (kubectl tusk promote) to an
// instance that cannot take over (here, not created yet: a new cluster
// makes its first instance first) is refused with a Warning Event that
// says why, the request is removed, and the status keeps its primary.
func TestSwitchoverRequestThatCannotBeMetIsRefused(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cluster := newCluster(ns)
	create(t, cluster)
	key := client.ObjectKeyFromObject(cluster)
	clusterWhen(t, key, creating)

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &tuskv1alpha1.PostgresCluster{}
		if err := env.Client.Get(ctx, key, c); err != nil {
			return err
		}
		patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
		c.Annotations = map[string]string{tuskv1alpha1.AnnotationSwitchoverTo: "pg-2"}
		return env.Client.Patch(ctx, c, patch)
	})
	if err != nil {
		t.Fatal(err)
	}
	e := waitForEvent(t, ns, tuskv1alpha1.ReasonSwitchoverRefused, "pg-2: it is not an instance of this cluster")
	if e.Type != corev1.EventTypeWarning {
		t.Errorf("Event %s, want a Warning", e.Type)
	}
	clusterWhen(t, key, func(c *tuskv1alpha1.PostgresCluster) error {
		if _, asked := c.Annotations[tuskv1alpha1.AnnotationSwitchoverTo]; asked {
			return fmt.Errorf("the request is still there: %v", c.Annotations)
		}
		if c.Status.TargetPrimary != "pg-1" || c.Status.CurrentPrimary != "pg-1" {
			return fmt.Errorf("targetPrimary %q, currentPrimary %q; want both pg-1", c.Status.TargetPrimary, c.Status.CurrentPrimary)
		}
		return nil
	})
}
