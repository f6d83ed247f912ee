//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// TestFailoverWhenThePrimaryPodIsDeleted: deleting the primary's pod
// hands its role over to the most advanced replica (a switchover while the
// terminating primary still serves) instead of waiting for the pod to
// come back; every committed row survives (synchronous quorum), the -rw
// Service follows the new primary, and the old primary returns as a
// replica of it on the new timeline.
func TestFailoverWhenThePrimaryPodIsDeleted(t *testing.T) {
	serial(t, measuresWriteGap)
	ns := newNamespace(t)
	const name = "fo"
	createCluster(t, newCluster(ns, name, 3), "")
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, 3, time.Minute)
	startSQLClient(t, ns, name)
	psql(t, ns, name+"-rw", "CREATE TABLE lifecycle (id int PRIMARY KEY)")
	insertRows(t, ns, name, 1, 100)
	old := mustGetCluster(t, ns, name)
	oldPrimary, oldTimeline := old.Status.CurrentPrimary, primaryTimeline(old)

	start := time.Now()
	// Not deletePod: it waits for the pod to be gone, and the operator may
	// recreate it (as a replica) before a poll sees it gone.
	if err := clientset.CoreV1().Pods(ns).Delete(context.Background(), oldPrimary, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var newPrimary string
	eventuallyEvery(t, 2*time.Minute, 200*time.Millisecond, "a replica promoted in place of "+oldPrimary, func(ctx context.Context) (bool, error) {
		pgc, err := getCluster(ctx, ns, name)
		newPrimary = pgc.Status.CurrentPrimary
		return err == nil && newPrimary != oldPrimary, err
	})
	promoted := time.Since(start)
	eventuallyEvery(t, time.Minute, 200*time.Millisecond, "a write through "+name+"-rw", func(ctx context.Context) (bool, error) {
		_, err := tryPSQL(ctx, ns, name+"-rw", "INSERT INTO lifecycle VALUES (101)")
		return err == nil, nil
	})
	t.Logf("figure: primary pod deleted → %s recorded primary in %.1fs, first write through -rw after %.1fs",
		newPrimary, promoted.Seconds(), time.Since(start).Seconds())
	waitEvent(t, ns, tuskv1alpha1.ReasonSwitchedOver, newPrimary+" is the primary; "+oldPrimary+" follows it")

	// The old primary comes back on its volume, as a replica.
	waitHealthy(t, ns, name, 3, clusterChangeTimeout)
	t.Logf("cluster Healthy again, %s back as a replica, %.1fs after the deletion", oldPrimary, time.Since(start).Seconds())
	// Row 101 was written on the new primary: reaching every instance
	// proves they all follow it.
	waitRowsEverywhere(t, ns, name, 101)
	// Status tells the story too, once a pass has seen them receive on the
	// new timeline (a status written as the cluster became Healthy may
	// predate that: the cluster is then polled every 30 s).
	eventuallyEvery(t, 2*time.Minute, time.Second, "every instance reported past timeline "+strconv.Itoa(int(oldTimeline)), func(ctx context.Context) (bool, error) {
		pgc, err := getCluster(ctx, ns, name)
		if err != nil {
			return false, err
		}
		if pgc.Status.CurrentPrimary != newPrimary {
			return false, fmt.Errorf("the primary moved again, to %s", pgc.Status.CurrentPrimary)
		}
		for _, in := range pgc.Status.Instances {
			if in.Name == oldPrimary && in.Role != tuskv1alpha1.RoleReplica {
				return false, fmt.Errorf("the former primary %s reports %s", oldPrimary, in.Role)
			}
			if in.Timeline <= oldTimeline {
				return false, fmt.Errorf("%s reports timeline %d", in.Name, in.Timeline)
			}
		}
		return true, nil
	})
}

func primaryTimeline(pgc *tuskv1alpha1.PostgresCluster) int32 {
	for _, in := range pgc.Status.Instances {
		if in.Name == pgc.Status.CurrentPrimary {
			return in.Timeline
		}
	}
	return 0
}

// TestFencingByHand: fencing a replica stops its postgres and keeps its
// pod; the primary keeps serving; unfencing brings the replica back with
// what was written meanwhile.
func TestFencingByHand(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	const name = "fence"
	createCluster(t, newCluster(ns, name, 2), "")
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, 2, time.Minute)
	startSQLClient(t, ns, name)
	psql(t, ns, name+"-rw", "CREATE TABLE lifecycle (id int PRIMARY KEY)")
	replica := firstReplica(t, ns, name)
	pod, err := clientset.CoreV1().Pods(ns).Get(context.Background(), replica, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	setFencedAnnotation(t, ns, name, replica)
	eventuallyEvery(t, time.Minute, time.Second, replica+" fenced", func(ctx context.Context) (bool, error) {
		pgc, err := getCluster(ctx, ns, name)
		if err != nil {
			return false, err
		}
		in := instanceStatus(pgc, replica)
		return in != nil && in.Phase == "Fenced" && !in.Ready, nil
	})
	if _, err := tryInstanceSQL(context.Background(), ns, name, replica, "SELECT 1"); err == nil {
		t.Errorf("postgres in the fenced %s still answers", replica)
	}
	// Degrade mode: the primary goes on alone.
	insertRows(t, ns, name, 1, 10)

	setFencedAnnotation(t, ns, name)
	waitHealthy(t, ns, name, 2, clusterChangeTimeout)
	waitRowsEverywhere(t, ns, name, 10)
	after, err := clientset.CoreV1().Pods(ns).Get(context.Background(), replica, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != pod.UID {
		t.Errorf("fencing replaced the pod of %s; it must be kept for inspection", replica)
	}
	waitEvent(t, ns, tuskv1alpha1.ReasonFenced, replica)
	waitEvent(t, ns, tuskv1alpha1.ReasonUnfenced, replica)
}

// setFencedAnnotation fences exactly instances (none: unfences all), as
// kubectl tusk fence and unfence do.
func setFencedAnnotation(t *testing.T, ns, name string, instances ...string) {
	t.Helper()
	var value any // null removes the annotation
	if len(instances) > 0 {
		data, err := json.Marshal(instances)
		if err != nil {
			t.Fatal(err)
		}
		value = string(data)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{tuskv1alpha1.AnnotationFencedInstances: value}}})
	if err != nil {
		t.Fatal(err)
	}
	pgc := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := kube.Patch(context.Background(), pgc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("annotating %s with %s: %v", name, patch, err)
	}
}

func instanceStatus(pgc *tuskv1alpha1.PostgresCluster, name string) *tuskv1alpha1.InstanceStatus {
	for i := range pgc.Status.Instances {
		if pgc.Status.Instances[i].Name == name {
			return &pgc.Status.Instances[i]
		}
	}
	return nil
}
