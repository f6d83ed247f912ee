//go:build integration

package instance

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"tusk.dev/tusk/internal/instanceapi"
)

// TestReplicaReportsDivergence: a replica that received WAL the promoted
// instance never had (here pg-2 was down while pg-1 wrote row 2) cannot
// follow the new timeline. Its manager reports PostgreSQL's own message in
// status.diverged, which the operator acts on at once, and a demote
// (pg_rewind) makes it follow again.
func TestReplicaReportsDivergence(t *testing.T) {
	primary := startNode(t, "pg-1", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)
	primary.exec("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
	ahead := startNode(t, "pg-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
	behind := startNode(t, "pg-3", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
	for _, r := range []*node{ahead, behind} {
		r.waitReady(instanceapi.RoleReplica)
		r.waitIDs(1)
	}
	if st := ahead.waitReady(instanceapi.RoleReplica); st.Diverged != "" {
		t.Fatalf("a replica streaming from its primary reports a divergence: %q", st.Diverged)
	}

	behind.stop()
	primary.exec("INSERT INTO t VALUES (2)")
	ahead.waitIDs(1, 2)
	primary.stop()
	behind.rerun()
	behind.waitReady(instanceapi.RoleReplica)
	behind.command(http.MethodPost, instanceapi.PathPromote, nil, nil)
	behind.waitReady(instanceapi.RolePrimary)

	up := instanceapi.FollowRequest{Upstream: instanceapi.Upstream{Host: "127.0.0.1", Port: behind.port}}
	ahead.command(http.MethodPost, instanceapi.PathFollow, up, nil)
	st := ahead.waitFor("a reported divergence", func(st instanceapi.Status) error {
		if st.Diverged == "" {
			return errors.New("no divergence reported")
		}
		return nil
	})
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
