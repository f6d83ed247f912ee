//go:build e2e

package e2e

// Fault injectors for the HA and chaos tests. The API-level ones (deleting
// pods) work on any cluster; the process and network ones act on the
// node's host: they need the test to run as root on the node of the pod
// (the local single-node cluster), find the pod's processes under /proc by
// its container's cgroup, and use kill(2), nsenter and iptables. Each
// reports its failure clearly and undoes what it broke in t.Cleanup.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// currentPrimary is the instance the cluster's status names primary.
func currentPrimary(t *testing.T, ns, cluster string) string {
	t.Helper()
	primary := mustGetCluster(t, ns, cluster).Status.CurrentPrimary
	if primary == "" {
		t.Fatalf("cluster %s has no current primary", cluster)
	}
	return primary
}

// deletePrimaryPod deletes the primary's pod (default grace period) and
// returns its name. Nothing to restore: the operator heals the cluster.
func deletePrimaryPod(t *testing.T, ns, cluster string) string {
	t.Helper()
	primary := currentPrimary(t, ns, cluster)
	if err := clientset.CoreV1().Pods(ns).Delete(context.Background(), primary, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the primary's pod %s: %v", primary, err)
	}
	return primary
}

// evictPrimaryPod evicts the primary's pod through the eviction API, as
// kubectl drain does; a PodDisruptionBudget that refuses it (429) is
// asked again, as drain does, until it allows it.
func evictPrimaryPod(t *testing.T, ns, cluster string) string {
	t.Helper()
	primary := currentPrimary(t, ns, cluster)
	eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: primary, Namespace: ns}}
	eventuallyEvery(t, time.Minute, 500*time.Millisecond, "the eviction of the primary's pod "+primary, func(ctx context.Context) (bool, error) {
		err := clientset.PolicyV1().Evictions(ns).Evict(ctx, eviction)
		if apierrors.IsTooManyRequests(err) {
			t.Logf("eviction of %s refused for now: %v", primary, err)
			return false, nil
		}
		return err == nil, err
	})
	return primary
}

// deleteAllInstancePods deletes every instance pod of the cluster at once,
// as a node restart or a careless `kubectl delete pods --all` would.
func deleteAllInstancePods(t *testing.T, ns, cluster string) []string {
	t.Helper()
	pods := mustClusterPods(t, ns, cluster)
	for _, p := range pods {
		if err := clientset.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting instance pod %s: %v", p.Name, err)
		}
	}
	return podNames(pods)
}

// killOperator deletes the operator's pods with no grace period (the
// process gets SIGKILL, as on a node failure). The Deployment replaces
// them; the cleanup waits for that, so the next test has an operator.
func killOperator(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	pods, err := operatorPods(ctx)
	if err != nil || len(pods) == 0 {
		t.Fatalf("finding the operator's pods (%d found): %v", len(pods), err)
	}
	killed := map[types.UID]bool{}
	for _, p := range pods {
		killed[p.UID] = true
		err := clientset.CoreV1().Pods(operatorNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)})
		if err != nil {
			t.Fatalf("killing operator pod %s: %v", p.Name, err)
		}
	}
	t.Cleanup(func() { waitOperatorReplaced(t, killed, len(pods)) })
	return podNames(pods)
}

// waitOperatorReplaced waits until n operator pods, none of them one of
// gone, are Ready.
func waitOperatorReplaced(t *testing.T, gone map[types.UID]bool, n int) {
	t.Helper()
	eventually(t, 3*time.Minute, "new operator pods Ready", func(ctx context.Context) (bool, error) {
		pods, err := operatorPods(ctx)
		if err != nil {
			return false, err
		}
		ready := 0
		for i := range pods {
			if !gone[pods[i].UID] && pods[i].DeletionTimestamp == nil && podIsReady(&pods[i]) {
				ready++
			}
		}
		return ready == n, nil
	})
}

// requireNodeAccess skips a test whose faults act on the node's processes
// when it does not run as root (on the node of the pods).
func requireNodeAccess(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("process and network faults need the test to run as root on the cluster's node (the local cluster)")
	}
}

// hostProcess is a process of the node, seen from the host's PID namespace.
type hostProcess struct {
	PID, PPID int
	Comm      string
}

// containerID is the runtime's id of a container of a running pod, without
// the runtime:// prefix.
func containerID(t *testing.T, ns, pod, container string) (string, types.UID) {
	t.Helper()
	p, err := clientset.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading pod %s: %v", pod, err)
	}
	i := slices.IndexFunc(p.Status.ContainerStatuses, func(s corev1.ContainerStatus) bool { return s.Name == container })
	if i < 0 || p.Status.ContainerStatuses[i].State.Running == nil {
		t.Fatalf("container %s of pod %s is not running: %+v", container, pod, p.Status.ContainerStatuses)
	}
	id := p.Status.ContainerStatuses[i].ContainerID
	return id[strings.Index(id, "://")+3:], p.UID
}

// hostProcesses lists the node's processes whose cgroup path contains one
// of the substrings (a container id; a pod's UID, as cgroupfs and systemd
// spell it).
func hostProcesses(substrings ...string) ([]hostProcess, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	var procs []hostProcess
	for _, dir := range dirs {
		cgroup, err := os.ReadFile(filepath.Join(dir, "cgroup")) // #nosec G304 -- /proc
		if err != nil || !slices.ContainsFunc(substrings, func(s string) bool { return bytes.Contains(cgroup, []byte(s)) }) {
			continue // gone meanwhile, or not ours
		}
		if p, err := readHostProcess(dir); err == nil {
			procs = append(procs, p)
		}
	}
	return procs, nil
}

// readHostProcess reads a process's pid, parent and command from
// /proc/<pid>/stat: "pid (comm) state ppid …", comm possibly with spaces.
func readHostProcess(dir string) (hostProcess, error) {
	stat, err := os.ReadFile(filepath.Join(dir, "stat")) // #nosec G304 -- /proc
	if err != nil {
		return hostProcess{}, err
	}
	s := string(stat)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return hostProcess{}, fmt.Errorf("unexpected %s/stat: %q", dir, s)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(s[:open]))
	if err != nil {
		return hostProcess{}, err
	}
	rest := strings.Fields(s[closing+1:])
	if len(rest) < 2 {
		return hostProcess{}, fmt.Errorf("unexpected %s/stat: %q", dir, s)
	}
	ppid, err := strconv.Atoi(rest[1])
	return hostProcess{PID: pid, PPID: ppid, Comm: s[open+1 : closing]}, err
}

// postgresProcesses finds the PostgreSQL processes of an instance pod on the
// host: the postmaster (the postgres process whose parent is not one) and
// all of them, postmaster first.
func postgresProcesses(t *testing.T, ns, pod string) (postmaster int, all []int) {
	t.Helper()
	id, _ := containerID(t, ns, pod, "postgres")
	procs, err := hostProcesses(id)
	if err != nil || len(procs) == 0 {
		t.Fatalf("finding the processes of container %s of pod %s under /proc (is this the pod's node?): %d found, %v",
			id, pod, len(procs), err)
	}
	isPostgres := map[int]bool{}
	for _, p := range procs {
		isPostgres[p.PID] = p.Comm == "postgres"
	}
	for _, p := range procs {
		if isPostgres[p.PID] && !isPostgres[p.PPID] {
			postmaster = p.PID
		}
	}
	if postmaster == 0 {
		t.Fatalf("no postmaster among the processes of pod %s: %+v", pod, procs)
	}
	all = []int{postmaster}
	for _, p := range procs {
		if isPostgres[p.PID] && p.PID != postmaster {
			all = append(all, p.PID)
		}
	}
	return postmaster, all
}

// killPostmaster sends SIGKILL to the postmaster of the pod's PostgreSQL (a
// crash: its children stay until they notice) and returns its host PID.
func killPostmaster(t *testing.T, ns, pod string) int {
	t.Helper()
	postmaster, _ := postgresProcesses(t, ns, pod)
	if err := syscall.Kill(postmaster, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL to the postmaster of %s (host PID %d): %v", pod, postmaster, err)
	}
	return postmaster
}

// freezePostgres sends SIGSTOP to every PostgreSQL process of the pod, the
// postmaster first: the server neither answers nor accepts connections,
// while its pod, its instance manager and its network stay up (a hung
// server, a VM paused). The returned thaw sends SIGCONT; the cleanup
// calls it too if the test did not. A frozen postmaster alone would leave
// its backends serving the connections already open.
func freezePostgres(t *testing.T, ns, pod string) (thaw func()) {
	t.Helper()
	_, pids := postgresProcesses(t, ns, pod)
	for _, pid := range pids {
		// A backend may exit between the listing and the signal.
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
			signalAll(t, pids, syscall.SIGCONT)
			t.Fatalf("SIGSTOP to PostgreSQL process %d of %s: %v", pid, pod, err)
		}
	}
	thawed := false
	thaw = func() {
		if !thawed {
			thawed = true
			signalAll(t, pids, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	return thaw
}

// signalAll signals each process that still exists, reporting other errors.
func signalAll(t *testing.T, pids []int, sig syscall.Signal) {
	t.Helper()
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s to process %d: %v", sig, pid, err)
		}
	}
}

// cutRuleComment marks the iptables rules cutNetwork adds.
const cutRuleComment = "tusk-e2e-network-cut"

// cutNetworkRules drop every packet in and out of the pod but loopback:
// the pod reaches neither the API server nor the other instances, and
// nothing reaches it (clients, probes, the operator).
var cutNetworkRules = [][]string{
	{"INPUT", "!", "-i", "lo", "-m", "comment", "--comment", cutRuleComment, "-j", "DROP"},
	{"OUTPUT", "!", "-o", "lo", "-m", "comment", "--comment", cutRuleComment, "-j", "DROP"},
}

// cutNetwork isolates the pod by iptables rules in its network namespace
// (shared by its containers and kept across their restarts). The returned
// restore removes them; the cleanup calls it too if the test did not. If
// the pod was deleted meanwhile, its namespace and the rules went with it.
func cutNetwork(t *testing.T, ns, pod string) (restore func()) {
	t.Helper()
	_, uid := containerID(t, ns, pod, "postgres")
	for _, rule := range cutNetworkRules {
		if err := podIPTables(t, uid, append([]string{"-I"}, rule...)...); err != nil {
			t.Fatalf("cutting the network of pod %s: %v", pod, err)
		}
	}
	restored := false
	restore = func() {
		if restored {
			return
		}
		restored = true
		for _, rule := range cutNetworkRules {
			err := podIPTables(t, uid, append([]string{"-D"}, rule...)...)
			if err != nil && !errors.Is(err, errPodGone) {
				t.Errorf("restoring the network of pod %s: %v", pod, err)
			}
		}
	}
	t.Cleanup(restore)
	return restore
}

var errPodGone = errors.New("the pod has no process left on this node")

// podIPTables runs iptables in the network namespace of the pod with uid,
// entered through any of its processes (the sandbox's included, so a
// restarting container does not matter).
func podIPTables(t *testing.T, uid types.UID, args ...string) error {
	t.Helper()
	procs, err := hostProcesses("pod"+string(uid), "pod"+strings.ReplaceAll(string(uid), "-", "_"))
	if err != nil {
		return err
	}
	if len(procs) == 0 {
		return errPodGone
	}
	// The sandbox's pause process lives as long as the namespace.
	slices.SortStableFunc(procs, func(a, b hostProcess) int { return boolRank(a.Comm != "pause") - boolRank(b.Comm != "pause") })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := append([]string{"-t", strconv.Itoa(procs[0].PID), "-n", "iptables", "-w"}, args...)
	out, err := exec.CommandContext(ctx, "nsenter", cmd...).CombinedOutput() // #nosec G204 -- fixed command, test arguments
	if err != nil {
		return fmt.Errorf("nsenter %s: %w: %s", strings.Join(cmd, " "), err, out)
	}
	return nil
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// killOperatorProcess kills the operator at once: SIGKILL to every process
// of its container on the node (a delete with grace 0 only asks the
// kubelet, and the old process keeps working meanwhile), then, as
// killOperator does, deletes its pods with grace 0 so the Deployment
// replaces them; the cleanup waits for that. Needs node access.
func killOperatorProcess(t *testing.T) []string {
	t.Helper()
	pods, err := operatorPods(context.Background())
	if err != nil || len(pods) == 0 {
		t.Fatalf("finding the operator's pods (%d found): %v", len(pods), err)
	}
	for _, p := range pods {
		id, _ := containerID(t, operatorNamespace, p.Name, "operator")
		procs, err := hostProcesses(id)
		if err != nil || len(procs) == 0 {
			t.Fatalf("finding the processes of the operator's container %s under /proc: %d found, %v", id, len(procs), err)
		}
		for _, proc := range procs {
			if err := syscall.Kill(proc.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				t.Fatalf("SIGKILL to operator process %d: %v", proc.PID, err)
			}
		}
	}
	return killOperator(t)
}

// midFailover is what killOperatorMidFailover saw.
type midFailover struct {
	oldPrimary, target string
	// recorded: the failover was already recorded (status.currentPrimary
	// moved) when the operator died; the kill then came too late to prove
	// anything about a failover cut short.
	recorded bool
}

// killOperatorMidFailover deletes the primary's pod, waits until the
// operator has chosen and recorded a successor (status.targetPrimary names
// another instance than status.currentPrimary: the failover has started,
// the promotion is under way or about to be) and kills the operator's
// process at that moment. A new operator must finish the failover.
func killOperatorMidFailover(t *testing.T, ns, cluster string) midFailover {
	t.Helper()
	f := midFailover{oldPrimary: deletePrimaryPod(t, ns, cluster)}
	// A tight poll: the promotion that follows takes well under a second.
	eventuallyEvery(t, 2*time.Minute, 10*time.Millisecond, "the operator to start a failover from "+f.oldPrimary,
		func(ctx context.Context) (bool, error) {
			pgc, err := getCluster(ctx, ns, cluster)
			if err != nil {
				return false, err
			}
			f.target = pgc.Status.TargetPrimary
			f.recorded = pgc.Status.CurrentPrimary != f.oldPrimary
			return f.recorded || (f.target != "" && f.target != f.oldPrimary), nil
		})
	killOperatorProcess(t)
	if f.recorded {
		return f // the poll saw it over already
	}
	// A status write the operator sent just before it died may still land.
	pgc := mustGetCluster(t, ns, cluster)
	f.recorded = pgc.Status.CurrentPrimary != f.oldPrimary
	return f
}

// assertOnePrimary fails unless exactly one instance is primary: the one
// status names, the only pod the -rw Service selects and the only instance
// reporting the primary role.
func assertOnePrimary(t *testing.T, ns, cluster string) string {
	t.Helper()
	pgc := mustGetCluster(t, ns, cluster)
	primary := pgc.Status.CurrentPrimary
	var labelled, reporting []string
	for _, p := range mustClusterPods(t, ns, cluster) {
		if p.Labels[instanceapi.LabelRole] == string(instanceapi.RolePrimary) {
			labelled = append(labelled, p.Name)
		}
	}
	for _, in := range pgc.Status.Instances {
		if in.Role == tuskv1alpha1.RolePrimary {
			reporting = append(reporting, in.Name)
		}
	}
	if len(labelled) != 1 || labelled[0] != primary || len(reporting) != 1 || reporting[0] != primary {
		t.Fatalf("not exactly one primary: status names %s, pods labelled primary %v, instances reporting primary %v",
			primary, labelled, reporting)
	}
	return primary
}

// logFailoverEvents logs the cluster's failover Events in order, and those
// that create, remove or replace instances, so a passing run still tells
// which instances were promoted, rewound or replaced, and why.
func logFailoverEvents(t *testing.T, ns string) {
	t.Helper()
	events, err := clientset.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Errorf("listing the Events: %v", err)
		return
	}
	slices.SortFunc(events.Items, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	for _, e := range events.Items {
		switch e.Reason {
		case tuskv1alpha1.ReasonFailingOver, tuskv1alpha1.ReasonFailedOver, tuskv1alpha1.ReasonFailoverBlocked, tuskv1alpha1.ReasonDemoting,
			tuskv1alpha1.ReasonRewinding, tuskv1alpha1.ReasonCreatedInstance, tuskv1alpha1.ReasonRemovedInstance, tuskv1alpha1.ReasonRecloningInstance:
			t.Logf("event %s %s: %s", e.EventTime.Format("15:04:05.000"), e.Reason, e.Note)
		}
	}
}
