//go:build e2e

package e2e

// The HA tests: a fault under the workload writer, then the proof that no
// acknowledged write was lost (synchronous quorum mode), that no two
// primaries took writes, and the write gap as a figure (`make bench-ha`
// prints the figure lines).

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/plugin"
)

// haInstances is the size of the HA tests' clusters: a primary and two
// standbys, one of which must confirm each commit (quorum mode, ANY 1).
const haInstances = 3

// newHACluster creates a 3-instance cluster in synchronous quorum mode and
// waits until it is Healthy. Commits wait while no standby is connected
// (block, not the default degrade): every acknowledged write is then on a
// standby, so "nothing acknowledged lost" must hold after any failover,
// even one right after the standbys came back.
func newHACluster(t *testing.T, ns, name string) {
	t.Helper()
	pgc := newCluster(ns, name, haInstances)
	pgc.Spec.PostgreSQL.Synchronous = tuskv1alpha1.SynchronousSpec{Mode: tuskv1alpha1.SynchronousQuorum, Number: 1,
		WhenTooFewStandbys: tuskv1alpha1.StandbyShortageBlock}
	createCluster(t, pgc, "")
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, haInstances, time.Minute)
}

// promote runs `kubectl tusk promote CLUSTER INSTANCE` (the plugin's own
// command, in process) and waits as it does for the switchover to finish.
func promote(t *testing.T, ns, cluster, instance string) {
	t.Helper()
	ctrllog.SetLogger(logr.Discard()) // the plugin's client would warn that no logger is set
	var out bytes.Buffer
	cmd := plugin.NewCommand(plugin.BinaryName, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &out})
	cmd.SetArgs([]string{"promote", cluster, instance, "-n", ns, "--timeout", clusterChangeTimeout.String()})
	ctx, cancel := context.WithTimeout(context.Background(), clusterChangeTimeout+time.Minute)
	defer cancel()
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("kubectl tusk promote %s %s: %v\n%s", cluster, instance, err, out.String())
	}
	t.Logf("kubectl tusk promote %s %s:\n%s", cluster, instance, out.String())
}

// TestSwitchoverUnderLoad: a switchover (kubectl tusk promote) while 8
// clients write loses no acknowledged write, duplicates none, never has
// two primaries take writes, and the writes resume on the new primary.
func TestSwitchoverUnderLoad(t *testing.T) {
	ns := newNamespace(t)
	const name = "switch"
	newHACluster(t, ns, name)
	w := startWorkload(t, ns, name)
	from, to := currentPrimary(t, ns, name), firstReplica(t, ns, name)

	start := time.Now()
	promote(t, ns, name, to)
	if now := currentPrimary(t, ns, name); now != to {
		t.Fatalf("after the switchover the primary is %s, want %s", now, to)
	}
	w.WaitAcks(t, 100, 2*time.Minute)
	done := time.Now()
	waitHealthy(t, ns, name, haInstances, clusterChangeTimeout)

	w.Stop(t)
	assertNoWriteLost(t, w.Check(t))
	gap := writeGapAround(w.Ledger(t), start, done)
	t.Logf("switchover %s → %s under load: %.1fs to the writer's next 100 acknowledgements", from, to, done.Sub(start).Seconds())
	t.Logf("figure: switchover write gap %.2fs", gap.Seconds())
}

// TestPrimaryPodDeletedUnderLoad: the primary's pod is deleted while 8
// clients write. Today the operator recreates it on its volume; with
// automatic failover a standby takes over. Either way: no acknowledged
// write lost (synchronous mode), the cluster is Ready again, and the
// writer's writes go through again.
func TestPrimaryPodDeletedUnderLoad(t *testing.T) {
	ns := newNamespace(t)
	const name = "delprimary"
	newHACluster(t, ns, name)
	w := startWorkload(t, ns, name)

	tl := watchTimeline(t, ns, name)
	start := time.Now()
	deleted := deletePrimaryPod(t, ns, name)
	waitHealthy(t, ns, name, haInstances, clusterChangeTimeout)
	w.WaitAcks(t, 100, 2*time.Minute)
	done := time.Now()

	w.Stop(t)
	assertNoWriteLost(t, w.Check(t))
	recs := w.Ledger(t)
	gap := writeGapAround(recs, start, done)
	tl.log(t, start, done, recs)
	t.Logf("primary pod %s deleted under load: cluster Healthy and writes through again %.1fs later; primary now %s",
		deleted, done.Sub(start).Seconds(), currentPrimary(t, ns, name))
	t.Logf("figure: primary pod deleted write gap %.2fs", gap.Seconds())
}

// TestOperatorKilledMidFailover: the primary's pod is deleted under the
// writer and the operator's process is killed the moment it has recorded
// the replica it is promoting (status.targetPrimary), before it recorded
// the new primary. The next operator finishes the failover, or finds it
// blocked and brings the old primary back: either way exactly one primary,
// the cluster Healthy, the writes through again and nothing acknowledged
// lost (synchronous quorum, block mode).
func TestOperatorKilledMidFailover(t *testing.T) {
	requireNodeAccess(t)
	ns := newNamespace(t)
	const name = "midfo"
	newHACluster(t, ns, name)
	w := startWorkload(t, ns, name)

	start := time.Now()
	f := killOperatorMidFailover(t, ns, name)
	if f.recorded {
		t.Fatalf("the operator recorded the failover from %s before it was killed: the kill came too late to test a failover cut short", f.oldPrimary)
	}
	t.Logf("killed the operator while it promoted %s in place of %s, %.2fs after the pod deletion", f.target, f.oldPrimary, time.Since(start).Seconds())
	waitHealthy(t, ns, name, haInstances, clusterChangeTimeout)
	w.WaitAcks(t, 100, 2*time.Minute)
	done := time.Now()

	logFailoverEvents(t, ns)
	// Usually the killed operator's choice; the deleted primary when the
	// next operator found no safe candidate (FailoverBlocked, in the
	// events above) and recreated its pod, which took the free Lease back.
	primary := assertOnePrimary(t, ns, name)
	w.Stop(t)
	assertNoWriteLost(t, w.Check(t))
	gap := writeGapAround(w.Ledger(t), start, done)
	t.Logf("primary now %s (the killed operator's choice: %s); Healthy and writing again %.1fs after the deletion",
		primary, f.target, done.Sub(start).Seconds())
	t.Logf("figure: operator killed mid-failover write gap %.2fs", gap.Seconds())
}
