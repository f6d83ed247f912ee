//go:build e2e

package e2e

// The workload harness: `tusk workload write` (docs/workload.md) runs in a
// pod of the test's namespace with many clients through the cluster's -rw
// Service, as the app user over verify-full TLS, while faults happen; then
// `tusk workload check` reads every row back and the test asserts on its
// typed report.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"tusk.dev/tusk/internal/workload"
)

const (
	workloadPodName = "workload"
	// workloadClients is how many concurrent clients write: enough that a
	// fault always catches commits in flight.
	workloadClients = 8
	workloadLedger  = "/ledger/ledger.jsonl"
	workloadBinary  = "/tusk-bin/tusk"
	// The ordinary client (workload write --ordinary): one INSERT per new
	// connection with libpq's defaults, no timeout, as most applications
	// and scripts write; its own table and ledger.
	ordinaryContainer = "ordinary"
	ordinaryLedger    = "/ledger/ordinary.jsonl"
	ordinaryTable     = "tusk_workload_ordinary"
	// ordinaryAcks is how many more acknowledgements of the ordinary
	// client WaitAcks waits for: the proof that it writes again too.
	ordinaryAcks = 10
	// splitBrainWindow: one node, one clock, no skew (docs/workload.md).
	splitBrainWindow = "5s"
	// checkReadTimeout bounds a check's connecting and reading the table;
	// checkStartBudget is how long failed checks are tried again (-rw
	// settling); checkAttemptLimit only stops a checker that hangs on
	// something else, far above what a long run's ledger takes.
	checkReadTimeout  = time.Minute
	checkStartBudget  = 2 * time.Minute
	checkAttemptLimit = 20 * time.Minute
)

// workloadWriter is a running `tusk workload write` pod: its writer
// container runs the writer as PID 1, its tools container (same image,
// environment and volumes) runs the checker and reads the ledger.
type workloadWriter struct {
	ns, cluster string
	// pod is the workload pod this client runs in.
	pod string
	// container runs this writer; ledger and table are its own.
	container, ledger, table string
	// ordinary is the ordinary client writing beside the tuned one, in
	// the same pod (nil for the ordinary client itself).
	ordinary *workloadWriter
	stopped  *workload.WriteReport
	// maxLost is the checker's --max-lost: 0 (synchronous mode) unless
	// the test bounds the loss itself (assertBoundedLoss).
	maxLost int
	// splitBrainWindow overrides the checker's --split-brain-window when
	// set ("0s": off, where two servers take writes by design).
	splitBrainWindow string
	// read is what Ledger read of the ledger so far.
	read workload.LedgerTail
}

// startWorkload starts the writer against cluster's -rw Service and waits
// until it has acknowledged its first writes. The pod is deleted with the
// namespace.
func startWorkload(t *testing.T, ns, cluster string) *workloadWriter {
	t.Helper()
	return startWorkloadPod(t, ns, cluster, workloadPod(ns, cluster))
}

// startWorkloadPod starts pod, a workloadPod of the cluster, and waits for
// its first acknowledged writes.
func startWorkloadPod(t *testing.T, ns, cluster string, pod *corev1.Pod) *workloadWriter {
	t.Helper()
	createPod(t, ns, pod)
	waitPodReady(t, ns, pod.Name, 2*time.Minute)
	w := &workloadWriter{ns: ns, cluster: cluster, pod: pod.Name, container: "writer", ledger: workloadLedger, table: "tusk_workload",
		ordinary: &workloadWriter{ns: ns, cluster: cluster, pod: pod.Name, container: ordinaryContainer, ledger: ordinaryLedger, table: ordinaryTable}}
	w.WaitAcks(t, 50, 2*time.Minute)
	return w
}

// ledgers reads both clients' ledgers, by client name.
func (w *workloadWriter) ledgers(t *testing.T) map[string][]workload.Record {
	t.Helper()
	return map[string][]workload.Record{"writer": w.Ledger(t), "ordinary": w.ordinary.Ledger(t)}
}

// writers are the tuned writer and the ordinary client beside it.
func (w *workloadWriter) writers() []*workloadWriter { return []*workloadWriter{w, w.ordinary} }

// workloadPod is the writer pod: the tusk binary is copied from the operator
// image by an init container, as the instance pods get it; the DSN names
// the -rw Service and the cluster CA (verify-full), the app Secret gives
// the user, password and database (PG* variables, which pgx reads too).
func workloadPod(ns, cluster string) *corev1.Pod {
	pod := appClientPod(workloadPodName, cluster, workloadBinary, "workload", "write",
		"--duration", "0", "--clients", strconv.Itoa(workloadClients), "--ledger", workloadLedger,
		// Short backoffs: the gap measured is the cluster's, not the writer's.
		"--backoff", "50ms", "--max-backoff", "250ms", "--timeout", "2s")
	writer := &pod.Spec.Containers[0]
	writer.Name = "writer"
	writer.Env = append(writer.Env, corev1.EnvVar{Name: "TUSK_WORKLOAD_DSN", Value: serviceConninfo(ns, cluster+"-rw")})
	writer.VolumeMounts = append(writer.VolumeMounts,
		corev1.VolumeMount{Name: "tusk-bin", MountPath: "/tusk-bin", ReadOnly: true},
		corev1.VolumeMount{Name: "ledger", MountPath: "/ledger"})
	ordinary := *writer.DeepCopy()
	ordinary.Name = ordinaryContainer
	ordinary.Command = []string{workloadBinary, "workload", "write", "--ordinary", "--duration", "0", "--clients", "1",
		"--table", ordinaryTable, "--ledger", ordinaryLedger,
		// A script's pause between statements, and after an error.
		"--interval", "20ms", "--backoff", "50ms"}
	// libpq's default: no connect timeout (appClientPod sets one).
	ordinary.Env = slices.DeleteFunc(slices.Clone(ordinary.Env), func(e corev1.EnvVar) bool { return e.Name == "PGCONNECT_TIMEOUT" })
	tools := *writer.DeepCopy()
	tools.Name, tools.Command = "tools", []string{"sleep", "infinity"}
	pod.Spec.Containers = append(pod.Spec.Containers, ordinary, tools)
	pod.Spec.InitContainers = []corev1.Container{{
		Name: "bootstrap-copy", Image: operatorImage, ImagePullPolicy: corev1.PullIfNotPresent,
		Args:            []string{"instance", "bootstrap-copy", "--dest", workloadBinary},
		SecurityContext: writer.SecurityContext.DeepCopy(),
		VolumeMounts:    []corev1.VolumeMount{{Name: "tusk-bin", MountPath: "/tusk-bin"}},
	}}
	pod.Spec.Volumes = append(pod.Spec.Volumes,
		corev1.Volume{Name: "tusk-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "ledger", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	return pod
}

const (
	readerPodName = "reader"
	readerLedger  = "/ledger/reader.jsonl"
)

// startReader starts an ordinary reader (workload write --ordinary
// --read: a query per new connection, libpq's defaults) through the
// cluster's -ro Service, and waits for its first answers. Its ledger's
// acknowledgements are answered reads; it has no rows to check.
func startReader(t *testing.T, ns, cluster string) *workloadWriter {
	t.Helper()
	pod := workloadPod(ns, cluster)
	pod.Name = readerPodName
	var containers []corev1.Container
	for _, c := range pod.Spec.Containers {
		switch c.Name {
		case ordinaryContainer:
			c.Name = "reader"
			c.Command = []string{workloadBinary, "workload", "write", "--ordinary", "--read", "--duration", "0", "--clients", "1",
				"--ledger", readerLedger, "--interval", "20ms", "--backoff", "50ms"}
			for i := range c.Env {
				if c.Env[i].Name == "TUSK_WORKLOAD_DSN" {
					c.Env[i].Value = serviceConninfo(ns, cluster+"-ro")
				}
			}
			containers = append(containers, c)
		case "tools":
			containers = append(containers, c)
		}
	}
	pod.Spec.Containers = containers
	createPod(t, ns, pod)
	waitPodReady(t, ns, readerPodName, 2*time.Minute)
	r := &workloadWriter{ns: ns, cluster: cluster, pod: readerPodName, container: "reader", ledger: readerLedger}
	r.waitAcks(t, 50, 2*time.Minute)
	return r
}

// exec runs a command in the workload pod's container and returns its
// standard output.
func (w *workloadWriter) exec(ctx context.Context, container string, command ...string) (string, error) {
	args := append([]string{"exec", "-n", w.ns, w.pod, "-c", container, "--"}, command...)
	return kubectl(ctx, args...)
}

// Acks counts the acknowledgements in the ledger so far.
func (w *workloadWriter) Acks(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, sqlTimeout)
	defer cancel()
	// grep -c exits 1 when it counts nothing: the output still says 0.
	// Through cat, a ledger the writer has not created yet counts 0 too.
	out, err := w.exec(ctx, "tools", "sh", "-c", `cat `+w.ledger+` 2>/dev/null | grep -c '"k":"ack"' || true`)
	if err != nil {
		return 0, fmt.Errorf("counting the acknowledgements in the ledger: %w", err)
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// WaitAcks waits until the writer has acknowledged n more writes than now,
// and the ordinary client beside it ordinaryAcks more: the proof that
// writes go through (again) for both.
func (w *workloadWriter) WaitAcks(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	w.waitAcks(t, n, timeout)
	if w.ordinary != nil {
		w.ordinary.waitAcks(t, ordinaryAcks, timeout)
	}
}

func (w *workloadWriter) waitAcks(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	w.checkRunning(t)
	from, err := w.Acks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	eventuallyEvery(t, timeout, time.Second, fmt.Sprintf("%d more acknowledged writes of the %s client (from %d)", n, w.container, from),
		func(ctx context.Context) (bool, error) {
			now, err := w.Acks(ctx)
			return now >= from+n, err
		})
}

// checkRunning fails the test if the writer container has exited: it runs
// until Stop, so an exit is a failure of the writer itself.
func (w *workloadWriter) checkRunning(t *testing.T) {
	t.Helper()
	if w.stopped != nil {
		t.Fatal("the workload writer was stopped already")
	}
	if st := w.writerState(t); st.Terminated != nil {
		t.Fatalf("the workload writer exited (code %d, %s): %s", st.Terminated.ExitCode, st.Terminated.Reason, w.writerLogs(t))
	}
}

func (w *workloadWriter) writerState(t *testing.T) corev1.ContainerState {
	t.Helper()
	p, err := clientset.CoreV1().Pods(w.ns).Get(context.Background(), w.pod, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the workload pod: %v", err)
	}
	i := slices.IndexFunc(p.Status.ContainerStatuses, func(s corev1.ContainerStatus) bool { return s.Name == w.container })
	if i < 0 {
		t.Fatalf("the workload pod has no %s container status: %+v", w.container, p.Status.ContainerStatuses)
	}
	return p.Status.ContainerStatuses[i].State
}

func (w *workloadWriter) writerLogs(t *testing.T) string {
	t.Helper()
	out, err := clientset.CoreV1().Pods(w.ns).GetLogs(w.pod, &corev1.PodLogOptions{Container: w.container}).
		DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading the workload writer's logs: %v", err)
	}
	return string(out)
}

// Stop sends SIGTERM to the writer (attempts in flight finish, the ledger is
// synced), waits for it to exit and returns its report. A non-zero exit
// (the primary key rejected an attempt, the ledger failed) fails the test.
func (w *workloadWriter) Stop(t *testing.T) *workload.WriteReport {
	t.Helper()
	w.checkRunning(t)
	ctx, cancel := context.WithTimeout(context.Background(), sqlTimeout)
	defer cancel()
	if out, err := w.exec(ctx, w.container, "sh", "-c", "kill -TERM 1"); err != nil {
		t.Fatalf("stopping the workload writer: %v\n%s", err, out)
	}
	var code int32
	eventually(t, time.Minute, "the workload writer to exit", func(context.Context) (bool, error) {
		st := w.writerState(t)
		if st.Terminated != nil {
			code = st.Terminated.ExitCode
		}
		return st.Terminated != nil, nil
	})
	logs := w.writerLogs(t)
	rep := &workload.WriteReport{}
	if err := json.Unmarshal([]byte(jsonObject(logs)), rep); err != nil {
		t.Fatalf("parsing the writer's report: %v\n%s", err, logs)
	}
	if code != 0 {
		t.Errorf("the workload writer exited with code %d: %s", code, logs)
	}
	w.stopped = rep
	t.Logf("workload %s client: %d attempted, %d acknowledged, %d unknown, %d rejected; errors %v; acks by server %v",
		w.container, rep.Attempted, rep.Acknowledged, rep.Unknown, rep.Rejected, rep.Errors, rep.Servers)
	return rep
}

// jsonObject is the last JSON object of a container's output: the report
// is printed last, after the writer's log lines.
func jsonObject(out string) string {
	if i := strings.LastIndex(out, "\n{"); i >= 0 {
		return out[i+1:]
	}
	return out
}

// Check runs `tusk workload check` in the tools container against -rw (the
// primary, which has every row) and returns its report; the caller asserts
// on it (assertNoWriteLost). Before Stop it checks with --live: rows the
// writer attempted after the checker read the ledger are not phantoms; and
// with --state, a checkpoint beside the ledger, so that it reads only the
// ledger and rows written since the last check (the chaos test checks
// after every fault) and proves the rows it verified before unchanged
// with one aggregate query. After Stop the check is a full one.
func (w *workloadWriter) Check(t *testing.T) *workload.CheckReport {
	t.Helper()
	var (
		out string
		err error
	)
	window := splitBrainWindow
	if w.splitBrainWindow != "" {
		window = w.splitBrainWindow
	}
	args := []string{workloadBinary, "workload", "check", "--ledger", w.ledger, "--table", w.table, "--split-brain-window", window,
		"--max-lost", strconv.Itoa(w.maxLost), "--read-timeout", checkReadTimeout.String()}
	if w.stopped == nil {
		args = append(args, "--live", "--state", strings.TrimSuffix(w.ledger, ".jsonl")+".check.json")
	}
	// -rw may still be settling on its new primary when the cluster turns
	// Ready: a check that cannot connect or read gives up at its read
	// timeout and is tried again, a check that ran is never. An attempt is
	// not cut short otherwise: reading and comparing the ledger take time
	// in proportion to it (a chaos run's tuned writer logs a million writes
	// in a few minutes; a one-minute limit on each attempt killed every try
	// of the check 14 faults into a CI run).
	start, tries := time.Now(), 0
	for {
		tries++
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), checkAttemptLimit)
		out, err = w.exec(ctx, "tools", args...)
		cancel()
		if strings.HasPrefix(strings.TrimSpace(out), "{") {
			t.Logf("workload check of the %s client took %s (%d tries in %s)", w.container,
				time.Since(began).Round(100*time.Millisecond), tries, time.Since(start).Round(100*time.Millisecond))
			break // it ran; its verdict is in the report whatever its exit status
		}
		if time.Since(start) > checkStartBudget {
			t.Fatalf("the workload checker could not read the table for %s (%d tries): %v\n%s", checkStartBudget, tries, err, out)
		}
		time.Sleep(2 * time.Second) // the pause between two tries, not a wait for a state
	}
	rep := &workload.CheckReport{}
	if jerr := json.Unmarshal([]byte(out), rep); jerr != nil {
		t.Fatalf("parsing the checker's report: %v (checker: %v)\n%s", jerr, err, out)
	}
	if !rep.OK && err == nil {
		t.Errorf("the checker's report is not OK but it exited 0")
	}
	if in := rep.Incremental; in != nil { // what it read; why from the start, or a full check, when it was
		t.Logf("workload check of the %s client read the ledger from byte %d (%d records) and %d rows besides %d verified before %q %q",
			w.container, in.LedgerFrom, in.Records, in.RowsRead, in.VerifiedRows, in.FromStartBecause, in.FullBecause)
	}
	return rep
}

// Ledger returns the ledger's records so far. It copies only the bytes
// appended since its last call (tail from the offset it stopped at) and
// keeps what it read before, so a check after every fault costs what that
// fault added, not the whole run; a line still being written is read whole
// the next time.
func (w *workloadWriter) Ledger(t *testing.T) []workload.Record {
	t.Helper()
	// The first copy takes time in proportion to the ledger, as a check.
	ctx, cancel := context.WithTimeout(context.Background(), checkAttemptLimit)
	defer cancel()
	out, err := w.exec(ctx, "tools", "tail", "-c", fmt.Sprintf("+%d", w.read.Offset()+1), w.ledger)
	if err != nil {
		t.Fatalf("reading the ledger: %v", err)
	}
	if err := w.read.Feed(out); err != nil {
		t.Fatalf("parsing the ledger: %v", err)
	}
	return w.read.Records()
}

// assertNoWriteLost fails the test on any broken rule of the checker: an
// acknowledged row missing, a duplicate, a phantom, a rejected attempt, two
// servers accepting writes within the split-brain window; and when nothing
// was acknowledged at all (the check would prove nothing).
func assertNoWriteLost(t *testing.T, rep *workload.CheckReport) {
	t.Helper()
	assertNoDuplicateOrSplitBrain(t, rep)
	if rep.Lost.Count > 0 {
		t.Errorf("LOST: %d acknowledged writes are missing, first %+v (acknowledged with a warning: %+v)",
			rep.Lost.Count, rep.Lost.Sample[:min(5, len(rep.Lost.Sample))], rep.AckedWithWarning)
	}
	if !rep.OK {
		t.Errorf("the workload check failed: %v", rep.Failures)
	}
}

// assertNoDuplicateOrSplitBrain fails the test on every rule of the
// checker but LOST, which asynchronous mode bounds instead
// (assertBoundedLoss), and when nothing was acknowledged at all.
func assertNoDuplicateOrSplitBrain(t *testing.T, rep *workload.CheckReport) {
	t.Helper()
	t.Logf("workload check: ok=%t, %d attempted, %d acknowledged, %d unknown (%d present, %d absent), "+
		"%d rows, %d acknowledged with a warning, longest gap %s",
		rep.OK, rep.Attempted, rep.Acknowledged, rep.Unknown, rep.UnknownPresent, rep.UnknownAbsent,
		rep.Rows, rep.AckedWithWarning.Count, describeGap(rep.Gaps.Longest))
	if rep.Acknowledged == 0 {
		t.Errorf("the writer had no write acknowledged: the check proves nothing")
	}
	if rep.Duplicates.Count > 0 || rep.Rejected.Count > 0 {
		t.Errorf("DUPLICATE: %d rows twice, %d attempts rejected by the key: %+v %+v",
			rep.Duplicates.Count, rep.Rejected.Count, rep.Duplicates.Sample, rep.Rejected.Sample)
	}
	if rep.Phantoms.Count > 0 {
		t.Errorf("PHANTOM: %d rows the writer never attempted: %+v", rep.Phantoms.Count, rep.Phantoms.Sample)
	}
	if len(rep.Interleavings) > 0 {
		t.Errorf("SPLIT BRAIN: two servers accepted writes within %ss of each other: %+v", splitBrainWindow, rep.Interleavings)
	}
}

func describeGap(g *workload.Gap) string {
	if g == nil {
		return "none"
	}
	return fmt.Sprintf("%.2fs (%s → %s)", g.Seconds, g.Start.Format("15:04:05.000"), g.End.Format("15:04:05.000"))
}

// writeGapAround is the longest time without an acknowledged write that
// overlaps [from, to]: the write gap a fault injected at from and healed by
// to caused, measured on the writer's clock (the same node's clock as the
// test's). It is zero if writes never paused there.
func writeGapAround(recs []workload.Record, from, to time.Time) time.Duration {
	before, after, ok := gapBounds(recs, from, to)
	if !ok {
		return 0
	}
	return after.At.Sub(before.At)
}
