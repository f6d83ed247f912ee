//go:build integration

package instance

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

// TestPasswordRotation changes the mounted password files, as the kubelet
// does when the user changes a Secret: the primary applies them to the
// roles, the replica picks up the replication password for its next
// connection, and no password, nor a SCRAM verifier, shows in a log, even
// with every statement logged (log_statement = all).
func TestPasswordRotation(t *testing.T) {
	logEverything := &instanceapi.Config{Parameters: map[string]string{"log_statement": "all"}}
	primary := startNode(t, "pw-1", nodeOptions{role: instanceapi.RolePrimary, config: logEverything})
	primary.waitReady(instanceapi.RolePrimary)
	replica := startNode(t, "pw-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
	replica.waitReady(instanceapi.RoleReplica)

	const newSuperuser, newReplication, newApp = "rotated-super", "rotated:repl", "rotated app"
	// The replica's files change first: its manager must keep working with
	// the old password until the primary's change is replayed.
	rotate(t, replica, newSuperuser, newReplication, newApp)
	rotated := replica.waitFor("the passfile rewritten", func(st instanceapi.Status) error {
		if st.LastPasswordRotation == nil {
			return fmt.Errorf("no rotation reported (last error %q)", st.LastError)
		}
		return nil
	})
	if !rotated.Ready {
		t.Fatalf("replica not ready after its password files changed: %+v", rotated)
	}

	rotate(t, primary, newSuperuser, newReplication, newApp)
	primary.waitFor("passwords rotated", func(st instanceapi.Status) error {
		if st.LastPasswordRotation == nil {
			return fmt.Errorf("no rotation reported (last error %q)", st.LastError)
		}
		return nil
	})
	for _, role := range []string{"postgres", "tusk_replication", "app"} {
		if !strings.Contains(primary.logs(), "Rotating the "+role+" password") {
			t.Errorf("the primary did not log rotating the %s password", role)
		}
	}
	for _, login := range []struct {
		user, old, new, db string
	}{{"postgres", superuserPassword, newSuperuser, "postgres"}, {"app", appPassword, newApp, "app"}} {
		if conn, err := primary.tryConnect(context.Background(), login.user, login.old, login.db); err == nil {
			_ = conn.Close(context.Background())
			t.Errorf("%s still logs in with the old password", login.user)
		}
		for _, n := range []*node{primary, replica} {
			testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
				conn, err := n.tryConnect(ctx, login.user, login.new, login.db)
				if err == nil {
					_ = conn.Close(context.Background())
				}
				return err
			})
		}
	}

	// A restart reconnects the replica with the new replication password.
	replica.command(http.MethodPost, instanceapi.PathRestart, nil, nil)
	replica.waitReady(instanceapi.RoleReplica)
	conn, err := primary.tryConnect(context.Background(), "postgres", newSuperuser, "app")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(context.Background(), "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		c, err := replica.tryConnect(ctx, "postgres", newSuperuser, "app")
		if err != nil {
			return err
		}
		defer func() { _ = c.Close(context.Background()) }()
		var n int
		return c.QueryRow(ctx, "SELECT count(*) FROM t WHERE id = 7").Scan(&n)
	})
	assertStreaming(t, primary, conn, "pw-2")

	for _, n := range []*node{primary, replica} {
		for _, secret := range []string{newSuperuser, newReplication, newApp, superuserPassword, replicationPassword, appPassword} {
			if strings.Contains(n.logs(), secret) {
				t.Errorf("%s logged a password", n.name)
			}
		}
		if strings.Contains(n.logs(), "SCRAM-SHA-256$") {
			t.Errorf("%s logged a SCRAM verifier:\n%s", n.name, grepLines(n.logs(), "SCRAM-SHA-256$"))
		}
	}
}

// rotate rewrites n's password files and asks its manager to look now.
func rotate(t *testing.T, n *node, superuser, replication, app string) {
	t.Helper()
	dir := filepath.Join(n.dir, "secrets")
	writeSecret(t, dir, "superuser", superuser)
	writeSecret(t, dir, "replication", replication)
	writeSecret(t, dir, "app", app)
	if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

func assertStreaming(t *testing.T, primary *node, conn *pgx.Conn, standby string) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		var state string
		err := conn.QueryRow(ctx, "SELECT state FROM pg_stat_replication WHERE application_name = $1", standby).Scan(&state)
		if err == nil && state != "streaming" {
			err = fmt.Errorf("%s is %s on %s", standby, state, primary.name)
		}
		return err
	})
}
