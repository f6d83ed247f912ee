//go:build integration

package instance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

// TestFenceByHand: POST /v1/fence stops postgres and keeps it stopped,
// through operations, restart timers and the Lease, until POST
// /v1/unfence; a fenced primary keeps its Lease.
func TestFenceByHand(t *testing.T) {
	lease := newTestLease(t, "hand-fence")
	primary, replica, proxy := leasedPair(t, lease, "hf", 1)

	t.Run("a fenced primary stops and keeps renewing its Lease", func(t *testing.T) {
		session, err := primary.tryConnect(t.Context(), "app", appPassword, "app")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = session.Close(context.Background()) }()
		fencedAt := time.Now()
		primary.command(http.MethodPost, instanceapi.PathFence, nil, nil)
		if _, err := session.Exec(t.Context(), "SELECT 1"); err == nil {
			t.Error("a session survived the fence")
		}
		checkFencedByHand(t, primary)
		primary.command(http.MethodPost, instanceapi.PathFence, nil, nil) // again: no change
		checkFencedByHand(t, primary)
		if code, err := primary.call(t.Context(), http.MethodPost, instanceapi.PathRestart, nil, nil); code != http.StatusConflict {
			t.Errorf("restart of a fenced instance: HTTP %d, %v; want %d", code, err, http.StatusConflict)
		}
		// Renewed later than the Lease could last from a renewal before
		// the fence: it was renewed while fenced.
		testenv.Eventually(t, waitTimeout, func(context.Context) error {
			if renewed := lease.renewTime(t); !renewed.After(fencedAt.Add(testLeaseDuration)) {
				return fmt.Errorf("last renewal %s", renewed)
			}
			return nil
		})
		if holder := lease.holder(t); holder != "hf-1" {
			t.Fatalf("a primary fenced by hand lost its Lease to %q", holder)
		}
		checkFencedByHand(t, primary)
	})

	t.Run("regaining a lost Lease does not lift a hand fence", func(t *testing.T) {
		proxy.cut()
		primary.waitFor("fenced for want of the Lease too", func(st instanceapi.Status) error {
			if !strings.Contains(st.LastError, "also fenced:") {
				return errors.New("last error " + st.LastError)
			}
			return nil
		})
		proxy.restore()
		primary.waitLog("Holding the primary Lease again; postgres stays stopped: it is fenced by hand")
		checkFencedByHand(t, primary)
	})

	t.Run("unfence starts the primary", func(t *testing.T) {
		primary.command(http.MethodPost, instanceapi.PathUnfence, nil, nil)
		st := primary.waitReady(instanceapi.RolePrimary)
		if st.Fenced {
			t.Fatalf("an unfenced primary reports fenced: %+v", st)
		}
		primary.command(http.MethodPost, instanceapi.PathUnfence, nil, nil) // again: no change
		primary.exec("INSERT INTO t VALUES (2)")
		replica.waitIDs(1, 2)
	})

	t.Run("a fenced replica stays stopped when its restart timer fires", func(t *testing.T) {
		// A data directory the manager cannot write its configuration
		// into makes every start fail before postgres runs, so a restart
		// timer is always pending when the fence arrives. (The run
		// directory must stay writable: the fence is marked there.)
		dataDir := filepath.Join(replica.dir, "pgdata")
		replica.stop()
		chmod(t, dataDir, 0o500)
		replica.rerun()
		replica.waitFor("failing to start", func(st instanceapi.Status) error {
			if !strings.Contains(st.LastError, "permission denied") {
				return errors.New("last error " + st.LastError)
			}
			return nil
		})
		replica.command(http.MethodPost, instanceapi.PathFence, nil, nil)
		replica.waitLog("Not starting postgres again: it is fenced")
		chmod(t, dataDir, 0o700)
		checkFencedByHand(t, replica)
		replica.command(http.MethodPost, instanceapi.PathUnfence, nil, nil)
		replica.waitReady(instanceapi.RoleReplica)
		primary.exec("INSERT INTO t VALUES (3)")
		replica.waitIDs(1, 2, 3)
	})
}

// checkFencedByHand: phase Fenced, fenced, saying so, not ready, and no
// postgres process.
func checkFencedByHand(t *testing.T, n *node) {
	t.Helper()
	st, err := n.status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != instanceapi.PhaseFenced || !st.Fenced || st.Ready || !strings.Contains(st.LastError, "fenced by hand") {
		t.Fatalf("%s reports %+v; want phase Fenced, fenced by hand, not ready", n.name, st)
	}
	if code, _ := n.call(t.Context(), http.MethodGet, instanceapi.PathReadyz, nil, nil); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz of a fenced instance answered %d", code)
	}
	if ps := n.postgresProcesses(); len(ps) > 0 {
		t.Fatalf("%s is fenced and runs postgres: %v", n.name, ps)
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// TestHandFenceSurvivesARestart: a hand fence is marked in the run
// directory, so a manager started again on the same directories (a
// container restart) keeps postgres stopped, keeps the primary's Lease, and
// starts postgres on unfence.
func TestHandFenceSurvivesARestart(t *testing.T) {
	lease := newTestLease(t, "hand-fence-restart")
	primary := startNode(t, "hfr-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: lease.args(t, lease.addr(t))})
	primary.waitReady(instanceapi.RolePrimary)
	lease.waitHolder(t, "hfr-1")
	primary.exec("CREATE TABLE t (id int PRIMARY KEY)")
	primary.exec("INSERT INTO t VALUES (1)")
	primary.command(http.MethodPost, instanceapi.PathFence, nil, nil)

	primary.stop() // releases the Lease
	primary.rerun()
	primary.waitFor("fenced by hand again", func(st instanceapi.Status) error {
		if st.Phase != instanceapi.PhaseFenced || !st.Fenced {
			return fmt.Errorf("phase %s, fenced %v", st.Phase, st.Fenced)
		}
		return nil
	})
	primary.waitLog("Fenced by hand before this start")
	lease.waitHolder(t, "hfr-1") // a primary fenced by hand keeps its Lease
	checkFencedByHand(t, primary)

	primary.command(http.MethodPost, instanceapi.PathUnfence, nil, nil)
	if st := primary.waitReady(instanceapi.RolePrimary); st.Fenced {
		t.Fatalf("an unfenced primary reports fenced: %+v", st)
	}
	primary.waitIDs(1)
	primary.exec("INSERT INTO t VALUES (2)")
	primary.stop()
	primary.rerun() // unfenced for good: the mark is gone
	primary.waitReady(instanceapi.RolePrimary)
	primary.waitIDs(1, 2)
}
