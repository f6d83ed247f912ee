//go:build integration

package instance

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

// observerSession is one session the instance manager observes postgres
// through (application_name tusk-instance-manager, idle between queries).
type observerSession struct {
	PID  int
	User string
}

// TestObservedAsTheMonitoringRole: the manager observes postgres for its
// status, readiness and metrics on one long-lived session as tusk_monitor,
// not as the superuser, on a primary and on a replica alike. When the role
// may not log in (a cluster made before it could), readiness still
// answers, from superuser sessions closed at once; the primary's manager
// gives the role its login (here on SIGHUP, as on its periodic check), and
// the replica goes back to it as soon as that replays.
func TestObservedAsTheMonitoringRole(t *testing.T) {
	// The primary checks its roles on SIGHUP only, when the test says.
	primary := startNode(t, "monitor-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: []string{"--secrets-poll-interval", "1h"}})
	primary.waitReady(instanceapi.RolePrimary)
	replica := startNode(t, "monitor-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
	replica.waitReady(instanceapi.RoleReplica)

	for _, n := range []*node{primary, replica} {
		if text := n.metrics(); !strings.Contains(text, "tusk_pg_up 1") || !strings.Contains(text, "tusk_pg_connections{") {
			t.Errorf("%s: /metrics from the monitoring session lacks PostgreSQL's figures:\n%s", n.name, text)
		}
		if st, err := n.status(t.Context()); err != nil || st.SystemIdentifier == "" || st.CurrentLSN == "" && st.ReplayedLSN == "" {
			t.Errorf("%s: the status read as tusk_monitor lacks what postgres says: %+v (%v)", n.name, st, err)
		}
		first := n.observerSessions(2)
		for _, s := range first {
			if s.User != "tusk_monitor" {
				t.Errorf("%s: the manager observes postgres as %q, want tusk_monitor", n.name, s.User)
			}
		}
		// Long-lived: the same backends after several observations, each
		// more than observedMaxAge after the one before.
		for range 3 {
			time.Sleep(600 * time.Millisecond)
			n.readyz()
		}
		n.metrics()
		if again := n.observerSessions(2); !slices.Equal(again, first) {
			t.Errorf("%s: the monitoring sessions changed from %+v to %+v without cause", n.name, first, again)
		}
	}

	// As a cluster made before the role could log in.
	primary.exec("ALTER ROLE tusk_monitor NOLOGIN")
	replica.waitReplayed(primary.lsn())
	replica.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'tusk_monitor'")
	replica.observeUntilLogged("The monitoring role may not log in")
	before := replica.idleManagerSessions()
	time.Sleep(600 * time.Millisecond)
	if code := replica.readyz(); code != http.StatusOK {
		t.Errorf("the replica answered /readyz with %d while observing as the superuser", code)
	}
	for _, kept := range intersect(before, replica.idleManagerSessions()) {
		t.Errorf("a superuser session observing the replica is kept open between observations: %+v", kept)
	}

	if err := primary.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	replica.observeUntilLogged("The monitoring role logs in again")
	if s := replica.observerSessions(1); s[0].User != "tusk_monitor" {
		t.Errorf("back from the superuser, the replica is observed as %q", s[0].User)
	}
}

func intersect(a, b []observerSession) []observerSession {
	var both []observerSession
	for _, s := range a {
		if slices.Contains(b, s) {
			both = append(both, s)
		}
	}
	return both
}

// observeUntilLogged asks for readiness, which observes postgres at most
// every observedMaxAge, until the manager logs a line with message; each
// answer must be ready.
func (n *node) observeUntilLogged(message string) {
	n.t.Helper()
	testenv.Eventually(n.t, waitTimeout, func(context.Context) error {
		if code := n.readyz(); code != http.StatusOK {
			n.t.Errorf("%s answered /readyz with %d", n.name, code)
		}
		if !strings.Contains(n.logs(), message) {
			return fmt.Errorf("%s logged no line with %q", n.name, message)
		}
		return nil
	})
}

// readyz asks for readiness and returns the HTTP status.
func (n *node) readyz() int {
	n.t.Helper()
	resp, err := n.client.Get(n.url(instanceapi.PathReadyz))
	if err != nil {
		n.t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// observerSessions asks for readiness (and metrics, for want 2) and
// returns the sessions the manager observes through, failing unless there
// are want of them.
func (n *node) observerSessions(want int) []observerSession {
	n.t.Helper()
	var sessions []observerSession
	testenv.Eventually(n.t, waitTimeout, func(context.Context) error {
		n.readyz()
		if want > 1 {
			n.metrics()
		}
		sessions = n.idleManagerSessions()
		if len(sessions) != want {
			return fmt.Errorf("%s: idle sessions of the manager: %+v, want %d", n.name, sessions, want)
		}
		return nil
	})
	return sessions
}

// idleManagerSessions lists the manager's idle sessions: the ones it
// observes through, between two observations (its other sessions do one
// thing and end; observerSessions retries past them).
func (n *node) idleManagerSessions() []observerSession {
	n.t.Helper()
	var out []observerSession
	n.withConn("postgres", superuserPassword, "postgres", func(conn *pgx.Conn) error {
		rows, err := conn.Query(context.Background(), `SELECT pid, usename FROM pg_stat_activity
			WHERE application_name = 'tusk-instance-manager' AND state = 'idle' AND pid <> pg_backend_pid() ORDER BY pid`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowToStructByPos[observerSession])
		return err
	})
	return out
}
