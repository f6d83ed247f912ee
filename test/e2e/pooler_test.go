//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// poolerReadyTimeout bounds a new pooler's pods becoming ready.
const poolerReadyTimeout = 2 * time.Minute

// TestSwitchoverThroughThePooler: clients reach the cluster through a
// PostgresPooler over verified TLS (a wrong password refused); a
// switchover (kubectl tusk promote) while 8 clients and an ordinary
// client (a new connection per statement, libpq's defaults) write through
// it pauses the pooler before the step-down and resumes it after the
// promotion: no acknowledged write lost, and no client error at all.
func TestSwitchoverThroughThePooler(t *testing.T) {
	// Alone, not in parallel: the pause's length is the clients' write
	// gap, which other tests' load would blur.
	serial(t, measuresWriteGap)
	ns := newNamespace(t)
	const name = "pooled"
	pooler := name + "-pooler"
	newHACluster(t, ns, name)
	createPooler(t, ns, pooler, name)
	waitPoolerReady(t, ns, pooler, 2)

	startSQLClient(t, ns, name)
	if got := psql(t, ns, pooler, "SELECT current_user || ' ' || pg_is_in_recovery()"); !strings.HasSuffix(got, " false") {
		t.Errorf("through the pooler: %q, want the app user on the primary", got)
	}
	wrong := strings.Replace(serviceConninfo(ns, pooler), "host=", "password=wrong host=", 1)
	if out, err := tryPSQLConninfo(context.Background(), ns, wrong, "SELECT 1"); err == nil || !strings.Contains(out+err.Error(), "authentication failed") {
		t.Errorf("a wrong password through the pooler: %v, want refused", err)
	}

	w := startWorkloadPod(t, ns, name, workloadPodThrough(ns, name, pooler))
	from, to := currentPrimary(t, ns, name), firstReplica(t, ns, name)
	start := time.Now()
	promote(t, ns, name, to)
	w.WaitAcks(t, 100, 2*time.Minute)
	done := time.Now()
	t.Logf("switchover %s → %s through the pooler: %.1fs to the writer's next 100 acknowledgements", from, to, done.Sub(start).Seconds())
	waitForClusterEvent(t, ns, tuskv1alpha1.ReasonPausedPoolers)
	waitForClusterEvent(t, ns, tuskv1alpha1.ReasonResumedPoolers)

	stopAndCheck(t, w, "switchover through the pooler", start, done)
	for _, c := range w.writers() {
		if rep := c.stopped; len(rep.Errors) > 0 || rep.Unknown > 0 {
			t.Errorf("the %s client saw errors through the paused pooler: %v (%d unknown outcomes)", c.container, rep.Errors, rep.Unknown)
		}
	}
}

// createPooler creates a rw PostgresPooler of cluster with two pods.
func createPooler(t *testing.T, ns, name, cluster string) {
	t.Helper()
	p := &tuskv1alpha1.PostgresPooler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: tuskv1alpha1.PostgresPoolerSpec{Cluster: corev1.LocalObjectReference{Name: cluster},
			Type: tuskv1alpha1.PoolerTypeRW, Instances: 2, PoolMode: tuskv1alpha1.PoolModeTransaction},
	}
	if err := kube.Create(context.Background(), p, client.FieldValidation("Strict")); err != nil {
		t.Fatalf("creating PostgresPooler %s: %v", name, err)
	}
}

// waitPoolerReady waits until the pooler reports want ready pods.
func waitPoolerReady(t *testing.T, ns, name string, want int32) {
	t.Helper()
	eventuallyEvery(t, poolerReadyTimeout, time.Second, "the pooler "+name+" ready", func(ctx context.Context) (bool, error) {
		p := &tuskv1alpha1.PostgresPooler{}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
			return false, err
		}
		return p.Status.ObservedGeneration == p.Generation && p.Status.ReadyInstances == want, nil
	})
}

// workloadPodThrough is the workload pod of cluster, its clients
// connecting through service instead of the -rw Service.
func workloadPodThrough(ns, cluster, service string) *corev1.Pod {
	pod := workloadPod(ns, cluster)
	for i := range pod.Spec.Containers {
		for j, e := range pod.Spec.Containers[i].Env {
			if e.Name == "TUSK_WORKLOAD_DSN" {
				pod.Spec.Containers[i].Env[j].Value = serviceConninfo(ns, service)
			}
		}
	}
	return pod
}

// waitForClusterEvent waits for an Event of reason in ns.
func waitForClusterEvent(t *testing.T, ns, reason string) {
	t.Helper()
	eventuallyEvery(t, time.Minute, time.Second, fmt.Sprintf("an Event %s in %s", reason, ns), func(ctx context.Context) (bool, error) {
		list, err := clientset.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.Reason == reason {
				t.Logf("Event %s: %s", reason, e.Note)
				return true, nil
			}
		}
		return false, nil
	})
}
