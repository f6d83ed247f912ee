package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instance/sqlobjects"
	"tusk.dev/tusk/internal/instance/supervisor"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/pooler"
)

// bootstrapSuffix names the directory a new data directory is built in. It
// is renamed into place only when complete, so a crash half-way leaves
// nothing that looks like a cluster, and a retry starts over safely.
const bootstrapSuffix = ".tusk-bootstrap"

// bootstrap creates the data directory when there is none, as a new primary
// (initdb, or a recovery from a backup) or as a copy of the upstream
// (pg_basebackup). It reports whether
// it created one. An existing cluster is never touched.
func (m *Manager) bootstrap(ctx context.Context) (bool, error) {
	dataDir := m.opts.DataDir
	if isDataDir(dataDir) {
		m.log.Info("Using the existing data directory", "dataDir", dataDir)
		return false, nil
	}
	if ok, err := emptyOrMissing(dataDir); err != nil || !ok {
		return false, fmt.Errorf("refusing to bootstrap into %s: it is not empty and holds no PostgreSQL cluster (%v); "+
			"move its contents away if they are not needed", dataDir, err)
	}
	if err := m.writePassfile(); err != nil {
		return false, err
	}
	building := dataDir + bootstrapSuffix
	if err := os.RemoveAll(building); err != nil {
		return false, fmt.Errorf("while clearing an interrupted bootstrap: %w", err)
	}
	var err error
	switch {
	case m.opts.Role == instanceapi.RolePrimary && m.opts.Recovery != nil:
		if err = m.recoverPrimary(ctx, building); err != nil {
			// Nothing of a failed recovery is kept: the next attempt
			// starts over, and the data directory stays empty.
			_ = os.RemoveAll(building)
		}
	case m.opts.Role == instanceapi.RolePrimary && m.opts.Clone != nil:
		if err = m.clonePrimary(ctx, building); err != nil {
			_ = os.RemoveAll(building)
		}
	case m.opts.Role == instanceapi.RolePrimary && m.opts.Import != nil:
		if err = m.importPrimary(ctx, building); err != nil {
			_ = os.RemoveAll(building)
		}
	case m.opts.Role == instanceapi.RolePrimary:
		err = m.initPrimary(ctx, building)
	default:
		err = m.cloneWhenReachable(ctx, m.opts.Upstream, building)
	}
	if err != nil {
		return false, err
	}
	return true, moveIntoPlace(building, dataDir)
}

// moveIntoPlace renames a complete data directory to its final path.
func moveIntoPlace(from, to string) error {
	if err := os.Remove(to); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("while removing the empty %s: %w", to, err)
	}
	if err := os.Rename(from, to); err != nil {
		return fmt.Errorf("while moving the new data directory into place: %w", err)
	}
	return nil
}

// initPrimary runs initdb, then starts postgres privately (no TCP) to create
// the roles and the application database.
func (m *Manager) initPrimary(ctx context.Context, dir string) error {
	if err := m.runInitdb(ctx, dir); err != nil {
		return err
	}
	return m.withPrivateServer(ctx, dir, m.createRolesAndDatabase)
}

// runInitdb creates a new database cluster in dir.
func (m *Manager) runInitdb(ctx context.Context, dir string) error {
	m.log.Info("Creating a new database cluster with initdb", "database", m.opts.InitDB.Database, "owner", m.opts.InitDB.Owner)
	return m.runTool(ctx, "initdb", nil, "-D", dir,
		"--username="+superuser, "--pwfile="+m.opts.Secrets.Superuser,
		"--auth-local=scram-sha-256", "--auth-host=scram-sha-256",
		// Checksums catch storage corruption, and let pg_rewind work.
		"--data-checksums",
		// The C locale never changes with the image's glibc, so indexes
		// stay valid across image updates.
		"--encoding=UTF8", "--locale=C", "--no-instructions")
}

// withPrivateServer runs fn against postgres on dir listening on the unix
// socket only, then stops it cleanly.
func (m *Manager) withPrivateServer(ctx context.Context, dir string, fn func(ctx context.Context, conn *pgx.Conn) error) error {
	args := []string{"-c", "listen_addresses=", "-c", "unix_socket_directories=" + m.opts.SocketDir, "-c", "port=" + portArg(m.opts.Port)}
	m.resetWALWatcher()
	pm, err := supervisor.StartPostmaster(m.opts.BinDir, dir, args, m.reaper, m.postgresOutput(), m.log)
	if err != nil {
		return err
	}
	defer func() { _ = pm.Stop(supervisor.Fast, m.opts.Timeouts) }()
	if err := m.waitUntilAccepting(ctx, pm.Done()); err != nil {
		return fmt.Errorf("while starting postgres to set it up (%s): %w", pm.LastError(), err)
	}
	conn, err := m.connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	return fn(ctx, conn)
}

func (m *Manager) createRolesAndDatabase(ctx context.Context, conn *pgx.Conn) error {
	if err := sqlobjects.QuietRoleStatements(ctx, conn); err != nil {
		return err
	}
	secrets := m.currentSecrets()
	replication, err := m.createReplicationRole(secrets)
	if err != nil {
		return err
	}
	statements := []string{replication}
	if owner := m.opts.InitDB.Owner; owner != "" {
		ownerVerifier, err := sqlobjects.ScramVerifier(secrets.appPassword)
		if err != nil {
			return err
		}
		statements = append(statements,
			fmt.Sprintf("CREATE ROLE %s WITH LOGIN PASSWORD %s", ident(owner), literal(ownerVerifier)),
			fmt.Sprintf("CREATE DATABASE %s OWNER %s", ident(m.opts.InitDB.Database), ident(owner)))
	}
	for _, s := range statements {
		if _, err := conn.Exec(ctx, s); err != nil {
			// The statement holds only a verifier, never a password.
			return fmt.Errorf("while setting up the new cluster (%s): %w", firstWords(s, 3), err)
		}
	}
	return m.grantRoleRights(ctx, conn)
}

// grantRoleRights gives the roles Tusk made what it uses them for: the
// monitoring role its login, the replication role pg_rewind's rights; and
// makes the certificate login group.
func (m *Manager) grantRoleRights(ctx context.Context, conn *pgx.Conn) error {
	if err := m.grantMonitorRights(ctx, conn); err != nil {
		return err
	}
	if err := grantProbeRights(ctx, conn); err != nil {
		return err
	}
	if err := ensureCertificateLoginGroup(ctx, conn); err != nil {
		return err
	}
	if err := ensurePoolerAuthRole(ctx, conn); err != nil {
		return err
	}
	return m.grantRewindRights(ctx, conn)
}

// ensurePoolerAuthRole makes the role every pooler looks users up as
// (pooler.AuthRole): a login with no password and no rights but EXECUTE
// on the lookup function, which it (re)creates in the manager's database,
// postgres (the poolers' auth_dbname). pg_hba.conf lets the role in with a
// client certificate only, which only the operator can issue, so the role
// is harmless in a cluster without a pooler. It changes nothing when all
// is there; a cluster made by an earlier Tusk gets it on its primary.
func ensurePoolerAuthRole(ctx context.Context, conn *pgx.Conn) error {
	var ready bool
	err := conn.QueryRow(ctx, `SELECT rolcanlogin AND NOT rolsuper AND NOT rolreplication AND NOT rolcreaterole
		AND NOT rolcreatedb AND NOT rolbypassrls AND rolpassword IS NULL
		AND to_regprocedure($2) IS NOT NULL AND has_function_privilege(oid, $2, 'EXECUTE')
		FROM pg_authid WHERE rolname = $1`, pooler.AuthRole, pooler.AuthFunction+"(text)").Scan(&ready)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("while looking at the pooler's auth role: %w", err)
	}
	if ready {
		return nil
	}
	role := ident(pooler.AuthRole)
	attributes := " WITH LOGIN NOSUPERUSER NOREPLICATION NOCREATEROLE NOCREATEDB NOBYPASSRLS PASSWORD NULL"
	create := "ALTER ROLE " + role + attributes
	if errors.Is(err, pgx.ErrNoRows) {
		create = "CREATE ROLE " + role + attributes
	}
	statements := append([]string{"SET LOCAL synchronous_commit TO local", create}, pooler.AuthFunctionSQL(pooler.AuthRole)...)
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, s := range statements {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("while making the pooler's auth role and function (%s): %w", firstWords(s, 5), err)
			}
		}
		return nil
	})
}

// ensureCertificateLoginGroup makes the group pg_hba.conf lets log in with
// a client certificate only (instanceapi.CertificateLoginRole): a role
// without login, members, or rights; ApplyRole makes roles its members.
// It changes nothing when the group is there as it should be, and, like
// grantMonitorRights, does not wait for synchronous standbys.
func ensureCertificateLoginGroup(ctx context.Context, conn *pgx.Conn) error {
	var canLogin bool
	err := conn.QueryRow(ctx, "SELECT rolcanlogin FROM pg_roles WHERE rolname = $1", instanceapi.CertificateLoginRole).Scan(&canLogin)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("while looking at the certificate login group: %w", err)
	case !canLogin:
		return nil
	}
	statements := []string{"SET LOCAL synchronous_commit TO local", sqlobjects.CreateCertificateLoginGroup}
	if err == nil {
		statements[1] = "ALTER ROLE " + ident(instanceapi.CertificateLoginRole) + " WITH NOLOGIN"
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, s := range statements {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("while making the certificate login group (%s): %w", firstWords(s, 4), err)
			}
		}
		return nil
	})
}

// probeConnectionLimit bounds the SLI probe's sessions: it needs one per
// target at a time, and may never crowd applications out.
const probeConnectionLimit = 4

// grantProbeRights makes what the SLI probe needs: its role, a login with
// no password (pg_hba.conf lets it in with a client certificate only, to
// instanceapi.ProbeDatabase) and few connections, and its one table, which
// it may read and write and nothing more (the superuser owns the schema
// and the table). It changes nothing when all is there. The manager's
// session is in the probe's database.
func grantProbeRights(ctx context.Context, conn *pgx.Conn) error {
	var granted bool
	err := conn.QueryRow(ctx, `SELECT CASE WHEN to_regclass($2) IS NULL THEN false
		ELSE rolcanlogin AND NOT rolsuper AND rolconnlimit = $3 AND has_table_privilege(oid, $2, 'SELECT, INSERT, UPDATE') END
		FROM pg_roles WHERE rolname = $1`, instanceapi.ProbeRole, instanceapi.ProbeTable, probeConnectionLimit).Scan(&granted)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("while looking at the probe's role: %w", err)
	}
	if granted {
		return nil
	}
	schema, _, _ := strings.Cut(instanceapi.ProbeTable, ".")
	role := ident(instanceapi.ProbeRole)
	limit := fmt.Sprintf(" WITH LOGIN NOSUPERUSER CONNECTION LIMIT %d", probeConnectionLimit)
	create := "ALTER ROLE " + role + limit
	if errors.Is(err, pgx.ErrNoRows) {
		create = "CREATE ROLE " + role + limit
	}
	statements := []string{
		"SET LOCAL synchronous_commit TO local",
		create,
		"CREATE SCHEMA IF NOT EXISTS " + ident(schema),
		"CREATE TABLE IF NOT EXISTS " + instanceapi.ProbeTable + " (id integer PRIMARY KEY, written_at timestamptz NOT NULL)",
		"GRANT USAGE ON SCHEMA " + ident(schema) + " TO " + role,
		"GRANT SELECT, INSERT, UPDATE ON " + instanceapi.ProbeTable + " TO " + role,
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, s := range statements {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("while making the probe's role and table (%s): %w", s, err)
			}
		}
		return nil
	})
}

// grantMonitorRights makes the monitoring role what the manager observes
// postgres as: a login without a password (pg_hba.conf lets it in by peer
// authentication over the socket only), with pg_monitor's rights and the
// view of configuration file errors the status reports (pg_file_settings,
// superuser-only by default; pg_monitor reads every setting already). It
// creates the role when the cluster has none, and changes nothing when the
// role has it all. Like grantRewindRights, it does not wait for
// synchronous standbys and reaches replicas as any WAL does, all at once.
func (m *Manager) grantMonitorRights(ctx context.Context, conn *pgx.Conn) error {
	exists, granted := true, false
	err := conn.QueryRow(ctx, `SELECT rolcanlogin AND pg_has_role(oid, 'pg_monitor', 'MEMBER')
		AND has_table_privilege(oid, 'pg_catalog.pg_file_settings', 'SELECT')
		AND has_function_privilege(oid, 'pg_catalog.pg_show_all_file_settings()', 'EXECUTE')
		FROM pg_roles WHERE rolname = $1`, monitorRole).Scan(&granted)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		exists = false
	case err != nil:
		return fmt.Errorf("while looking at the monitoring role: %w", err)
	case granted:
		return nil
	}
	role := ident(monitorRole)
	statements := []string{
		"SET LOCAL synchronous_commit TO local",
		"ALTER ROLE " + role + " WITH LOGIN",
		"GRANT pg_monitor TO " + role,
		"GRANT SELECT ON pg_catalog.pg_file_settings TO " + role,
		"GRANT EXECUTE ON FUNCTION pg_catalog.pg_show_all_file_settings() TO " + role,
	}
	if !exists {
		statements[1] = "CREATE ROLE " + role + " WITH LOGIN"
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, s := range statements {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("while giving the monitoring role its rights (%s): %w", s, err)
			}
		}
		return nil
	})
}

// grantRewindRights lets the replication role do what pg_rewind does on
// the primary it reads, so that no superuser has to log in over the
// network: list, stat and read the data directory's files (these
// functions read nothing outside it without pg_read_server_files), and,
// from PostgreSQL 15 on, CHECKPOINT (checkpointUpstream). Replicas are
// copies and need nothing. Rights already there are not granted again, and
// the grant does not wait for synchronous standbys (there may be none
// streaming): it reaches them as any WAL does.
func (m *Manager) grantRewindRights(ctx context.Context, conn *pgx.Conn) error {
	has := `has_function_privilege($1, 'pg_catalog.pg_ls_dir(text, boolean, boolean)', 'EXECUTE')
		AND has_function_privilege($1, 'pg_catalog.pg_stat_file(text, boolean)', 'EXECUTE')
		AND has_function_privilege($1, 'pg_catalog.pg_read_binary_file(text)', 'EXECUTE')
		AND has_function_privilege($1, 'pg_catalog.pg_read_binary_file(text, bigint, bigint, boolean)', 'EXECUTE')`
	if m.opts.MajorVersion >= 15 {
		has += ` AND pg_has_role($1, 'pg_checkpoint', 'MEMBER')`
	}
	var granted bool
	if err := conn.QueryRow(ctx, "SELECT "+has, replicationUser).Scan(&granted); err != nil || granted {
		return err
	}
	role := ident(replicationUser)
	statements := []string{
		"SET LOCAL synchronous_commit TO local",
		"GRANT EXECUTE ON FUNCTION pg_catalog.pg_ls_dir(text, boolean, boolean) TO " + role,
		"GRANT EXECUTE ON FUNCTION pg_catalog.pg_stat_file(text, boolean) TO " + role,
		"GRANT EXECUTE ON FUNCTION pg_catalog.pg_read_binary_file(text) TO " + role,
		"GRANT EXECUTE ON FUNCTION pg_catalog.pg_read_binary_file(text, bigint, bigint, boolean) TO " + role,
	}
	if m.opts.MajorVersion >= 15 {
		statements = append(statements, "GRANT pg_checkpoint TO "+role)
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, s := range statements {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("while giving the replication role pg_rewind's rights (%s): %w", s, err)
			}
		}
		return nil
	})
}

// createReplicationRole is the statement creating the replication role:
// without a password when replicas authenticate with a client certificate,
// so that no password can stand in for it.
func (m *Manager) createReplicationRole(s secrets) (string, error) {
	if m.replicationCerts != nil {
		return fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION", ident(replicationUser)), nil
	}
	verifier, err := sqlobjects.ScramVerifier(s.replicationPassword)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION PASSWORD %s", ident(replicationUser), literal(verifier)), nil
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	if len(f) > n {
		f = f[:n]
	}
	return strings.Join(f, " ")
}

// ident and literal quote the manager's own statements as sqlobjects
// quotes the user's.
func ident(name string) string { return sqlobjects.Ident(name) }

func literal(s string) string { return sqlobjects.Literal(s) }

// cloneFrom copies the upstream's data directory with pg_basebackup,
// streaming the WAL written meanwhile so the copy is consistent on its own.
func (m *Manager) cloneFrom(ctx context.Context, up instanceapi.Upstream, dir string) error {
	m.log.Info("Copying the primary with pg_basebackup", "host", up.Host, "port", up.Port)
	env := append([]string{"PGPASSFILE=" + m.passfilePath(), "PGAPPNAME=" + m.opts.Name}, sslEnv(m.replicationConnInfo(up))...)
	err := m.runTool(ctx, "pg_basebackup", env, "-D", dir,
		"--host="+up.Host, "--port="+portArg(up.Port), "--username="+replicationUser, "--no-password",
		"--wal-method=stream", "--checkpoint=fast")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "standby.signal"), nil, 0o600)
}

// cloneWhenReachable is cloneFrom for a new replica, which may start
// before its primary can be reached (a Service's endpoints follow the
// primary's readiness a moment later): while pg_basebackup cannot even
// connect, it waits and tries again, until ctx ends. Any other failure
// ends the bootstrap.
func (m *Manager) cloneWhenReachable(ctx context.Context, up instanceapi.Upstream, dir string) error {
	wait := time.Second
	for {
		err := m.cloneFrom(ctx, up, dir)
		if err == nil || !couldNotConnect(err) || ctx.Err() != nil {
			return err
		}
		m.log.Info("The primary cannot be reached yet; trying again", "in", wait.String(), "error", err.Error())
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if !sleepCtx(ctx, wait) {
			return err
		}
		wait = min(2*wait, maxCloneWait)
	}
}

// maxCloneWait is the longest wait between two attempts of a new
// replica to reach its primary.
const maxCloneWait = 10 * time.Second

// runTool runs one of PostgreSQL's programs, logging its output, and returns
// an error that quotes the end of that output.
func (m *Manager) runTool(ctx context.Context, name string, env []string, args ...string) error {
	_, err := m.runToolIn(ctx, "", append(os.Environ(), env...), filepath.Join(m.opts.BinDir, name), args...)
	return err
}

// runToolIn runs program in dir with exactly env, through the reaper,
// logs its output and returns it; an error quotes the end of it.
func (m *Manager) runToolIn(ctx context.Context, dir string, env []string, program string, args ...string) (string, error) {
	name := filepath.Base(program)
	cmd := exec.CommandContext(ctx, program, args...) //nolint:gosec // PostgreSQL's own programs
	cmd.Dir, cmd.Env = dir, env
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := m.reaper.Start(cmd); err != nil {
		return "", fmt.Errorf("while starting %s: %w", name, err)
	}
	err := m.reaper.Wait(cmd)
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if line != "" {
			m.pgLog.WithName(name).Info(line)
		}
	}
	if err != nil {
		return out.String(), fmt.Errorf("%s failed (%w): %s", name, err, lastLines(out.String(), 3))
	}
	return out.String(), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}
