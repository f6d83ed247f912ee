//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// TestRolloutReplacesEveryPod: a change of the pods' spec (resources)
// replaces every pod on its volume, replicas first and the primary last by a
// switchover, with the data intact and writes served afterwards.
func TestRolloutReplacesEveryPod(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	const name = "roll"
	createCluster(t, newCluster(ns, name, 3), "")
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, 3, time.Minute)
	startSQLClient(t, ns, name)
	psql(t, ns, name+"-rw", "CREATE TABLE lifecycle (id int PRIMARY KEY)")
	insertRows(t, ns, name, 1, 50)
	before := mustSnapshotPods(t, ns, name)
	primary := mustGetCluster(t, ns, name).Status.CurrentPrimary

	start := time.Now()
	patchClusterSpec(t, ns, name, map[string]any{"resources": map[string]any{"requests": map[string]any{"cpu": "20m"}}})
	eventuallyEvery(t, clusterChangeTimeout, time.Second, "every pod replaced", func(ctx context.Context) (bool, error) {
		now, err := snapshotPods(ctx, ns, name)
		if err != nil {
			return false, err
		}
		for pod, inc := range before {
			if now[pod].UID == inc.UID {
				return false, fmt.Errorf("%s is still the pod it was", pod)
			}
		}
		return true, nil
	})
	waitHealthy(t, ns, name, 3, clusterChangeTimeout)
	t.Logf("rollout of a resources change over 3 instances done in %.0fs", time.Since(start).Seconds())

	for _, p := range mustClusterPods(t, ns, name) {
		if got := p.Spec.Containers[0].Resources.Requests.Cpu().String(); got != "20m" {
			t.Errorf("pod %s requests cpu %s, want 20m", p.Name, got)
		}
	}
	if now := mustGetCluster(t, ns, name).Status.CurrentPrimary; now == primary {
		t.Errorf("the primary %s was not switched over: its pod was replaced in place", primary)
	}
	insertRows(t, ns, name, 51, 60)
	waitRowsEverywhere(t, ns, name, 60)
}

// TestBrokenReplicaIsRecloned: a replica whose data is unusable (its
// pg_control emptied, so postgres cannot start) is replaced by a fresh copy
// of the primary under a new name, with an Event saying why.
func TestBrokenReplicaIsRecloned(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	const name = "broken"
	createCluster(t, newCluster(ns, name, 2), "")
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, 2, time.Minute)
	startSQLClient(t, ns, name)
	psql(t, ns, name+"-rw", "CREATE TABLE lifecycle (id int PRIMARY KEY)")
	insertRows(t, ns, name, 1, 20)
	waitRowsEverywhere(t, ns, name, 20)

	replica := firstReplica(t, ns, name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := kubectl(ctx, "exec", "-n", ns, replica, "-c", "postgres", "--", "sh", "-c",
		`truncate -s 0 "$PGDATA/global/pg_control" && kill -KILL "$(head -1 "$PGDATA/postmaster.pid")"`)
	if err != nil {
		t.Fatalf("breaking %s: %v\n%s", replica, err, out)
	}
	start := time.Now()
	eventuallyEvery(t, clusterChangeTimeout, time.Second, replica+" replaced", func(ctx context.Context) (bool, error) {
		pods, err := clusterPods(ctx, ns, name)
		if err != nil {
			return false, err
		}
		for _, p := range pods {
			if p.Name == replica {
				return false, fmt.Errorf("%s still exists", replica)
			}
		}
		return true, nil
	})
	waitHealthy(t, ns, name, 2, clusterChangeTimeout)
	t.Logf("broken replica %s replaced and cluster Healthy %.0fs after its data broke", replica, time.Since(start).Seconds())
	waitRowsEverywhere(t, ns, name, 20)
	waitEvent(t, ns, tuskv1alpha1.ReasonRecloningInstance, replica)
}

// waitEvent waits for an Event with reason whose note mentions what.
func waitEvent(t *testing.T, ns, reason, what string) {
	t.Helper()
	eventuallyEvery(t, time.Minute, time.Second, "a "+reason+" Event about "+what, func(ctx context.Context) (bool, error) {
		events, err := clientset.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == reason && strings.Contains(e.Note, what) {
				return true, nil
			}
		}
		return false, nil
	})
}

// TestPasswordRotation: changing the app password in its Secret changes it
// in PostgreSQL (the old one stops working) and in the Secret's URI.
func TestPasswordRotation(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	const name = "rotate"
	createCluster(t, newCluster(ns, name, 2), "")
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, 2, time.Minute)
	startSQLClient(t, ns, name)
	const password = "n3w:p@ss/word?&"
	patch := fmt.Sprintf(`{"stringData":{"password":%q}}`, password)
	ctx := context.Background()
	if _, err := clientset.CoreV1().Secrets(ns).Patch(ctx, name+"-app", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("changing the app password: %v", err)
	}
	start := time.Now()
	conninfo := serviceConninfo(ns, name+"-rw") + " password='" + strings.ReplaceAll(password, "'", `\'`) + "'"
	eventuallyEvery(t, 3*time.Minute, time.Second, "the new app password to work", func(ctx context.Context) (bool, error) {
		_, err := tryPSQLConninfo(ctx, ns, conninfo, "SELECT 1")
		return err == nil, err
	})
	t.Logf("new app password accepted %.0fs after the Secret changed", time.Since(start).Seconds())
	// The client pod's PGPASSWORD is the old password.
	if _, err := tryPSQL(ctx, ns, name+"-rw", "SELECT 1"); err == nil || !strings.Contains(err.Error(), "password authentication failed") {
		t.Errorf("the old password still works, or fails otherwise: %v", err)
	}
	eventuallyEvery(t, time.Minute, time.Second, "the Secret's uri to carry the new password", func(ctx context.Context) (bool, error) {
		s, err := clientset.CoreV1().Secrets(ns).Get(ctx, name+"-app", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		u, err := url.Parse(string(s.Data["uri"]))
		if err != nil {
			return false, err
		}
		got, _ := u.User.Password()
		return got == password, nil
	})
}
