//go:build integration

package instance

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"tusk.dev/tusk/internal/instanceapi"
)

// TestReplicaReportsDivergence: a replica that received WAL the promoted
// instance never had (here pg-2 was down while pg-1 wrote row 2) cannot
// follow the new timeline. Its manager reports PostgreSQL's own message in
// status.diverged, which the operator acts on at once, and a demote
// (pg_rewind) makes it follow again.
func TestReplicaReportsDivergence(t *testing.T) {
	primary, ahead, behind := startPrimaryAndTwoReplicas(t)
	if st := ahead.waitReady(instanceapi.RoleReplica); st.Diverged != "" {
		t.Fatalf("a replica streaming from its primary reports a divergence: %q", st.Diverged)
	}

	behind.stop()
	primary.exec("INSERT INTO t VALUES (2)")
	ahead.waitIDs(1, 2)
	primary.stop()
	up := promoteInstead(behind, ahead)
	st := ahead.waitDiverged()
	if !strings.Contains(st.Diverged, "forked off current database system timeline 1") {
		t.Errorf("diverged = %q, want PostgreSQL's message about timeline 2 forking off timeline 1", st.Diverged)
	}

	ahead.command(http.MethodPost, instanceapi.PathDemote, up, nil)
	ahead.waitFor("following the new primary", func(st instanceapi.Status) error {
		if st.Diverged != "" || !st.Streaming || st.Timeline != 2 {
			return errors.New("not streaming on timeline 2 yet, or still diverged")
		}
		return nil
	})
	behind.exec("INSERT INTO t VALUES (3)")
	ahead.waitIDs(1, 3) // row 2 is gone: rewound away
}

// TestReplicaPastTheForkIsCopiedAfresh: a replica whose last restartpoint
// lies past the point where the new primary's timeline forked off cannot
// start any more: PostgreSQL refuses its history at each start. Its
// manager copies the upstream afresh in place, keeping the old directory
// aside, instead of crash-looping until the operator replaces the whole
// instance.
func TestReplicaPastTheForkIsCopiedAfresh(t *testing.T) {
	primary, ahead, behind := startPrimaryAndTwoReplicas(t)

	behind.stop()
	primary.exec("INSERT INTO t VALUES (2)")
	primary.exec("CHECKPOINT")
	ahead.waitReplayed(primary.lsn())
	ahead.exec("CHECKPOINT") // a restartpoint, past where behind stopped
	primary.stop()
	promoteInstead(behind, ahead)
	ahead.waitDiverged()
	// The restart replays from the restartpoint, on the new timeline's
	// history that the WAL receiver fetched: PostgreSQL refuses it.
	if err := syscall.Kill(ahead.postmasterPid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ahead.waitFor("following the new primary", func(st instanceapi.Status) error {
		if st.Diverged != "" || !st.Streaming || st.Timeline != 2 {
			return fmt.Errorf("not streaming on timeline 2 yet, or still diverged (phase %s, last error %q)", st.Phase, st.LastError)
		}
		return nil
	})
	behind.exec("INSERT INTO t VALUES (3)")
	ahead.waitIDs(1, 3) // row 2 is gone with the old timeline
	if logs := ahead.logs(); !strings.Contains(logs, "is not a child of this server's history") {
		t.Errorf("the manager of %s never logged PostgreSQL refusing its history; logs:\n%s", ahead.name, logs)
	}
	if kept, _ := filepath.Glob(filepath.Join(ahead.dir, "pgdata.discarded-*", "PG_VERSION")); len(kept) != 1 {
		t.Errorf("the refused data directory was not kept aside, named by time: %v", kept)
	}
}

// startPrimaryAndTwoReplicas starts pg-1 as the primary with row 1 in
// table t, and pg-2 and pg-3 streaming it.
func startPrimaryAndTwoReplicas(t *testing.T) (primary, ahead, behind *node) {
	t.Helper()
	primary = startNode(t, "pg-1", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)
	primary.exec("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
	ahead = startNode(t, "pg-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
	behind = startNode(t, "pg-3", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
	for _, r := range []*node{ahead, behind} {
		r.waitReady(instanceapi.RoleReplica)
		r.waitIDs(1)
	}
	return primary, ahead, behind
}

// promoteInstead starts the stopped replica behind again and promotes it
// (the old primary is down), and points follower at it; it returns the
// new upstream.
func promoteInstead(behind, follower *node) instanceapi.FollowRequest {
	behind.t.Helper()
	behind.rerun()
	behind.waitReady(instanceapi.RoleReplica)
	behind.command(http.MethodPost, instanceapi.PathPromote, nil, nil)
	behind.waitReady(instanceapi.RolePrimary)
	up := instanceapi.FollowRequest{Upstream: instanceapi.Upstream{Host: "127.0.0.1", Port: behind.port}}
	follower.command(http.MethodPost, instanceapi.PathFollow, up, nil)
	return up
}

// waitDiverged waits until n reports that it diverged.
func (n *node) waitDiverged() instanceapi.Status {
	n.t.Helper()
	return n.waitFor("a reported divergence", func(st instanceapi.Status) error {
		if st.Diverged == "" {
			return errors.New("no divergence reported")
		}
		return nil
	})
}
