//go:build integration

package instance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/postgres"
	"tusk.dev/tusk/internal/testenv"
)

// TestPromoteAfterPrimaryDies: a replica watches the primary's Lease all
// along, so when the primary dies without releasing it the replica can be
// promoted once the Lease has stayed unchanged for its duration since the
// replica first saw its last version, not a duration after the promote
// call; before that the promotion is refused. On a machine so slow that
// the early promote is answered only after the Lease could expire, that
// round proves nothing: it is run again with new instances, and the test
// fails when no round of three proved the refusal.
func TestPromoteAfterPrimaryDies(t *testing.T) {
	for round := 1; round <= 3; round++ {
		if promoteAfterPrimaryDies(t, fmt.Sprintf("dies%d", round)) {
			return
		}
	}
	t.Fatal("in three rounds, the early promote was never answered before the Lease could expire: nothing proved the refusal")
}

// promoteAfterPrimaryDies runs one round with instances named after name;
// it says whether the early promote was answered in time to prove the
// refusal (false ends the round there).
func promoteAfterPrimaryDies(t *testing.T, name string) bool {
	lease := newTestLease(t, name)
	// At debug level the manager logs each Lease version it observes.
	args := append(lease.args(t, lease.addr(t)), "--zap-log-level", "debug")
	primary := startNode(t, name+"-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: args})
	primary.waitReady(instanceapi.RolePrimary)
	lease.waitHolder(t, name+"-1")
	replica := startNode(t, name+"-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port, extraArgs: args})
	replica.waitReady(instanceapi.RoleReplica)

	primary.kill()
	final := lease.get(t)
	for attempt := 1; ; attempt++ {
		version, renewed := final.ResourceVersion, final.Spec.RenewTime.Time
		// Seen by the replica's own watch: nobody asked it to promote yet.
		seen := replica.waitLog(`"msg":"Observed the primary Lease"`, `"resourceVersion":"`+version+`"`)
		if attempt == 1 && !refusedBeforeExpiry(t, replica, renewed, name+"-1") {
			return false
		}
		// The Lease expires in the replica's eyes a duration after it first
		// saw this version, which is no later than when the test saw the log.
		time.Sleep(time.Until(seen.Add(testLeaseDuration)))
		_, err := replica.call(t.Context(), http.MethodPost, instanceapi.PathPromote, nil, nil)
		if err == nil {
			if answered := time.Now(); !answered.After(renewed.Add(testLeaseDuration)) {
				t.Fatalf("promoted at %s, before the Lease renewed at %s could expire", answered, renewed)
			}
			t.Logf("promoted %s after the primary's last renewal", time.Since(renewed))
			break
		}
		// A renewal the primary sent just before it died may land after
		// the test read the Lease; the replica then waits for that one.
		final = lease.get(t)
		if final.ResourceVersion == version || attempt == 3 {
			t.Fatalf("promote refused %s after the replica saw the dead primary's last Lease version %s: %v", testLeaseDuration, version, err)
		}
	}
	lease.waitHolder(t, name+"-2")
	replica.waitReady(instanceapi.RolePrimary)
	return true
}

// refusedBeforeExpiry asks the replica to promote while the Lease renewed
// at renewed may not have expired: it must refuse, naming the holder, or
// the test fails. It returns false when the answer came only after the
// Lease could expire: then it proves nothing, and the replica may have
// promoted.
func refusedBeforeExpiry(t *testing.T, replica *node, renewed time.Time, holder string) bool {
	t.Helper()
	code, err := replica.call(t.Context(), http.MethodPost, instanceapi.PathPromote, nil, nil)
	if !time.Now().Before(renewed.Add(testLeaseDuration)) {
		t.Logf("the early promote was answered after the Lease could expire (HTTP %d, %v): this round proves nothing", code, err)
		return false
	}
	if code != http.StatusConflict || err == nil || !strings.Contains(err.Error(), "holds the primary Lease ("+holder+")") {
		t.Fatalf("promote before the Lease could expire: HTTP %d, %v; want a refusal naming the holder", code, err)
	}
	return true
}

// TestPrimaryShutdown: SIGTERM (the pod deleted) stops a primary fast, not
// waiting for an open session, after its standby received every record,
// and releases the Lease so that a failover need not wait for it to expire.
func TestPrimaryShutdown(t *testing.T) {
	lease := newTestLease(t, "shutdown")
	// A smart shutdown would wait for the open session longer than stop
	// waits for the manager.
	args := append(lease.args(t, lease.addr(t)), "--smart-shutdown-timeout", "10m")
	primary := startNode(t, "down-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: args})
	primary.waitReady(instanceapi.RolePrimary)
	lease.waitHolder(t, "down-1")
	primary.exec("CREATE TABLE t (id int PRIMARY KEY)")
	replica := startNode(t, "down-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port, extraArgs: lease.args(t, lease.addr(t))})
	replica.waitReady(instanceapi.RoleReplica)
	primary.exec("INSERT INTO t SELECT generate_series(1, 1000)")
	session, err := primary.tryConnect(t.Context(), "app", appPassword, "app")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = session.Close(context.Background()) }()

	primary.stop()
	if holder := lease.holder(t); holder != "" {
		t.Errorf("the primary exited and the Lease is still held by %q", holder)
	}
	if _, err := session.Exec(t.Context(), "SELECT 1"); err == nil {
		t.Error("a session survived the primary's shutdown")
	}
	checkpoint := shutdownCheckpoint(t, primary)
	st := replica.waitFor("the standby to have the shutdown checkpoint", func(st instanceapi.Status) error {
		return receivedPast(st, checkpoint)
	})
	t.Logf("shutdown checkpoint at %s; the standby received up to %s", checkpoint, st.ReceivedLSN)
}

// shutdownCheckpoint reads a stopped node's pg_control: it must have been
// shut down cleanly, and the location of that shutdown checkpoint is
// returned.
func shutdownCheckpoint(t *testing.T, n *node) postgres.LSN {
	t.Helper()
	cmd := exec.Command(filepath.Join(pgBinDir, "pg_controldata"), "-D", filepath.Join(n.dir, "pgdata"))
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pg_controldata: %v", err)
	}
	fields := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if name, value, ok := strings.Cut(line, ":"); ok {
			fields[strings.TrimSpace(name)] = strings.TrimSpace(value)
		}
	}
	if state := fields["Database cluster state"]; state != "shut down" {
		t.Fatalf("%s was not shut down cleanly: cluster state %q", n.name, state)
	}
	lsn, err := postgres.ParseLSN(fields["Latest checkpoint location"])
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

// receivedPast says a standby received WAL past the start of the record
// at want: the whole record.
func receivedPast(st instanceapi.Status, want postgres.LSN) error {
	got, err := postgres.ParseLSN(st.ReceivedLSN)
	if err != nil {
		return err
	}
	if got <= want {
		return fmt.Errorf("received up to %s, want past %s", got, want)
	}
	return nil
}

// TestDemoteFencedPrimary: a primary cut off from the API server fences
// itself, and the replica is promoted once the Lease expired. Reconnected,
// the fenced primary sees the new holder and stays fenced, unfence or not;
// demoted, it rewinds and follows the new primary on its timeline.
func TestDemoteFencedPrimary(t *testing.T) {
	lease := newTestLease(t, "fenced-demote")
	old, next, proxy := leasedPair(t, lease, "fd", 1, 2)

	proxy.cut()
	old.waitFor("fenced", isFenced)
	testenv.EventuallyEvery(t, waitTimeout, 200*time.Millisecond, func(ctx context.Context) error {
		_, err := next.call(ctx, http.MethodPost, instanceapi.PathPromote, nil, nil)
		return err // refused until the Lease expired
	})
	lease.waitHolder(t, "fd-2")
	promoted := next.waitReady(instanceapi.RolePrimary)
	next.exec("INSERT INTO t VALUES (3)")

	proxy.restore()
	old.waitFor("fenced, seeing fd-2 hold the Lease", func(st instanceapi.Status) error {
		if err := isFenced(st); err != nil {
			return err
		}
		if !strings.Contains(st.LastError, "(fd-2)") {
			return errors.New("last error " + st.LastError)
		}
		return nil
	})
	// Unfence lifts hand fences only; a Lease fence stays.
	old.command(http.MethodPost, instanceapi.PathUnfence, nil, nil)
	if st, err := old.status(t.Context()); err != nil || isFenced(st) != nil || st.Fenced {
		t.Fatalf("after unfence, a primary without the Lease reports %+v, %v; want phase Fenced, not fenced by hand", st, err)
	}
	if ps := old.postgresProcesses(); len(ps) > 0 {
		t.Fatalf("a fenced primary runs postgres while another holds the Lease: %v", ps)
	}

	// The first demote finds the new primary unreachable (its -rw Service
	// has no endpoint yet, in a pod): postgres stays stopped, and the
	// manager retries the rejoin by itself until it can reach it.
	upstream := newTCPProxy(t, fmt.Sprintf("127.0.0.1:%d", next.port))
	upstream.cut()
	_, port, err := net.SplitHostPort(upstream.addr)
	if err != nil {
		t.Fatal(err)
	}
	upPort, _ := strconv.Atoi(port)
	follow := instanceapi.FollowRequest{Upstream: instanceapi.Upstream{Host: "127.0.0.1", Port: upPort}}
	if code, err := old.call(t.Context(), http.MethodPost, instanceapi.PathDemote, follow, nil); err == nil {
		t.Fatalf("a demote towards an unreachable primary answered %d, want an error", code)
	}
	if st, err := old.status(t.Context()); err != nil || st.Phase != instanceapi.PhaseRejoining {
		t.Fatalf("after a failed demote the old primary reports %+v, %v; want phase Rejoining", st, err)
	}
	if ps := old.postgresProcesses(); len(ps) > 0 {
		t.Fatalf("after a failed demote the old primary runs postgres: %v", ps)
	}
	upstream.restore()
	st := old.waitReady(instanceapi.RoleReplica)
	if strings.Contains(old.logs(), "copying the primary afresh") {
		t.Log("pg_rewind could not rejoin the fenced primary; it was copied afresh")
	}
	if st.Timeline != promoted.Timeline {
		t.Errorf("the demoted primary is on timeline %d, the new primary on %d", st.Timeline, promoted.Timeline)
	}
	next.exec("INSERT INTO t VALUES (4)")
	old.waitIDs(1, 2, 3, 4)
	old.waitFor("streaming from the new primary", func(st instanceapi.Status) error {
		if !st.Streaming {
			return errors.New("not streaming")
		}
		return nil
	})
	if holder := lease.holder(t); holder != "fd-2" {
		t.Errorf("after the demote the Lease is held by %q, want fd-2", holder)
	}
}
