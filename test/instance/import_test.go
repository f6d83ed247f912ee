//go:build integration

package instance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
)

// TestImportBootstrap bootstraps a new primary by importing two databases
// from a running server over verified TLS, as a role that is no
// superuser: rows, sequences, views, roles with their attributes,
// memberships and settings arrive, and the password verifiers that
// pg_read_all_data may read (a superuser role arrives without SUPERUSER,
// and below PostgreSQL 16 a CREATEROLE one without CREATEROLE).
// A wrong password is a clear error in /status, retried, with no data
// directory left.
func TestImportBootstrap(t *testing.T) {
	sourcePKI, ownPKI := newClusterPKI(t), newClusterPKI(t)
	source := startNode(t, "src-1", nodeOptions{role: instanceapi.RolePrimary, tls: sourcePKI})
	source.waitReady(instanceapi.RolePrimary)
	source.exec(`CREATE ROLE readers NOLOGIN;
CREATE ROLE shop LOGIN PASSWORD 'shop-secret' CONNECTION LIMIT 7 IN ROLE readers;
ALTER ROLE shop SET work_mem = '8MB';
CREATE ROLE migrator LOGIN PASSWORD 'migrate-me' IN ROLE pg_read_all_data;
CREATE ROLE boss SUPERUSER LOGIN;
CREATE ROLE keeper CREATEROLE LOGIN PASSWORD 'keeper-secret';
CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1), (2)`)
	source.exec("CREATE DATABASE shop OWNER shop")
	source.withConn("postgres", superuserPassword, "shop", func(conn *pgx.Conn) error {
		_, err := conn.Exec(context.Background(), `SET ROLE shop;
CREATE TABLE orders (id serial PRIMARY KEY, note text NOT NULL);
INSERT INTO orders (note) SELECT 'order ' || g FROM generate_series(1, 1000) g;
CREATE VIEW recent AS SELECT * FROM orders WHERE id > 990;
GRANT SELECT ON recent TO readers`)
		return err
	})

	caDir := filepath.Join(workDir(t), "import-ca")
	mountCerts(t, caDir, sourcePKI.repl, sourcePKI.ca)
	importArgs := func(password string) []string {
		secrets := filepath.Join(workDir(t), "import-secrets")
		if err := os.Mkdir(secrets, 0o700); err != nil {
			t.Fatal(err)
		}
		chown(t, secrets)
		return []string{"--import-host", "127.0.0.1", "--import-port", strconv.Itoa(source.port),
			"--import-user", "migrator", "--import-password-file", writeSecret(t, secrets, "password", password),
			"--import-sslmode", "verify-full", "--import-ca-file", filepath.Join(caDir, "ca.crt"),
			"--import-database", "shop", "--import-database", "app"}
	}

	t.Run("copies databases and roles", func(t *testing.T) {
		n := startNode(t, "imp-1", nodeOptions{role: instanceapi.RolePrimary, tls: ownPKI, extraArgs: importArgs("migrate-me")})
		n.waitReady(instanceapi.RolePrimary)
		n.waitIDs(1, 2)
		// CREATEROLE grants itself pg_execute_server_program below 16.
		createRoleKept, dropped := serverMajor(t, n) >= 16, `"attributesDropped":["boss SUPERUSER","keeper CREATEROLE"]`
		if createRoleKept {
			dropped = `"attributesDropped":["boss SUPERUSER"]`
		}
		n.withConn("postgres", superuserPassword, "shop", func(conn *pgx.Conn) error {
			ctx := context.Background()
			for _, c := range []struct{ sql, want string }{
				{"SELECT count(*)::text FROM orders", "1000"},
				{"SELECT count(*)::text FROM recent", "10"},
				{"SELECT nextval('orders_id_seq')::text", "1001"},
				{"SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = 'orders'", "shop"},
				{"SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'shop'", "shop"},
				{"SELECT has_table_privilege('readers', 'recent', 'SELECT')::text", "true"},
				{"SELECT string_agg(r.rolname || ':' || r.rolconnlimit || ':' || r.rolcanlogin || ':' || r.rolsuper || ':' || (a.rolpassword IS NULL), ',' ORDER BY r.rolname) FROM pg_roles r JOIN pg_authid a USING (oid) WHERE r.rolname IN ('shop', 'readers', 'boss', 'migrator')",
					"boss:-1:true:false:true,migrator:-1:true:false:false,readers:-1:false:false:true,shop:7:true:false:false"},
				{"SELECT pg_has_role('shop', 'readers', 'MEMBER')::text", "true"},
				{"SELECT rolcreaterole::text FROM pg_roles WHERE rolname = 'keeper'", strconv.FormatBool(createRoleKept)},
				{"SELECT array_to_string(setconfig, ',') FROM pg_db_role_setting WHERE setrole = 'shop'::regrole", "work_mem=8MB"},
				{"SELECT (count(*) > 0)::text FROM pg_stats WHERE tablename = 'orders'", "true"},
			} {
				var got string
				if err := conn.QueryRow(ctx, c.sql).Scan(&got); err != nil {
					return fmt.Errorf("%s: %w", c.sql, err)
				}
				if got != c.want {
					t.Errorf("%s = %q, want %q", c.sql, got, c.want)
				}
			}
			return nil
		})
		// The verifier came along: the source's password logs in.
		n.withConn("shop", "shop-secret", "shop", func(conn *pgx.Conn) error { return nil })
		if err := escalate(n, "keeper", "keeper-secret", "GRANT pg_execute_server_program TO keeper", runProgram); err == nil {
			t.Error("the imported role keeper granted itself pg_execute_server_program and ran a program on the server")
		}
		if !strings.Contains(n.logs(), `"withoutPassword":["boss"]`) || !strings.Contains(n.logs(), dropped) {
			t.Errorf("the manager's log does not say which roles have no password and what was dropped:\n%s", grepLines(n.logs(), "Imported the source's roles"))
		}
	})

	t.Run("a wrong password", func(t *testing.T) {
		n := startNode(t, "imp-2", nodeOptions{role: instanceapi.RolePrimary, tls: ownPKI, extraArgs: importArgs("wrong")})
		st := n.waitFor("a failed attempt", func(st instanceapi.Status) error {
			if st.Recovery == nil || st.Recovery.FailedAttempts < 1 {
				return fmt.Errorf("recovery %+v, error %q: want a failed attempt", st.Recovery, st.LastError)
			}
			return nil
		})
		if st.Phase != instanceapi.PhaseRecovering || !strings.Contains(st.LastError, "password authentication failed for user \"migrator\"") ||
			strings.Contains(st.LastError, "wrong") {
			t.Errorf("phase %s, last error %q; want Recovering and the source's refusal, without the password", st.Phase, st.LastError)
		}
		for _, dir := range []string{"pgdata", "pgdata.tusk-bootstrap"} {
			if entries, err := os.ReadDir(filepath.Join(n.dir, dir)); err == nil && len(entries) > 0 {
				t.Errorf("a failed import left %d entries in %s", len(entries), dir)
			}
		}
	})
}
