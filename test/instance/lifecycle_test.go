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

	"tusk.dev/tusk/internal/instance"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

// TestReplicatedLifecycle walks one cluster through what the operator will
// ask of its instances: bootstrap a primary and two replicas, replicate,
// reconfigure, survive a crash, promote, follow, and rejoin the former
// primary with pg_rewind after it wrote divergent WAL.
func TestReplicatedLifecycle(t *testing.T) {
	primary := startNode(t, "pg-1", nodeOptions{role: instanceapi.RolePrimary, interruptedBootstrap: true})
	st := primary.waitReady(instanceapi.RolePrimary)
	if st.Timeline != 1 || st.SystemIdentifier == "" || !strings.HasPrefix(st.PostgresVersion, "15") {
		t.Fatalf("new primary status %+v: want timeline 1, a system identifier, PostgreSQL 15", st)
	}
	// The app database exists and its owner logs in with its password.
	primary.withConn("app", appPassword, "app", func(conn *pgx.Conn) error {
		_, err := conn.Exec(context.Background(), "CREATE TABLE t (id int PRIMARY KEY)")
		return err
	})
	primary.exec("INSERT INTO t VALUES (1), (2)")

	replica1 := startNode(t, "pg-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
	replica2 := startNode(t, "pg-3", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
	for _, r := range []*node{replica1, replica2} {
		st := r.waitReady(instanceapi.RoleReplica)
		if st.SystemIdentifier != primary.waitReady(instanceapi.RolePrimary).SystemIdentifier {
			t.Fatalf("%s has another system identifier than its primary", r.name)
		}
		r.waitIDs(1, 2)
	}
	primary.exec("INSERT INTO t VALUES (3)")
	replica1.waitIDs(1, 2, 3)
	replica2.waitIDs(1, 2, 3)
	primary.waitFor("both replicas streaming", func(st instanceapi.Status) error {
		if len(st.Replicas) != 2 || st.Replicas[0].Name != "pg-2" || st.Replicas[1].Name != "pg-3" {
			return fmt.Errorf("replicas %+v", st.Replicas)
		}
		return nil
	})

	t.Run("metrics", func(t *testing.T) {
		text := primary.metrics()
		for _, want := range []string{"tusk_pg_up 1", `tusk_pg_role{role="primary"} 1`, "tusk_pg_timeline 1",
			`tusk_pg_replica_lag_bytes{replica="pg-2",sync_state="async"}`, `tusk_pg_replica_lag_seconds{replica="pg-2",sync_state="async"}`,
			`tusk_pg_database_size_bytes{database="app"}`, `tusk_pg_checkpoints_total{kind="timed"}`, `tusk_pg_checkpoints_total{kind="requested"}`,
			"tusk_pg_max_connections 100", "tusk_pg_deadlocks_total 0", `tusk_instance_fenced{by="lease"} 0`, `tusk_instance_volume_size_bytes{volume="data"}`,
			"tusk_pg_xid_age", "tusk_pg_wal_written_bytes_total", "tusk_pg_wal_directory_bytes", "process_resident_memory_bytes"} {
			if !strings.Contains(text, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
		testenv.CheckCatalogued(t, text, instance.MetricsCatalogue, false)
		testenv.CheckMetrics(t, text)
		if text := replica1.metrics(); !strings.Contains(text, `tusk_pg_role{role="replica"} 1`) {
			t.Error("a replica's /metrics does not say it is a replica")
		} else {
			testenv.CheckCatalogued(t, text, instance.MetricsCatalogue, false)
		}
	})
	t.Run("reload and restart-pending parameters", func(t *testing.T) { testReconfigure(t, primary, replica1, replica2) })
	t.Run("postgres killed is restarted", func(t *testing.T) { testCrashRecovery(t, replica2) })

	// pg-3 follows pg-2 (cascading) before pg-2 is promoted, so it can never
	// have received WAL from pg-1 that pg-2 lacks: a replica ahead of the new
	// primary on the old timeline could not follow it without a rewind.
	replica2.command(http.MethodPost, instanceapi.PathFollow, instanceapi.FollowRequest{Upstream: instanceapi.Upstream{Host: "127.0.0.1", Port: replica1.port}}, nil)
	replica1.waitFor("pg-3 streaming from pg-2", func(st instanceapi.Status) error {
		if len(st.Replicas) != 1 || st.Replicas[0].Name != "pg-3" || st.Replicas[0].State != "streaming" {
			return fmt.Errorf("replicas of pg-2: %+v", st.Replicas)
		}
		return nil
	})
	primary.exec("INSERT INTO t VALUES (4)")
	replica2.waitIDs(1, 2, 3, 4)

	// Promote pg-2; pg-3 follows it onto the new timeline.
	var promoted instance.PromoteResult
	replica1.command(http.MethodPost, instanceapi.PathPromote, nil, &promoted)
	if promoted.Timeline != 2 {
		t.Fatalf("promotion reported timeline %d, want 2", promoted.Timeline)
	}
	t.Logf("promotion to first committed write took %s", promoted.Duration)
	newPrimary := replica1
	newPrimary.waitReady(instanceapi.RolePrimary)
	newPrimary.exec("INSERT INTO t VALUES (5)")
	replica2.waitIDs(1, 2, 3, 4, 5)

	// The old primary, still running, writes WAL the new primary never saw:
	// it must be rewound, not merely pointed elsewhere.
	primary.exec("INSERT INTO t VALUES (100)")
	primary.command(http.MethodPost, instanceapi.PathDemote, instanceapi.FollowRequest{Upstream: instanceapi.Upstream{Host: "127.0.0.1", Port: newPrimary.port}}, nil)
	primary.waitReady(instanceapi.RoleReplica)
	// Ready, it may still replay the old timeline up to the fork from its
	// rewound data: the timeline it reports is its last checkpoint's until
	// it streams from the new primary.
	primary.waitFor("the rejoined former primary streaming timeline 2", func(st instanceapi.Status) error {
		if !st.Streaming || st.Timeline != 2 {
			return fmt.Errorf("streaming %t on timeline %d", st.Streaming, st.Timeline)
		}
		return nil
	})
	newPrimary.exec("INSERT INTO t VALUES (6)")
	primary.waitIDs(1, 2, 3, 4, 5, 6) // row 100 is gone: rewound away
	if logs := primary.logs(); !strings.Contains(logs, `"logger":"pg_rewind"`) || strings.Contains(logs, "copying the primary afresh") {
		t.Errorf("the former primary did not rejoin through pg_rewind:\n%s", logs)
	}

	t.Run("SIGTERM leaves no process behind", func(t *testing.T) {
		for _, n := range []*node{replica2, primary, newPrimary} {
			n.stop()
			if left := n.leftovers(); len(left) > 0 {
				t.Errorf("%s left processes after SIGTERM: %v", n.name, left)
			}
		}
	})
}

// testReconfigure changes parameters the way the operator will: replicas
// first, then the primary. Settings such as max_connections must never be
// lower on a replica than on its primary, or the replica stops replaying.
func testReconfigure(t *testing.T, primary *node, replicas ...*node) {
	var res instanceapi.ConfigResult
	primary.command(http.MethodPut, instanceapi.PathConfig, instanceapi.Config{Parameters: map[string]string{"work_mem": "8MB"}}, &res)
	if !res.Reloaded || len(res.PendingRestart) != 0 || len(res.Errors) != 0 {
		t.Fatalf("work_mem change: %+v; want reloaded, nothing pending, no errors", res)
	}
	assertSetting(t, primary, "work_mem", "8MB")

	primary.command(http.MethodPut, instanceapi.PathConfig, instanceapi.Config{Parameters: map[string]string{"work_mem": "lots"}}, &res)
	if len(res.Errors) == 0 || !strings.Contains(strings.Join(res.Errors, " "), "work_mem") {
		t.Fatalf("a bad work_mem was not reported: %+v", res)
	}
	assertSetting(t, primary, "work_mem", "8MB") // PostgreSQL kept the last good value

	raised := instanceapi.Config{Parameters: map[string]string{"work_mem": "8MB", "max_connections": "120"}}
	for _, n := range append(replicas, primary) {
		n.command(http.MethodPut, instanceapi.PathConfig, raised, &res)
		if len(res.PendingRestart) != 1 || res.PendingRestart[0] != "max_connections" {
			t.Fatalf("%s: max_connections change: pending restart %v, want [max_connections]", n.name, res.PendingRestart)
		}
		n.waitFor("max_connections pending with its values", func(st instanceapi.Status) error {
			want := []instanceapi.PendingValue{{Name: "max_connections", Running: "100", Pending: "120"}}
			if !slices.Equal(st.PendingValues, want) {
				return fmt.Errorf("pending values %+v, want %+v", st.PendingValues, want)
			}
			return nil
		})
		role := instanceapi.RoleReplica
		if n == primary {
			role = instanceapi.RolePrimary
		}
		n.command(http.MethodPost, instanceapi.PathRestart, nil, nil)
		st := n.waitReady(role)
		if len(st.PendingRestart) != 0 {
			t.Fatalf("%s: settings still pending after a restart: %v", n.name, st.PendingRestart)
		}
		assertSetting(t, n, "max_connections", "120")
	}

	// A restart-only setting removed from the file: PostgreSQL reports it
	// in pg_file_settings with no name and no file, and the status must
	// still read (it once failed on the NULL, and the restart it asks for
	// never came).
	primary.command(http.MethodPut, instanceapi.PathConfig, instanceapi.Config{Parameters: map[string]string{"work_mem": "8MB"}}, &res)
	primary.waitFor("the removed max_connections pending a restart, the status readable", func(st instanceapi.Status) error {
		if st.Role != instanceapi.RolePrimary || !slices.Contains(st.PendingRestart, "max_connections") {
			return fmt.Errorf("role %s, pending restart %v, last error %q", st.Role, st.PendingRestart, st.LastError)
		}
		if !strings.Contains(strings.Join(st.ConfigErrors, " "), `parameter "max_connections" cannot be changed without restarting the server`) {
			return fmt.Errorf("configuration errors %q", st.ConfigErrors)
		}
		return nil
	})
	// Put back: nothing is pending any more, no restart needed (the
	// replicas must never run a lower value than a primary they follow).
	primary.command(http.MethodPut, instanceapi.PathConfig, raised, &res)
	primary.waitFor("nothing pending once max_connections is back", func(st instanceapi.Status) error {
		if st.Role != instanceapi.RolePrimary || len(st.PendingRestart) != 0 || len(st.ConfigErrors) != 0 {
			return fmt.Errorf("role %s, pending restart %v, configuration errors %q", st.Role, st.PendingRestart, st.ConfigErrors)
		}
		return nil
	})
}

func assertSetting(t *testing.T, n *node, name, want string) {
	t.Helper()
	var got string
	n.withConn("postgres", superuserPassword, "postgres", func(conn *pgx.Conn) error {
		return conn.QueryRow(context.Background(), "SELECT current_setting($1)", name).Scan(&got)
	})
	if got != want {
		t.Fatalf("%s = %s on %s, want %s", name, got, n.name, want)
	}
}

func testCrashRecovery(t *testing.T, n *node) {
	before := n.waitReady(instanceapi.RoleReplica)
	if err := syscall.Kill(n.postmasterPid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	after := n.waitFor("restarted after SIGKILL", func(st instanceapi.Status) error {
		if st.Restarts != before.Restarts+1 || !st.Ready {
			return fmt.Errorf("restarts %d ready %v phase %s", st.Restarts, st.Ready, st.Phase)
		}
		return nil
	})
	if after.Role != instanceapi.RoleReplica {
		t.Fatalf("after a crash the replica came back as %s", after.Role)
	}
	// The crash is one more of the streak status showed before it (0 after
	// a stable run), or starts a new one if a stable run ended in between.
	if after.CrashStreak != before.CrashStreak+1 && after.CrashStreak != 1 {
		t.Fatalf("crash streak %d after a crash, want %d or 1", after.CrashStreak, before.CrashStreak+1)
	}
}

// TestBadParameterIsReported: a value PostgreSQL refuses at start is not a
// silent crash loop: status says what is wrong, and the manager retries with
// a backoff rather than spinning.
func TestBadParameterIsReported(t *testing.T) {
	n := startNode(t, "bad-1", nodeOptions{role: instanceapi.RolePrimary,
		config: &instanceapi.Config{Parameters: map[string]string{"shared_buffers": "lots"}}})
	st := n.waitFor("a crash reported", func(st instanceapi.Status) error {
		if st.Phase != instanceapi.PhaseCrashed || st.Restarts < 1 {
			return fmt.Errorf("phase %s restarts %d", st.Phase, st.Restarts)
		}
		return nil
	})
	if !strings.Contains(st.LastError, `invalid value for parameter "shared_buffers"`) || st.Ready {
		t.Fatalf("status %+v: want not ready and the reason naming shared_buffers", st)
	}
	var ready int
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ready, _ = n.call(ctx, http.MethodGet, instanceapi.PathReadyz, nil, nil)
	if ready != http.StatusServiceUnavailable {
		t.Fatalf("/readyz answered %d for a server that does not start", ready)
	}
	// The fix arrives; the next restart attempt succeeds.
	n.command(http.MethodPut, instanceapi.PathConfig, instanceapi.Config{Parameters: map[string]string{"shared_buffers": "32MB"}}, nil)
	n.waitReady(instanceapi.RolePrimary)
}
