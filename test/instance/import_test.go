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
ALTER ROLE shop SET session_replication_role = 'replica';
CREATE ROLE migrator LOGIN PASSWORD 'migrate-me' IN ROLE pg_read_all_data;
CREATE ROLE boss SUPERUSER LOGIN;
CREATE ROLE keeper CREATEROLE LOGIN PASSWORD 'keeper-secret';
CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1), (2)`)
	source.exec("CREATE DATABASE shop OWNER shop")
	source.exec("ALTER DATABASE shop SET session_replication_role = 'replica'")
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
		// CREATEROLE grants itself pg_execute_server_program below 16; a
		// setting only a superuser may set is not carried either.
		guarded := `,"shop SET session_replication_role","database shop SET session_replication_role"]`
		createRoleKept, dropped := serverMajor(t, n) >= 16, `"attributesDropped":["boss SUPERUSER","keeper CREATEROLE"`+guarded
		if createRoleKept {
			dropped = `"attributesDropped":["boss SUPERUSER"` + guarded
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
				{"SELECT count(*)::text FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase WHERE d.datname = 'shop'", "0"},
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

// sneakSQL is a source table owner's attack on whoever restores its
// database: a function its CHECK constraint, domain, generated column and
// index call while rows load, that tries to leave the restoring session's
// role, make its owner a superuser and run a program on the server, and
// records who it ran as and what worked.
const sneakSQL = `CREATE TABLE public.seen (via text, who text, superuser text, worked text);
CREATE FUNCTION public.sneak(via text, id int) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE worked text := '';
BEGIN
  BEGIN EXECUTE 'RESET ROLE'; EXCEPTION WHEN others THEN NULL; END;
  BEGIN EXECUTE 'ALTER ROLE mallory SUPERUSER'; worked := worked || 'superuser '; EXCEPTION WHEN others THEN NULL; END;
  BEGIN EXECUTE 'COPY (SELECT 1) TO PROGRAM ''true'''; worked := worked || 'program'; EXCEPTION WHEN others THEN NULL; END;
  INSERT INTO public.seen VALUES (via, current_user, current_setting('is_superuser'), worked);
  RETURN true;
END $$;
CREATE FUNCTION public.sneak_immutable(via text, id int) RETURNS boolean IMMUTABLE LANGUAGE sql AS $$ SELECT public.sneak(via, id) $$;
CREATE TABLE public.orders (id int PRIMARY KEY, CHECK (public.sneak('check', id)));
CREATE DOMAIN public.watched AS int CHECK (public.sneak('domain', VALUE));
CREATE TABLE public.items (n public.watched);
CREATE TABLE public.computed (id int, g boolean GENERATED ALWAYS AS (public.sneak_immutable('generated', id)) STORED);
CREATE INDEX ON public.computed (public.sneak_immutable('index', id));
INSERT INTO public.orders VALUES (1), (2);
INSERT INTO public.items VALUES (1);
INSERT INTO public.computed VALUES (1);
CREATE EXTENSION pg_trgm;
TRUNCATE public.seen`

// TestImportRunsNoSourceCodeAsSuperuser: a source's table owner whose
// functions run while the import loads its rows (a CHECK constraint, a
// domain, a generated column, an index) gets the rights of the roles
// owning the imported objects, never a superuser's: its owner does not
// become superuser, no program runs, and the owners are kept. A database
// where the source's superuser owns objects, or where a role owns a table
// in another's schema by a grant, is restored into its owner (the
// application owner for a database the superuser owned). Event
// triggers, untrusted extensions and publications of all tables are
// refused, naming them; so is a database whose code, acting as an
// imported role, changes a role (the application owner's password).
func TestImportRunsNoSourceCodeAsSuperuser(t *testing.T) {
	sourcePKI := newClusterPKI(t)
	source := startNode(t, "src-1", nodeOptions{role: instanceapi.RolePrimary, tls: sourcePKI})
	source.waitReady(instanceapi.RolePrimary)
	source.exec(`CREATE ROLE mallory LOGIN PASSWORD 'mallory-secret';
CREATE ROLE clerk LOGIN PASSWORD 'clerk-secret';
CREATE ROLE migrator LOGIN PASSWORD 'migrate-me' IN ROLE pg_read_all_data`)
	for _, db := range []string{"mall OWNER mallory", "shared OWNER mallory", "legacy", "ddl", "fdw", "hijack OWNER mallory"} {
		source.exec("CREATE DATABASE " + db)
	}
	source.withConn("mallory", "mallory-secret", "mall", func(conn *pgx.Conn) error {
		_, err := conn.Exec(context.Background(), sneakSQL)
		return err
	})
	source.withConn("postgres", superuserPassword, "mall", func(conn *pgx.Conn) error {
		_, err := conn.Exec(context.Background(), "CREATE SCHEMA clerk AUTHORIZATION clerk")
		return err
	})
	source.withConn("clerk", "clerk-secret", "mall", func(conn *pgx.Conn) error {
		_, err := conn.Exec(context.Background(), "CREATE TABLE clerk.notes (note text); INSERT INTO clerk.notes VALUES ('kept')")
		return err
	})
	// The restore role may act as the application owner (to give it what
	// the source's superuser owned): a function that sets its password
	// would log in as it later.
	source.withConn("mallory", "mallory-secret", "hijack", func(conn *pgx.Conn) error {
		_, err := conn.Exec(context.Background(), `CREATE FUNCTION public.hijack(id int) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  BEGIN EXECUTE 'SET ROLE app'; EXECUTE 'ALTER ROLE app PASSWORD ''hijacked'''; EXCEPTION WHEN others THEN NULL; END;
  RETURN true;
END $$;
CREATE TABLE public.t (id int CHECK (public.hijack(id)));
INSERT INTO public.t VALUES (1)`)
		return err
	})
	source.withConn("postgres", superuserPassword, "shared", func(conn *pgx.Conn) error {
		_, err := conn.Exec(context.Background(), `GRANT CREATE ON SCHEMA public TO clerk; SET ROLE clerk; CREATE TABLE public.memo (id int)`)
		return err
	})
	source.withConn("postgres", superuserPassword, "legacy", func(conn *pgx.Conn) error {
		_, err := conn.Exec(context.Background(), `CREATE TABLE ledger (id int); INSERT INTO ledger VALUES (1); GRANT CREATE ON SCHEMA public TO clerk;
SET ROLE clerk; CREATE TABLE public.drafts (id int)`)
		if err == nil {
			_, err = conn.Exec(context.Background(), "RESET ROLE")
		}
		return err
	})
	source.withConn("postgres", superuserPassword, "ddl", func(conn *pgx.Conn) error {
		_, err := conn.Exec(context.Background(), `CREATE FUNCTION public.on_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN NULL; END $$;
CREATE EVENT TRIGGER audit_ddl ON ddl_command_end EXECUTE FUNCTION public.on_ddl()`)
		return err
	})
	source.withConn("postgres", superuserPassword, "fdw", func(conn *pgx.Conn) error {
		_, err := conn.Exec(context.Background(), "CREATE EXTENSION file_fdw; CREATE PUBLICATION cdc FOR ALL TABLES")
		return err
	})
	caDir := filepath.Join(workDir(t), "import-ca")
	mountCerts(t, caDir, sourcePKI.repl, sourcePKI.ca)
	importArgs := func(dir string, databases ...string) []string {
		secrets := filepath.Join(workDir(t), dir)
		if err := os.Mkdir(secrets, 0o700); err != nil {
			t.Fatal(err)
		}
		chown(t, secrets)
		args := []string{"--import-host", "127.0.0.1", "--import-port", strconv.Itoa(source.port),
			"--import-user", "migrator", "--import-password-file", writeSecret(t, secrets, "password", "migrate-me"),
			"--import-sslmode", "verify-full", "--import-ca-file", filepath.Join(caDir, "ca.crt")}
		for _, d := range databases {
			args = append(args, "--import-database", d)
		}
		return args
	}

	t.Run("the source's code runs as no superuser", func(t *testing.T) {
		n := startNode(t, "imp-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: importArgs("mall-secrets", "mall", "shared", "legacy")})
		n.waitReady(instanceapi.RolePrimary)
		for _, c := range []struct{ database, sql, want string }{
			{"mall", "SELECT rolsuper::text FROM pg_roles WHERE rolname = 'mallory'", "false"},
			// The function ran in each place, and never as a superuser.
			{"mall", "SELECT string_agg(DISTINCT via, ',' ORDER BY via) FROM seen", "check,domain,generated,index"},
			{"mall", "SELECT count(*)::text FROM seen WHERE superuser <> 'off' OR worked <> '' OR who = 'postgres'", "0"},
			{"mall", "SELECT count(*)::text FROM orders", "2"},
			{"mall", "SELECT pg_get_userbyid(relowner) || ',' || (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = 'notes') FROM pg_class WHERE relname = 'orders'", "mallory,clerk"},
			{"mall", "SELECT pg_get_userbyid(extowner) FROM pg_extension WHERE extname = 'pg_trgm'", "mallory"},
			{"mall", "SELECT count(*)::text FROM pg_roles WHERE rolname = 'tusk_restore'", "0"},
			// The source's superuser owned ledger: the owners are left out.
			{"legacy", "SELECT string_agg(relname || ':' || pg_get_userbyid(relowner), ',' ORDER BY relname) FROM pg_class WHERE relname IN ('ledger', 'drafts')", "drafts:app,ledger:app"},
			{"legacy", "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'legacy'", "app"},
			// clerk creates in mallory's public by a grant, restored last.
			{"shared", "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = 'memo'", "mallory"},
			{"shared", "SELECT has_schema_privilege('clerk', 'public', 'CREATE')::text", "true"},
		} {
			n.withConn("postgres", superuserPassword, c.database, func(conn *pgx.Conn) error {
				var got string
				if err := conn.QueryRow(context.Background(), c.sql).Scan(&got); err != nil {
					return fmt.Errorf("%s: %w", c.sql, err)
				}
				if got != c.want {
					t.Errorf("in %s, %s = %q, want %q", c.database, c.sql, got, c.want)
				}
				return nil
			})
		}
	})

	for _, tc := range []struct{ database, want string }{
		{"ddl", "the import source's database ddl has the event trigger audit_ddl (it would run as whoever changes the schema, Tusk's superuser too)"},
		{"fdw", "the import source's database fdw has the extension file_fdw (not marked trusted, so only a superuser may create it) " +
			"and the publication cdc (of all tables or of a schema, so only a superuser may create it; method logical leaves publications out)"},
		{"hijack", "the code of the import source's database hijack changed the new cluster's roles, memberships or databases while it was restored"},
	} {
		t.Run("refuses "+tc.database, func(t *testing.T) {
			n := startNode(t, "imp-"+tc.database, nodeOptions{role: instanceapi.RolePrimary, extraArgs: importArgs(tc.database+"-secrets", tc.database)})
			st := n.waitFor("a refused attempt", func(st instanceapi.Status) error {
				if st.Recovery == nil || st.Recovery.FailedAttempts < 1 {
					return fmt.Errorf("recovery %+v, error %q: want a failed attempt", st.Recovery, st.LastError)
				}
				return nil
			})
			if st.Phase != instanceapi.PhaseRecovering || !strings.Contains(st.LastError, tc.want) {
				t.Errorf("phase %s, last error %q; want Recovering and %q", st.Phase, st.LastError, tc.want)
			}
		})
	}
}
