//go:build e2e

package e2e

// The failover timeline: while a fault plays out, watches on the cluster's
// pods, primary Lease, -rw EndpointSlices and PostgresCluster status record
// when each step was seen, and the writer's ledger adds its last write on
// the old primary, its errors and its first write on the new one. Printed
// after a fault, it says where a write gap went (shutdown, Lease, operator,
// promotion, Service), which the gap alone cannot.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/workload"
)

// timelineStep is one thing seen to happen, at the test's clock.
type timelineStep struct {
	at   time.Time
	what string
}

// failoverTimeline records the steps of a fault in a namespace until stop.
type failoverTimeline struct {
	mu     sync.Mutex
	steps  []timelineStep
	podIPs map[string]string // pod IP → pod name, for the ledger's server addresses
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// watchTimeline starts the watches; the caller calls stop (or log) when
// the fault has healed. Watches that cannot start are reported and left
// out: the timeline explains a gap, it does not judge one.
func watchTimeline(t *testing.T, ns, cluster string) *failoverTimeline {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tl := &failoverTimeline{podIPs: map[string]string{}, cancel: cancel}
	t.Cleanup(tl.stop)
	opened := []func() (watch.Interface, error){
		func() (watch.Interface, error) { return clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{}) },
		func() (watch.Interface, error) {
			return clientset.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + cluster + "-primary"})
		},
		func() (watch.Interface, error) {
			return clientset.DiscoveryV1().EndpointSlices(ns).Watch(ctx,
				metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + cluster + "-rw"})
		},
		func() (watch.Interface, error) { return watchClusters(ctx, ns, cluster) },
	}
	for _, in := range mustGetCluster(t, ns, cluster).Status.Instances {
		tl.done.Add(1)
		go tl.followLogs(ctx, ns, in.Name)
	}
	for _, open := range opened {
		w, err := open()
		if err != nil {
			t.Logf("timeline: a watch did not start: %v", err)
			continue
		}
		tl.done.Add(1)
		go tl.follow(w)
	}
	return tl
}

func watchClusters(ctx context.Context, ns, cluster string) (watch.Interface, error) {
	return kube.Watch(ctx, &tuskv1alpha1.PostgresClusterList{}, client.InNamespace(ns),
		client.MatchingFields{"metadata.name": cluster})
}

// follow turns a watch's events into steps, each object compared with the
// last state seen of it; the first event of each object (the watch's
// initial list) sets the state without a step.
func (tl *failoverTimeline) follow(w watch.Interface) {
	defer tl.done.Done()
	defer w.Stop()
	last := map[string][]string{}
	for ev := range w.ResultChan() {
		obj, ok := ev.Object.(client.Object)
		if !ok {
			continue
		}
		now := time.Now()
		key := fmt.Sprintf("%T/%s", obj, obj.GetName())
		if ev.Type == watch.Deleted {
			tl.record(now, key+" deleted")
			delete(last, key)
			continue
		}
		state := tl.describe(obj)
		before, seen := last[key]
		last[key] = state
		if !seen {
			continue
		}
		for _, s := range state {
			if !slices.Contains(before, s) {
				tl.record(now, s)
			}
		}
	}
}

// followLogs records the log lines of a pod's postgres container (the
// instance manager's and postgres's), at the times the container runtime
// stamped them, but those every client's disconnection repeats: the
// instances' own account of a fault, which is gone with a pod once it is
// deleted.
func (tl *failoverTimeline) followLogs(ctx context.Context, ns, pod string) {
	defer tl.done.Done()
	since := metav1.NewTime(time.Now().Add(-time.Second))
	stream, err := clientset.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{
		Container: "postgres", Follow: true, Timestamps: true, SinceTime: &since}).Stream(ctx)
	if err != nil {
		tl.record(time.Now(), fmt.Sprintf("%s log: not followed: %v", pod, err))
		return
	}
	defer func() { _ = stream.Close() }()
	lines := bufio.NewScanner(stream)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	for lines.Scan() {
		stamp, line, _ := strings.Cut(lines.Text(), " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			at = time.Now()
		}
		if msg := logMessage(line); msg != "" {
			tl.record(at, fmt.Sprintf("%s log: %.200s", pod, msg))
		}
	}
}

// noisyLogLines are postgres messages each client's disconnection repeats.
var noisyLogLines = []string{"terminating connection due to administrator command", "the database system is shutting down",
	"canceling the wait for synchronous replication", "The transaction has already committed locally",
	"invalid length of startup packet", "could not receive data from client", "did not match any process",
	"connection to client lost", "the database system is starting up", "the database system is not yet accepting connections"}

// logMessage is a manager's JSON log line shortened to its message and
// fields, "" for a noisy one.
func logMessage(line string) string {
	for _, n := range noisyLogLines {
		if strings.Contains(line, n) {
			return ""
		}
	}
	var fields map[string]any
	if json.Unmarshal([]byte(line), &fields) != nil {
		return line
	}
	msg := fmt.Sprint(fields["msg"])
	keys := slices.Sorted(maps.Keys(fields))
	for _, k := range keys {
		switch k {
		case "msg", "level", "ts", "logger", "severity", "caller",
			// Every record's and PostgreSQL's session keys (docs/monitoring.md#logs).
			"cluster", "instance", "timeline", "pid", "backendType", "sessionID", "vxid", "txid",
			"pgTimestamp", "user", "database", "remoteHost", "applicationName", "sqlstate":
		default:
			msg += fmt.Sprintf(" %s=%v", k, fields[k])
		}
	}
	return msg
}

// describe lists the facts about an object the timeline follows; a fact
// that appears is a step.
func (tl *failoverTimeline) describe(obj client.Object) []string {
	switch o := obj.(type) {
	case *corev1.Pod:
		return tl.describePod(o)
	case *coordinationv1.Lease:
		holder := "none"
		if o.Spec.HolderIdentity != nil && *o.Spec.HolderIdentity != "" {
			holder = *o.Spec.HolderIdentity
		}
		return []string{"Lease held by " + holder}
	case *discoveryv1.EndpointSlice:
		var eps []string
		for _, ep := range o.Endpoints {
			ready := ep.Conditions.Ready != nil && *ep.Conditions.Ready
			eps = append(eps, fmt.Sprintf("%s(ready=%t)", tl.podName(ep.Addresses...), ready))
		}
		slices.Sort(eps)
		return []string{"-rw endpoints [" + strings.Join(eps, " ") + "]"}
	case *tuskv1alpha1.PostgresCluster:
		return []string{"status.targetPrimary " + o.Status.TargetPrimary, "status.currentPrimary " + o.Status.CurrentPrimary,
			"status.phase " + string(o.Status.Phase)}
	}
	return nil
}

func (tl *failoverTimeline) describePod(p *corev1.Pod) []string {
	if p.Status.PodIP != "" {
		tl.mu.Lock()
		tl.podIPs[p.Status.PodIP] = p.Name
		tl.mu.Unlock()
	}
	facts := []string{fmt.Sprintf("pod %s role=%s", p.Name, p.Labels[instanceapi.LabelRole])}
	if p.DeletionTimestamp != nil {
		facts = append(facts, "pod "+p.Name+" terminating")
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			facts = append(facts, fmt.Sprintf("pod %s ready=%s", p.Name, c.Status))
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			facts = append(facts, fmt.Sprintf("pod %s container %s exited %d", p.Name, cs.Name, cs.State.Terminated.ExitCode))
		}
	}
	return facts
}

// podName is the pod an address belongs to, as far as the pods watch saw.
func (tl *failoverTimeline) podName(addrs ...string) string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, a := range addrs {
		if n, ok := tl.podIPs[a]; ok {
			return n
		}
	}
	return strings.Join(addrs, ",")
}

func (tl *failoverTimeline) record(at time.Time, what string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.steps = append(tl.steps, timelineStep{at, what})
}

// stop ends the watches; safe to call twice.
func (tl *failoverTimeline) stop() {
	tl.cancel()
	tl.done.Wait()
}

// log stops the watches and prints the steps from start to end, with each
// client's view of the same time from its ledger (by the client's name),
// relative to start.
func (tl *failoverTimeline) log(t *testing.T, start, end time.Time, ledgers map[string][]workload.Record) {
	t.Helper()
	tl.stop()
	steps := slices.Clone(tl.steps)
	for who, recs := range ledgers {
		steps = append(steps, tl.writerSteps(who, recs, start, end)...)
	}
	slices.SortStableFunc(steps, func(a, b timelineStep) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, s := range steps {
		if s.at.Before(start.Add(-time.Second)) || s.at.After(end) {
			continue
		}
		fmt.Fprintf(&b, "%+8.3fs %s\n", s.at.Sub(start).Seconds(), s.what)
	}
	t.Logf("timeline from the fault (%s):\n%s", start.Format("15:04:05.000"), b.String())
}

// writerSteps are, around the longest write gap in [start, end]: the last
// acknowledgement before it and the first after it, with the server that
// gave each, and the first error of each kind in between.
func (tl *failoverTimeline) writerSteps(who string, recs []workload.Record, start, end time.Time) []timelineStep {
	before, after, ok := gapBounds(recs, start, end)
	if !ok {
		return nil
	}
	steps := []timelineStep{
		{before.At, who + ": last ack before the gap, from " + tl.podName(before.Server)},
		{after.At, who + ": first ack after the gap, from " + tl.podName(after.Server)},
	}
	first, count := map[string]time.Time{}, map[string]int{}
	for _, r := range recs {
		if r.Kind == workload.KindUnknown && r.At.After(before.At) && r.At.Before(after.At) {
			if count[r.Error]++; count[r.Error] == 1 {
				first[r.Error] = r.At
			}
		}
	}
	for kind, at := range first {
		steps = append(steps, timelineStep{at, fmt.Sprintf("%s: first %s error (%d in the gap)", who, kind, count[kind])})
	}
	return steps
}

// gapBounds are the acknowledgements on either side of the longest gap
// between acknowledgements that overlaps [from, to] (writeGapAround's).
func gapBounds(recs []workload.Record, from, to time.Time) (before, after workload.Record, ok bool) {
	var acks []workload.Record
	for _, r := range recs {
		if r.Kind == workload.KindAck {
			acks = append(acks, r)
		}
	}
	slices.SortFunc(acks, func(a, b workload.Record) int { return a.At.Compare(b.At) })
	var longest time.Duration
	for i := 1; i < len(acks); i++ {
		if d := acks[i].At.Sub(acks[i-1].At); acks[i].At.After(from) && acks[i-1].At.Before(to) && d > longest {
			longest, before, after, ok = d, acks[i-1], acks[i], true
		}
	}
	return before, after, ok
}

// writeGapEndingIn is the longest time between two acknowledgements of
// recs that ends in (from, to]: the wait an event caused, when events
// follow one another and to is when every client wrote again after it (a
// gap that ends later belongs to the next event).
func writeGapEndingIn(recs []workload.Record, from, to time.Time) time.Duration {
	var acks []time.Time
	for _, r := range recs {
		if r.Kind == workload.KindAck {
			acks = append(acks, r.At)
		}
	}
	slices.SortFunc(acks, time.Time.Compare)
	var longest time.Duration
	for i := 1; i < len(acks); i++ {
		if acks[i].After(from) && !acks[i].After(to) {
			longest = max(longest, acks[i].Sub(acks[i-1]))
		}
	}
	return longest
}
