//go:build integration

package instance

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instance"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/postgres"
)

// TestSwitchover is the planned role change the operator runs during
// rollouts: the primary steps down (a clean shutdown, after which its
// standby has every WAL record), the standby is promoted, and the former
// primary follows it without pg_rewind and without losing a row.
func TestSwitchover(t *testing.T) {
	primary := startNode(t, "sw-1", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)
	primary.exec("CREATE TABLE t (id int PRIMARY KEY)")
	replica := startNode(t, "sw-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
	replica.waitReady(instanceapi.RoleReplica)
	primary.exec("INSERT INTO t SELECT generate_series(1, 3)")
	checkpointFirst(t, primary)

	var down instanceapi.StepDownResult
	primary.command(http.MethodPost, instanceapi.PathStepDown, instanceapi.FollowRequest{Upstream: instanceapi.Upstream{Host: "127.0.0.1", Port: replica.port}}, &down)
	checkpoint, err := postgres.ParseLSN(down.ShutdownCheckpointLSN)
	if err != nil {
		t.Fatalf("step-down returned %+v: %v", down, err)
	}
	// The standby has the shutdown checkpoint before anyone promotes it.
	st := replica.waitFor("the standby to have received the shutdown checkpoint", func(st instanceapi.Status) error {
		return receivedAtLeast(st, checkpoint)
	})
	t.Logf("shutdown checkpoint %s, standby received %s", checkpoint, st.ReceivedLSN)

	var promoted instance.PromoteResult
	replica.command(http.MethodPost, instanceapi.PathPromote, nil, &promoted)
	replica.waitReady(instanceapi.RolePrimary)
	replica.exec("INSERT INTO t VALUES (4)")
	followed := primary.waitReady(instanceapi.RoleReplica)
	primary.waitIDs(1, 2, 3, 4)
	if followed.Timeline != promoted.Timeline {
		t.Errorf("the former primary is on timeline %d, the new primary on %d", followed.Timeline, promoted.Timeline)
	}
	if strings.Contains(primary.logs(), `"logger":"pg_rewind"`) {
		t.Error("a clean switchover ran pg_rewind")
	}

	// Stepping down or checkpointing a replica is refused and changes nothing.
	if code, _ := primary.call(t.Context(), http.MethodPost, instanceapi.PathCheckpoint, nil, nil); code != http.StatusConflict {
		t.Errorf("checkpoint of a replica answered %d, want %d", code, http.StatusConflict)
	}
	code, _ := primary.call(t.Context(), http.MethodPost, instanceapi.PathStepDown, instanceapi.FollowRequest{Upstream: instanceapi.Upstream{Host: "127.0.0.1", Port: replica.port}}, nil)
	if code != http.StatusConflict {
		t.Errorf("step-down of a replica answered %d, want %d", code, http.StatusConflict)
	}
	primary.waitReady(instanceapi.RoleReplica)
}

func receivedAtLeast(st instanceapi.Status, want postgres.LSN) error {
	got, err := postgres.ParseLSN(st.ReceivedLSN)
	if err != nil {
		return err
	}
	if got < want {
		return fmt.Errorf("received %s, want at least %s", got, want)
	}
	return nil
}

// checkpointFirst asks the primary for the CHECKPOINT a switchover starts
// with and checks that postgres made one: the redo point of its last
// checkpoint is at or past where WAL was written before the call.
func checkpointFirst(t *testing.T, primary *node) {
	t.Helper()
	before, err := postgres.ParseLSN(primary.lsn())
	if err != nil {
		t.Fatal(err)
	}
	var res instanceapi.CheckpointResult
	primary.command(http.MethodPost, instanceapi.PathCheckpoint, nil, &res)
	var redo string
	primary.withConn("postgres", superuserPassword, "app", func(conn *pgx.Conn) error {
		return conn.QueryRow(context.Background(), "SELECT redo_lsn::text FROM pg_control_checkpoint()").Scan(&redo)
	})
	after, err := postgres.ParseLSN(redo)
	if err != nil {
		t.Fatal(err)
	}
	if after < before {
		t.Errorf("after POST %s (%+v) the last checkpoint's redo point is %s, before %s where WAL was written when it was asked", instanceapi.PathCheckpoint, res, after, before)
	}
}
