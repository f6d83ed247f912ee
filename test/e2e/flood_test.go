//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/workload"
)

const (
	floodClients  = 32
	floodDuration = 40 * time.Second
	// floodGapBound is how long the tuned writer may go without a write
	// while the primary's manager is flooded: nothing fails over, so any
	// gap is the flood's doing.
	floodGapBound = 3 * time.Second
)

// TestManagerPortFlooded: a pod of the cluster's namespace and a pod of
// another namespace ask the primary's manager for readiness and metrics
// without pause (32 clients each, what needs no certificate), while the
// workload writes. The primary stays ready and stays the primary, the
// writes go on without a gap of floodGapBound, and nothing is lost. (The
// cluster's NetworkPolicy would keep the second pod out where the network
// plugin enforces it; the local cluster's does not, so both flood.)
func TestManagerPortFlooded(t *testing.T) {
	serial(t, loadsTheMachine)
	ns, elsewhere := newNamespace(t), newNamespace(t)
	const name = "flood"
	newHACluster(t, ns, name)
	w := startWorkload(t, ns, name)
	w.WaitAcks(t, 100, 2*time.Minute)
	primary := currentPrimary(t, ns, name)
	pod, err := clientset.CoreV1().Pods(ns).Get(context.Background(), primary, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("https://%s:%d", pod.Status.PodIP, instanceapi.DefaultStatusPort)

	start := time.Now()
	for _, at := range []string{ns, elsewhere} {
		createPod(t, at, flooderPod(base+instanceapi.PathReadyz, base+instanceapi.PathMetrics))
	}
	unready := watchReadiness(t, ns, primary, floodDuration+10*time.Second)
	for _, at := range []string{ns, elsewhere} {
		waitPodPhase(t, at, "flooder", corev1.PodSucceeded)
		var rep workload.FloodReport
		if err := json.Unmarshal([]byte(podLogs(t, at, "flooder")), &rep); err != nil {
			t.Fatalf("the flooder's report in %s: %v", at, err)
		}
		t.Logf("flooder in %s: %d requests in %.0fs (%.0f/s), answers %v, %d without an answer",
			at, rep.Requests, rep.Seconds, float64(rep.Requests)/rep.Seconds, rep.ByStatus, rep.Failed)
		if rep.ByStatus[200] < 1000 {
			t.Errorf("the flooder in %s got %d answers: the flood did not happen", at, rep.ByStatus[200])
		}
	}
	done := time.Now()

	if len(unready) > 0 {
		t.Errorf("the primary %s was not ready during the flood at %v", primary, unready)
	}
	if now := currentPrimary(t, ns, name); now != primary {
		t.Errorf("the primary changed from %s to %s during the flood", primary, now)
	}
	w.Stop(t)
	assertNoWriteLost(t, w.Check(t))
	gap := writeGapAround(w.Ledger(t), start, done)
	t.Logf("figure: flooded manager, longest write gap %.2fs", gap.Seconds())
	if gap > floodGapBound {
		t.Errorf("the writer could not write for %.1fs during the flood, more than %s", gap.Seconds(), floodGapBound)
	}
}

// flooderPod runs `tusk workload flood` on urls from the operator's image
// (its entrypoint is tusk), then exits with its report as its log.
func flooderPod(urls ...string) *corev1.Pod {
	pod := restrictedPod("flooder")
	c := &pod.Spec.Containers[0]
	c.Image, c.Command = operatorImage, nil
	c.Args = append([]string{"workload", "flood", "--clients", fmt.Sprint(floodClients), "--duration", floodDuration.String()}, urls...)
	return pod
}

// watchReadiness samples the pod's Ready condition every half second for
// d and returns when it was not True.
func watchReadiness(t *testing.T, ns, name string, d time.Duration) []string {
	t.Helper()
	var unready []string
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		p, err := clientset.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !podIsReady(p) {
			unready = append(unready, time.Now().Format("15:04:05.0"))
		}
		time.Sleep(500 * time.Millisecond)
	}
	return unready
}
