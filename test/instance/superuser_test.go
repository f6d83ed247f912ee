//go:build integration

package instance

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
)

// TestSuperuserLogsInOverTheSocketOnly: the superuser's password opens no
// session over the network (a database superuser can read the pod's
// service-account token and keys), only over the Unix socket, until the
// cluster opts in; the replication role, which pg_rewind now uses, may
// read the data directory's files but is no superuser.
func TestSuperuserLogsInOverTheSocketOnly(t *testing.T) {
	primary := startNode(t, "su-1", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)

	refused := func() error {
		conn, err := primary.connectOverTCP(t.Context(), "postgres", superuserPassword, "postgres")
		if err == nil {
			_ = conn.Close(context.Background())
		}
		return err
	}
	if err := refused(); err == nil || !strings.Contains(err.Error(), "pg_hba.conf rejects") {
		t.Errorf("the superuser logged in over TCP with its password (%v); want pg_hba.conf to reject it", err)
	}
	primary.withConn("postgres", superuserPassword, "postgres", func(conn *pgx.Conn) error { return conn.Ping(t.Context()) })

	var super, canRead, canCheckpoint bool
	primary.withConn("postgres", superuserPassword, "postgres", func(conn *pgx.Conn) error {
		return conn.QueryRow(t.Context(), `SELECT rolsuper,
				has_function_privilege('tusk_replication', 'pg_catalog.pg_read_binary_file(text, bigint, bigint, boolean)', 'EXECUTE'),
				pg_has_role('tusk_replication', 'pg_checkpoint', 'MEMBER')
			FROM pg_roles WHERE rolname = 'tusk_replication'`).Scan(&super, &canRead, &canCheckpoint)
	})
	if super || !canRead || !canCheckpoint {
		t.Errorf("tusk_replication: superuser %v, may read files %v, may checkpoint %v; want no superuser that may do pg_rewind's work",
			super, canRead, canCheckpoint)
	}

	primary.command(http.MethodPut, instanceapi.PathConfig, instanceapi.Config{SuperuserRemoteAccess: true}, nil)
	conn, err := primary.connectOverTCP(t.Context(), "postgres", superuserPassword, "postgres")
	if err != nil {
		t.Fatalf("with spec.superuserAccess the superuser cannot log in over TCP: %v", err)
	}
	_ = conn.Close(context.Background())
}
