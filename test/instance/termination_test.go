//go:build integration

package instance

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typeddiscovery "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/utils/ptr"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/postgres"
	"tusk.dev/tusk/internal/testenv"
)

// The termination tests: what an instance manager does on SIGTERM (its pod
// deleted, evicted or drained), against real PostgreSQL and EndpointSlices
// on a real API server (instance.TerminationOptions).

// terminationArgs turn the handover and the drain on, as the operator's
// pods do, with a short quiet time.
func terminationArgs(handoverWait string) []string {
	return []string{"--handover-wait=" + handoverWait, "--drain-timeout=1m", "--drain-quiet=300ms"}
}

// testSlice is one Service's EndpointSlice on the shared API server.
type testSlice struct {
	t      *testing.T
	client typeddiscovery.EndpointSliceInterface
	slice  *discoveryv1.EndpointSlice
}

// newTestSlice lists pod as an endpoint of service, ready and serving.
func newTestSlice(t *testing.T, service, pod string) *testSlice {
	t.Helper()
	env := sharedAPIServer(t)
	s := &testSlice{t: t, client: kubernetes.NewForConfigOrDie(env.Config).DiscoveryV1().EndpointSlices("default")}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: service, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.0.0.1"}, // the API server refuses loopback addresses
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: pod},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		}},
	}
	created, err := s.client.Create(context.Background(), slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.slice = created
	t.Cleanup(func() { _ = s.client.Delete(context.Background(), service, metav1.DeleteOptions{}) })
	return s
}

// set changes the endpoint's conditions, as the endpoint controller does
// for a terminating pod (ready false) and after its readiness probe failed
// (serving false).
func (s *testSlice) set(ready, serving bool) {
	s.t.Helper()
	s.slice.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(serving), Terminating: ptr.To(!ready)}
	updated, err := s.client.Update(context.Background(), s.slice, metav1.UpdateOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	s.slice = updated
}

// waitStandby waits until a standby streams from primary.
func waitStandby(primary *node) {
	primary.t.Helper()
	primary.waitFor("a streaming standby", func(st instanceapi.Status) error {
		if len(st.Replicas) == 0 {
			return errors.New("no standby yet")
		}
		return nil
	})
}

// sigterm asks the manager to stop, as the kubelet does, without waiting.
func (n *node) sigterm() time.Time {
	n.t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		n.t.Fatal(err)
	}
	return time.Now()
}

// waitExit waits until the manager has exited.
func (n *node) waitExit() {
	n.t.Helper()
	select {
	case <-n.exited:
	case <-time.After(waitTimeout):
		n.t.Fatalf("%s did not exit:\n%s", n.name, n.logs())
	}
}

// running says the manager has not exited.
func (n *node) running() bool {
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// refusedAtOnce checks that a connection attempt fails, and fast: refused
// or reset, not left waiting for a timeout.
func refusedAtOnce(t *testing.T, n *node) {
	t.Helper()
	began := time.Now()
	conn, err := n.tryConnect(context.Background(), "postgres", superuserPassword, "postgres")
	if err == nil {
		_ = conn.Close(context.Background())
		t.Fatalf("%s accepted a session while it should refuse them", n.name)
	}
	if took := time.Since(began); took > 2*time.Second || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a connection attempt to %s took %s to fail (%v): dropped, not refused", n.name, took, err)
	}
}

// TestTerminationWithoutStandby: a primary with no standby to hand over to
// shuts down at once when asked to stop and releases its Lease; then, while
// a Service still sends it connections, it keeps refusing them at once
// instead of vanishing, and exits only once the Service no longer does.
func TestTerminationWithoutStandby(t *testing.T) {
	lease := newTestLease(t, "term-alone-primary")
	args := append(lease.args(t, lease.addr(t)), terminationArgs("1m")...)
	n := startNode(t, "term-alone-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: args})
	n.waitReady(instanceapi.RolePrimary)
	lease.waitHolder(t, "term-alone-1")
	rw := newTestSlice(t, "term-alone-rw", "term-alone-1")

	n.sigterm()
	n.waitLog("Shutting down without a handover")
	lease.waitHolder(t, "") // released: the operator may fail over at once
	n.waitLog("Stopping postgres", "fast")
	for range 3 {
		refusedAtOnce(t, n)
	}
	if !n.running() {
		t.Fatalf("the manager exited while a Service still listed it as ready:\n%s", n.logs())
	}

	rw.set(false, false)
	n.waitExit()
	if strings.Contains(n.logs(), "No handover came") {
		t.Error("the manager waited for a handover without a standby")
	}
	if !strings.Contains(n.logs(), "No Service sends connections here any more") {
		t.Errorf("the manager did not exit because the Services let it go:\n%s", n.logs())
	}
	if procs := n.postgresProcesses(); len(procs) > 0 {
		t.Errorf("postgres processes left: %v", procs)
	}
}

// TestHandoverOnSIGTERM: a primary with a streaming standby, asked to
// stop, keeps serving as the primary and says it is terminating; the
// operator's step-down then stops it for good (no restart as a replica),
// the standby has every record, and the manager exits.
func TestHandoverOnSIGTERM(t *testing.T) {
	lease := newTestLease(t, "handover-primary")
	leaseArgs := lease.args(t, lease.addr(t))
	primary := startNode(t, "handover-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: append(leaseArgs, terminationArgs("1m")...)})
	primary.waitReady(instanceapi.RolePrimary)
	primary.exec("CREATE TABLE t (id int PRIMARY KEY)")
	primary.exec("INSERT INTO t VALUES (1)")
	replica := startNode(t, "handover-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port, extraArgs: leaseArgs})
	replica.waitReady(instanceapi.RoleReplica)
	waitStandby(primary)

	primary.sigterm()
	primary.waitFor("terminating while serving as the primary", func(st instanceapi.Status) error {
		if !st.Terminating || st.Role != instanceapi.RolePrimary || !st.Ready {
			return errors.New("not a terminating, ready primary")
		}
		return nil
	})
	primary.exec("INSERT INTO t VALUES (2)") // still takes writes while it waits

	// Only the handover is still taken.
	if code, _ := primary.call(t.Context(), http.MethodPost, instanceapi.PathRestart, nil, nil); code != http.StatusConflict {
		t.Errorf("a restart while terminating answered %d, want %d", code, http.StatusConflict)
	}
	var down instanceapi.StepDownResult
	primary.command(http.MethodPost, instanceapi.PathStepDown, instanceapi.FollowRequest{Upstream: instanceapi.Upstream{Host: "127.0.0.1", Port: replica.port}}, &down)
	checkpoint, err := postgres.ParseLSN(down.ShutdownCheckpointLSN)
	if err != nil {
		t.Fatalf("step-down returned %+v: %v", down, err)
	}
	replica.waitFor("the standby to have the shutdown checkpoint", func(st instanceapi.Status) error { return receivedPast(st, checkpoint) })
	lease.waitHolder(t, "")
	replica.command(http.MethodPost, instanceapi.PathPromote, nil, nil)
	replica.waitReady(instanceapi.RolePrimary)
	replica.waitIDs(1, 2)

	primary.waitExit()
	if strings.Contains(primary.logs(), "No handover came") {
		t.Error("the handover deadline passed although the step-down came")
	}
	if procs := primary.postgresProcesses(); len(procs) > 0 {
		t.Errorf("the stepped-down primary started postgres again: %v", procs)
	}
}

// TestHandoverWaitRunsOut: when no step-down comes, a terminating primary
// shuts down by itself once the handover wait is over, fast, so that its
// standby has every record, and releases its Lease.
func TestHandoverWaitRunsOut(t *testing.T) {
	lease := newTestLease(t, "nohandover-primary")
	leaseArgs := lease.args(t, lease.addr(t))
	primary := startNode(t, "nohandover-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: append(leaseArgs, terminationArgs("2s")...)})
	primary.waitReady(instanceapi.RolePrimary)
	primary.exec("CREATE TABLE t (id int PRIMARY KEY)")
	replica := startNode(t, "nohandover-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port, extraArgs: leaseArgs})
	replica.waitReady(instanceapi.RoleReplica)
	waitStandby(primary)
	primary.exec("INSERT INTO t VALUES (1)")

	asked := primary.sigterm()
	primary.waitLog("No handover came")
	stopped := primary.waitLog("Stopping postgres", "fast")
	if waited := stopped.Sub(asked); waited < 2*time.Second {
		t.Errorf("the primary stopped %s after SIGTERM, before its handover wait (2s) was over", waited)
	}
	primary.waitExit()
	lease.waitHolder(t, "")
	replica.command(http.MethodPost, instanceapi.PathPromote, nil, nil)
	replica.waitReady(instanceapi.RolePrimary)
	replica.waitIDs(1)
}

// TestReplicaLeavesServicesFirst: a replica asked to stop keeps serving
// while a Service lists it as ready, stops postgres only once none does,
// then refuses connections until no Service falls back to it either.
func TestReplicaLeavesServicesFirst(t *testing.T) {
	lease := newTestLease(t, "leave-primary")
	leaseArgs := lease.args(t, lease.addr(t))
	primary := startNode(t, "leave-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: leaseArgs})
	primary.waitReady(instanceapi.RolePrimary)
	replica := startNode(t, "leave-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port,
		extraArgs: append(leaseArgs, terminationArgs("1m")...)})
	replica.waitReady(instanceapi.RoleReplica)
	ro := newTestSlice(t, "leave-ro", "leave-2")

	replica.sigterm()
	replica.waitFor("terminating", func(st instanceapi.Status) error {
		if !st.Terminating {
			return errors.New("not terminating")
		}
		return nil
	})
	// Listed as ready: reads routed here are still served.
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		conn, err := replica.tryConnect(ctx, "postgres", superuserPassword, "postgres")
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	})

	if strings.Contains(replica.logs(), "Stopping postgres") {
		t.Fatalf("the replica stopped postgres while a Service listed it as ready:\n%s", replica.logs())
	}

	// Terminating: not ready, but serving, and the only endpoint, so
	// kube-proxy still falls back to it.
	ro.set(false, true)
	replica.waitLog("Stopping postgres", "smart")
	replica.waitFor("postgres stopped", func(st instanceapi.Status) error {
		if st.Phase != instanceapi.PhaseStopped {
			return errors.New("phase " + string(st.Phase))
		}
		return nil
	})
	refusedAtOnce(t, replica)
	if !replica.running() {
		t.Fatalf("the replica exited while kube-proxy could still fall back to it:\n%s", replica.logs())
	}
	ro.set(false, false)
	replica.waitExit()
}

// TestHandoverWaitEndsWhenNoStandbyIsLeft: a primary waiting for a
// handover stops waiting as soon as no standby streams from it any more
// (every pod of the cluster deleted at once: no handover can come), long
// before its handover wait is over.
func TestHandoverWaitEndsWhenNoStandbyIsLeft(t *testing.T) {
	lease := newTestLease(t, "alone-primary")
	leaseArgs := lease.args(t, lease.addr(t))
	primary := startNode(t, "alone-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: append(leaseArgs, terminationArgs("10m")...)})
	primary.waitReady(instanceapi.RolePrimary)
	replica := startNode(t, "alone-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port, extraArgs: leaseArgs})
	replica.waitReady(instanceapi.RoleReplica)
	waitStandby(primary)

	primary.sigterm()
	primary.waitLog("waiting for the operator to hand the primary role over")
	replica.stop()
	primary.waitLog("No handover can come")
	primary.waitExit() // within waitTimeout, far below the 10m wait
	lease.waitHolder(t, "")
}
