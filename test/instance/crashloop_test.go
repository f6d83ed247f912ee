//go:build integration

package instance

import (
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
)

// TestCrashLoopingPrimaryGivesUpItsLease: a primary whose postgres crashes
// again right after each restart is not restarted forever. After the
// third short run in a row its manager keeps postgres stopped (fenced)
// and releases the Lease at once, so a replica is promoted without waiting
// for the Lease to expire; the former primary then stays fenced, seeing
// the new holder, ready to be demoted.
func TestCrashLoopingPrimaryGivesUpItsLease(t *testing.T) {
	lease := newTestLease(t, "crashloop")
	// Long enough that the replica is promoted well before the former
	// primary may take the Lease again (one duration after giving it up).
	args := lease.argsLasting(t, lease.addr(t), 8*time.Second)
	primary := startNode(t, "crashloop-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: args})
	primary.waitReady(instanceapi.RolePrimary)
	lease.waitHolder(t, "crashloop-1")
	primary.exec("CREATE TABLE t (id int PRIMARY KEY)")
	primary.exec("INSERT INTO t VALUES (1)")
	replica := startNode(t, "crashloop-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port, extraArgs: args})
	replica.waitReady(instanceapi.RoleReplica)
	replica.waitIDs(1)

	// Two crashes are restarted in place, keeping the Lease.
	for crash := 1; crash <= 2; crash++ {
		killPostmaster(t, primary)
		primary.waitFor("restarted after a crash", func(st instanceapi.Status) error {
			if st.Restarts != crash || !st.Ready || st.Role != instanceapi.RolePrimary {
				return errors.New("restarts " + st.LastError)
			}
			return nil
		})
		if h := lease.holder(t); h != "crashloop-1" {
			t.Fatalf("after crash %d the Lease holder is %q, want the primary", crash, h)
		}
	}
	// The third in a row is a crash loop.
	killPostmaster(t, primary)
	primary.waitFor("fenced: a crash loop", func(st instanceapi.Status) error {
		if err := isFenced(st); err != nil {
			return err
		}
		if st.Fenced || !strings.Contains(st.LastError, "keeps crashing") {
			return errors.New("fenced by hand " + st.LastError)
		}
		return nil
	})
	if h := lease.holder(t); h != "" {
		t.Fatalf("the crash-looping primary did not release the Lease: holder %q", h)
	}
	// Released, not expired: the replica takes it at its first try.
	promoted := time.Now()
	if _, err := replica.call(t.Context(), http.MethodPost, instanceapi.PathPromote, nil, nil); err != nil {
		t.Fatalf("promoting the replica right after the crash loop: %v", err)
	}
	lease.waitHolder(t, "crashloop-2")
	replica.waitReady(instanceapi.RolePrimary)
	t.Logf("replica promoted %.1fs after the crash loop was seen", time.Since(promoted).Seconds())

	if ps := primary.postgresProcesses(); len(ps) > 0 {
		t.Errorf("the crash-looping primary runs postgres again while fenced: %v", ps)
	}
	primary.waitFor("fenced, seeing crashloop-2 hold the Lease", func(st instanceapi.Status) error {
		if err := isFenced(st); err != nil {
			return err
		}
		if !strings.Contains(st.LastError, "(crashloop-2)") {
			return errors.New("last error " + st.LastError)
		}
		return nil
	})
}

// killPostmaster sends SIGKILL to the node's running postmaster, once it
// accepts connections (postmaster.pid names it, not a killed one).
func killPostmaster(t *testing.T, n *node) {
	t.Helper()
	n.waitFor("postgres running", func(st instanceapi.Status) error {
		if st.Phase != instanceapi.PhaseRunning {
			return errors.New("phase " + string(st.Phase))
		}
		return nil
	})
	if err := syscall.Kill(n.postmasterPid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}
