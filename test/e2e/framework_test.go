//go:build e2e

// Package e2e holds the end-to-end tests: they run against whatever cluster
// KUBECONFIG points at (the local cluster's kubeconfig when KUBECONFIG is
// unset), each test in a namespace of its own that is deleted afterwards.
// When a test fails, the state of its namespace (objects, `kubectl
// describe`, container logs, events) is written under E2E_ARTIFACTS.
// Tests wait by polling for state with a deadline, never by sleeping.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"tusk.dev/tusk/internal/scheme"
	"tusk.dev/tusk/internal/testenv"
)

var (
	cfg       *rest.Config
	clientset *kubernetes.Clientset
	kube      client.WithWatch
	artifacts string
)

func TestMain(m *testing.M) {
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func setup() error {
	root, err := filepath.Abs("../..")
	if err != nil {
		return err
	}
	if os.Getenv("KUBECONFIG") == "" {
		local := filepath.Join(root, ".cache/local-cluster/kubeconfig")
		if _, err := os.Stat(local); err == nil {
			_ = os.Setenv("KUBECONFIG", local) // kubectl, run for the artifacts, reads it too
		}
	}
	artifacts = os.Getenv("E2E_ARTIFACTS")
	if artifacts == "" {
		artifacts = filepath.Join(root, ".cache/e2e-artifacts")
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("while loading the kubeconfig (is a cluster up? make cluster-up): %w", err)
	}
	if clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	s, err := scheme.New()
	if err != nil {
		return err
	}
	kube, err = client.NewWithWatch(cfg, client.Options{Scheme: s})
	return err
}

func ptrTo[T any](v T) *T { return &v }

// The e2e tests share one Kubernetes cluster and one operator. Each test
// says in its first statement which group it runs in, and the unit test
// TestEveryTestHasAGroup (groups_test.go) fails when one does not:
//
//   - parallel(t): beside the others, at most -parallel at once (E2E_FLAGS),
//     each in a namespace of its own. Most tests wait on pods, Leases and
//     kube-proxy far more than they compute.
//   - serial(t, why): alone. Go runs a package's tests that do not call
//     t.Parallel first, one at a time, and holds the parallel ones until the
//     last of them has ended; so a serial test never overlaps another test.
//
// A test that fails only beside others has found a race, in the product or
// in the test: fix it; make it serial only for one of the reasons below.
func parallel(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// serial documents why t runs alone; see parallel.
func serial(t *testing.T, why serialReason) {
	t.Helper()
	t.Logf("runs alone: %s", why)
}

// serialReason is why a test cannot share the cluster with others.
type serialReason string

const (
	// measuresWriteGap: its figures (the write gap clients see across a
	// handover, a cutover or an upgrade) are what docs/benchmarks.md and
	// make bench-ha publish, and other tests' load on the two cores would
	// blur them.
	measuresWriteGap serialReason = "it measures the write gap clients see across a handover, a cutover or an upgrade, which other tests' load would blur"
	// stopsTheOperator: it kills or restarts the one operator every other
	// test's clusters depend on.
	stopsTheOperator serialReason = "it stops the operator that every other test depends on"
	// loadsTheMachine: it saturates the cores on purpose and bounds a write
	// gap meanwhile: it would slow the others and they it.
	loadsTheMachine serialReason = "it saturates the machine on purpose and bounds a write gap meanwhile"
)

// eventually waits until cond reports true, failing the test with what
// was awaited and the last error when timeout passes (testenv.Eventually
// does the polling).
func eventually(t *testing.T, timeout time.Duration, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	eventuallyEvery(t, timeout, 50*time.Millisecond, what, cond)
}

// eventuallyEvery is eventually for conditions that are costly to check
// (kubectl exec, a query): it checks every interval.
func eventuallyEvery(t *testing.T, timeout, interval time.Duration, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	testenv.EventuallyEvery(t, timeout, interval, func(ctx context.Context) error {
		ok, err := cond(ctx)
		switch {
		case ok:
			return nil
		case err != nil:
			return fmt.Errorf("waiting for %s: %w", what, err)
		default:
			return fmt.Errorf("waiting for %s", what)
		}
	})
}

// consistently checks every interval, for duration, that check returns nil,
// failing the test with what should have held at the first error.
func consistently(t *testing.T, duration, interval time.Duration, what string, check func(context.Context) error) {
	t.Helper()
	testenv.Consistently(t, duration, interval, func(ctx context.Context) error {
		if err := check(ctx); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9-]+`)

// newNamespace creates a namespace for this test under the `restricted` Pod
// Security Standard and deletes it when the test ends, dumping its state
// first if the test failed. Before, it checks that no log of its pods or
// of the operator holds one of its secrets.
func newNamespace(t *testing.T) string {
	t.Helper()
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	base := strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(base) > 40 {
		base = base[:40]
	}
	name := "e2e-" + base + "-" + hex.EncodeToString(suffix)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}}}
	ctx := context.Background()
	created := time.Now()
	if _, err := clientset.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		checkNoSecretLogged(t, name, created)
		if t.Failed() {
			dumpNamespace(t, name, created)
		}
		deleteNamespace(t, name)
	})
	return name
}

// teardownGrace is the grace period the test's pods get once the test is
// over. Their own (a primary waits up to 15 s for a handover that never
// comes when its whole cluster goes, then drains twice) made every test's
// cleanup take about 50 s, holding a parallel slot or, for a serial test,
// CI's wall clock. Graceful termination is what the HA tests exercise, on
// purpose, while they measure it.
const teardownGrace = 1

func deleteNamespace(t *testing.T, name string) {
	ctx := context.Background()
	err := clientset.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Errorf("deleting namespace %s: %v", name, err)
		return
	}
	// The namespace is terminating: nothing can create a pod in it again,
	// so the pods' grace period can be cut short.
	if err := clientset.CoreV1().Pods(name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](teardownGrace)},
		metav1.ListOptions{}); err != nil {
		t.Logf("cutting the grace period of the pods of %s short: %v", name, err)
	}
	start := time.Now()
	defer func() {
		t.Logf("namespace %s gone %.1fs after its pods were deleted", name, time.Since(start).Seconds())
	}()
	eventually(t, 3*time.Minute, "namespace "+name+" to be gone", func(ctx context.Context) (bool, error) {
		_, err := clientset.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// dumpNamespace writes what an engineer needs to see why a test failed,
// with the operator's logs since the test began.
func dumpNamespace(t *testing.T, ns string, since time.Time) {
	dir := filepath.Join(artifacts, unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_"))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Logf("cannot write artifacts: %v", err)
		return
	}
	kubectlTo(t, filepath.Join(dir, "objects.txt"), "get", "all,pvc,configmaps,postgresclusters", "-n", ns, "-o", "wide")
	kubectlTo(t, filepath.Join(dir, "describe.txt"), "describe", "pods,pvc,deployments,postgresclusters", "-n", ns)
	kubectlTo(t, filepath.Join(dir, "events.txt"), "get", "events", "-n", ns, "--sort-by=.lastTimestamp")
	kubectlTo(t, filepath.Join(dir, "nodes.txt"), "describe", "nodes")
	kubectlTo(t, filepath.Join(dir, "postgresclusters.yaml"), "get", "postgresclusters", "-n", ns, "-o", "yaml")
	dumpOperatorLogs(t, dir, since)
	pods, err := clientset.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err == nil {
		for _, p := range pods.Items {
			kubectlTo(t, filepath.Join(dir, "logs-"+p.Name+".txt"), "logs", "-n", ns, p.Name, "--all-containers", "--prefix")
		}
	}
	t.Logf("artifacts of the failure are in %s", dir)
}

// dumpOperatorLogs writes the logs of every operator pod (a test may have
// restarted it) from since on.
func dumpOperatorLogs(t *testing.T, dir string, since time.Time) {
	ctx := context.Background()
	d, err := clientset.AppsV1().Deployments(operatorNamespace).Get(ctx, operatorDeployment, metav1.GetOptions{})
	if err != nil {
		t.Logf("cannot find the operator for its logs: %v", err)
		return
	}
	selector := metav1.FormatLabelSelector(d.Spec.Selector)
	kubectlTo(t, filepath.Join(dir, "operator-logs.txt"), "logs", "-n", operatorNamespace, "-l", selector,
		"--all-containers", "--prefix", "--tail=-1", "--since-time="+since.UTC().Format(time.RFC3339))
}

func kubectlTo(t *testing.T, file string, args ...string) {
	out, err := exec.Command("kubectl", args...).CombinedOutput() // #nosec G204 -- fixed command, test arguments
	if err != nil {
		out = append(out, []byte(fmt.Sprintf("\n(kubectl %s: %v)\n", strings.Join(args, " "), err))...)
	}
	if err := os.WriteFile(file, out, 0o600); err != nil {
		t.Logf("writing %s: %v", file, err)
	}
}

// kubectl runs kubectl.
//
// It returns kubectl's standard output only. Its standard error (kubectl's
// own notices, such as a websocket "Unknown stream id" line during exec) is
// part of the error when the command fails, never of the output, so it
// cannot garble what a command printed.
//
// Exec goes over SPDY, not websockets: kubectl's websocket
// client fails on large outputs ("error reading from error stream: read
// message", kubernetes/kubernetes#60140), which broke reading the chaos
// run's ledger (megabytes) in CI.
func kubectl(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "kubectl", args...) // #nosec G204 -- test arguments
	cmd.Env = append(os.Environ(), "KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// testImage is what test pods run: it has a shell, getent and the
// PostgreSQL client and server. `make e2e` builds and loads it first.
const testImage = "tusk/postgres:15"

// restrictedPod returns a pod spec that passes the `restricted` Pod Security
// Standard: non-root, no privilege escalation, no capabilities,
// RuntimeDefault seccomp. fsGroup makes volumes writable.
func restrictedPod(name string, command ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptrTo(true),
				FSGroup:        ptrTo[int64](2000),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			TerminationGracePeriodSeconds: ptrTo[int64](5),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           testImage,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         command,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptrTo(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

func withVolume(pod *corev1.Pod, claim, path string) *corev1.Pod {
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
	}})
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: path})
	return pod
}

func createPod(t *testing.T, ns string, pod *corev1.Pod) {
	t.Helper()
	if _, err := clientset.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
}

// waitPodPhase waits for the pod to reach phase; a pod that ends in the other
// terminal phase fails the test at once.
func waitPodPhase(t *testing.T, ns, name string, phase corev1.PodPhase) {
	t.Helper()
	eventually(t, 2*time.Minute, "pod "+name+" "+string(phase), func(ctx context.Context) (bool, error) {
		p, err := clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed && phase != corev1.PodFailed {
			t.Fatalf("pod %s failed: %s", name, podLogs(t, ns, name))
		}
		return p.Status.Phase == phase, nil
	})
}

func waitPodReady(t *testing.T, ns, name string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "pod "+name+" Ready", func(ctx context.Context) (bool, error) {
		p, err := clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

func podLogs(t *testing.T, ns, name string) string {
	t.Helper()
	out, err := clientset.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading logs of %s: %v", name, err)
	}
	return string(out)
}

func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	if err := clientset.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting pod %s: %v", name, err)
	}
	eventually(t, 2*time.Minute, "pod "+name+" gone", func(ctx context.Context) (bool, error) {
		_, err := clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
