//go:build integration

package instance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

// TestReconnectRestartsTheWALReceiver: POST /v1/reconnect on a replica stops
// its WAL receiver and a new one streams from the upstream, which is what
// the operator asks of the remaining replicas after a failover. A primary
// has no WAL receiver and refuses.
func TestReconnectRestartsTheWALReceiver(t *testing.T) {
	primary, replica, before := streamingPair(t)

	var res instanceapi.ReconnectResult
	replica.command(http.MethodPost, instanceapi.PathReconnect, nil, &res)
	if !res.Restarted {
		t.Fatalf("reconnect reported no WAL receiver stopped, though pid %d was streaming", before)
	}
	replica.waitLog("terminating walreceiver process due to administrator command")
	after := streamingReceiver(t, replica, before)
	t.Logf("WAL receiver pid %d replaced by %d", before, after)
	primary.exec("INSERT INTO t VALUES (2)")
	replica.waitIDs(1, 2)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	code, err := primary.call(ctx, http.MethodPost, instanceapi.PathReconnect, nil, nil)
	if code != http.StatusConflict || err == nil {
		t.Fatalf("reconnect on the primary: HTTP %d (%v), want 409", code, err)
	}
}

// streamingPair starts a primary with a row in table t and a replica
// streaming it; it returns both and the replica's WAL receiver pid.
func streamingPair(t *testing.T) (primary, replica *node, receiver int32) {
	t.Helper()
	primary = startNode(t, "pg-1", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)
	primary.exec("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
	replica = startNode(t, "pg-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
	replica.waitReady(instanceapi.RoleReplica)
	replica.waitIDs(1)
	return primary, replica, streamingReceiver(t, replica, 0)
}

// streamingReceiver waits until n's WAL receiver streams with a pid other
// than not, and returns the pid.
func streamingReceiver(t *testing.T, n *node, not int32) int32 {
	t.Helper()
	var pid int32
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		conn, err := n.tryConnect(ctx, "postgres", superuserPassword, "app")
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(context.Background()) }()
		var status string
		err = conn.QueryRow(ctx, "SELECT pid, status FROM pg_stat_wal_receiver").Scan(&pid, &status)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return errors.New("no WAL receiver runs")
		case err != nil:
			return err
		case pid == not || status != "streaming":
			return fmt.Errorf("WAL receiver pid %d is %s", pid, status)
		}
		return nil
	})
	return pid
}

// TestFollowTriesTheAddressFirst: an upstream with a HostAddr is reached at
// that address even when its host name does not resolve (the name only
// checks the certificate then), and the new primary_conninfo restarts the
// WAL receiver at once: what the operator asks of the replicas after a
// failover, so they stream from the new primary before kube-proxy moves
// the -rw Service. The status reports the upstream.
func TestFollowTriesTheAddressFirst(t *testing.T) {
	primary, replica, before := streamingPair(t)

	up := instanceapi.Upstream{Host: "primary.invalid", HostAddr: "127.0.0.1", Port: primary.port}
	replica.command(http.MethodPost, instanceapi.PathFollow, instanceapi.FollowRequest{Upstream: up}, nil)
	after := streamingReceiver(t, replica, before)
	t.Logf("WAL receiver pid %d replaced by %d", before, after)
	primary.exec("INSERT INTO t VALUES (2)")
	replica.waitIDs(1, 2)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	st, err := replica.status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Upstream == nil || *st.Upstream != up {
		t.Errorf("status reports upstream %+v, want %+v", st.Upstream, up)
	}
}
