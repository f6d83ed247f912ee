package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"tusk.dev/tusk/internal/instanceapi"
)

// ImportOptions make a new primary copy databases and roles from an
// existing PostgreSQL server after its initdb, before it first serves.
type ImportOptions struct {
	// Host and Port are the source server's address.
	Host string
	Port int
	// User is the source's role the import logs in as; PasswordFile
	// holds its password.
	User         string
	PasswordFile string
	// Database is the source database read for roles and owners.
	Database string
	// SSLMode is libpq's sslmode; CAFile the CA verify-ca and
	// verify-full check the source's certificate against.
	SSLMode string
	CAFile  string
	// Databases are the source databases copied, each into one of the
	// same name.
	Databases []string
	// Method is "dump" (a one-time copy) or "logical" (the schema, then a
	// subscription per database to Publication until a cutover).
	Method      string
	Publication string
}

// minImportMajor is the oldest source major an import reads: the
// catalog queries and pg_dump's support both reach back that far.
const minImportMajor = 12

func (o *ImportOptions) validate(recovery *RecoveryOptions, clone *CloneOptions) error {
	if o == nil {
		return nil
	}
	var errs []error
	if o.Host == "" || o.Port < 1 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("an import needs the source's host and port, got %q:%d", o.Host, o.Port))
	}
	if o.User == "" || o.PasswordFile == "" {
		errs = append(errs, errors.New("an import needs the source's user and a file with its password"))
	}
	switch o.SSLMode {
	case "disable", "require":
	case "verify-ca", "verify-full":
		if o.CAFile == "" {
			errs = append(errs, fmt.Errorf("sslmode %s needs the source's CA file", o.SSLMode))
		}
	default:
		errs = append(errs, fmt.Errorf("sslmode %q is not one of disable, require, verify-ca, verify-full", o.SSLMode))
	}
	if len(o.Databases) == 0 {
		errs = append(errs, errors.New("an import needs at least one database to copy"))
	}
	switch {
	case o.Method != "dump" && o.Method != importMethodLogical:
		errs = append(errs, fmt.Errorf("import method %q is neither dump nor logical", o.Method))
	case o.Method == importMethodLogical && o.Publication == "":
		errs = append(errs, errors.New("a logical import needs the source's publication"))
	}
	if recovery != nil || clone != nil {
		errs = append(errs, errors.New("a new primary imports, recovers from a backup or clones another cluster: only one"))
	}
	return errors.Join(errs...)
}

// importing says whether this start bootstraps by an import.
func (m *Manager) importing() bool {
	return m.opts.Import != nil && m.opts.Role == instanceapi.RolePrimary && !isDataDir(m.opts.DataDir)
}

// importPrimary runs initdb, then copies the source's roles and databases
// into the new cluster while it runs privately. A failure leaves only dir,
// which the next attempt removes: nothing half-imported ever serves.
func (m *Manager) importPrimary(ctx context.Context, dir string) error {
	imp := m.opts.Import
	if err := refuseLogicalImportBefore16(imp.Method, m.opts.MajorVersion); err != nil {
		return err
	}
	m.setRecoveryStep("", fmt.Sprintf("creating the new cluster to import %s from %s:%d", strings.Join(imp.Databases, ", "), imp.Host, imp.Port))
	if err := m.runInitdb(ctx, dir); err != nil {
		return err
	}
	return m.withPrivateServer(ctx, dir, func(ctx context.Context, conn *pgx.Conn) error {
		if err := m.createRolesAndDatabase(ctx, conn); err != nil {
			return err
		}
		return m.importInto(ctx, dir, conn)
	})
}

// importSource is what the import read of the source server.
type importSource struct {
	version     string
	major       int
	roles       []sourceRole
	memberships []sourceMembership
	databases   []sourceDatabase
}

func (m *Manager) importInto(ctx context.Context, dir string, local *pgx.Conn) error {
	imp := m.opts.Import
	password, err := readPasswordFile(imp.PasswordFile)
	if err != nil {
		return err
	}
	m.setRecoveryStep("", fmt.Sprintf("reading the roles and databases of %s:%d", imp.Host, imp.Port))
	src, err := m.readImportSource(ctx, password)
	if err != nil {
		return err
	}
	existing, err := localRoleNames(ctx, local)
	if err != nil {
		return err
	}
	if m.opts.InitDB.Owner == "" {
		return errors.New("an import needs the application owner (--owner): it owns what the source's superuser owned")
	}
	guarded, err := superuserOnlySettings(ctx, local)
	if err != nil {
		return err
	}
	droppedSettings := dropGuardedSettings(src, guarded)
	plan := planRoleImport(src, existing, m.opts.MajorVersion)
	plan.dropped = append(plan.dropped, droppedSettings...)
	for _, s := range plan.statements {
		if _, err := local.Exec(ctx, s); err != nil {
			// Statements hold verifiers, never passwords.
			return fmt.Errorf("while importing the roles (%s): %w", firstWords(s, 3), err)
		}
	}
	m.log.Info("Imported the source's roles", "source", sourceName(imp), "sourceVersion", src.version,
		"created", plan.created, "kept", plan.kept, "withoutPassword", plan.withoutPassword, "attributesDropped", plan.dropped)
	restore, err := createRestoreRole(ctx, local, restoreRoleMembers(src, plan.created, m.opts.InitDB.Owner))
	if err != nil {
		return err
	}
	if err := m.importDatabases(ctx, dir, local, src, password, restore); err != nil {
		return err
	}
	if _, err := local.Exec(ctx, "DROP ROLE "+ident(restoreRole)); err != nil {
		return fmt.Errorf("while dropping the role the import restored as: %w", err)
	}
	return nil
}

// importDatabases copies each database, as restore.
func (m *Manager) importDatabases(ctx context.Context, dir string, local *pgx.Conn, src *importSource, password string, restore *restoreLogin) error {
	imp := m.opts.Import
	logical := &importState{Subscriptions: map[string]string{}}
	for i, db := range src.databases {
		what := "the database"
		if imp.Method == importMethodLogical {
			what = "the schema of the database"
		}
		m.setRecoveryStep("", fmt.Sprintf("copying %s %s (%d of %d) from %s with pg_dump and pg_restore", what, db.name, i+1, len(src.databases), sourceName(imp)))
		start := time.Now()
		if err := m.importDatabase(ctx, local, db, src.major, password, restore); err != nil {
			return err
		}
		if imp.Method == importMethodLogical {
			if err := m.prepareLogicalImport(ctx, dir, db, password, logical); err != nil {
				return err
			}
		}
		m.log.Info("Imported a database", "database", db.name, "method", imp.Method, "seconds", time.Since(start).Seconds())
	}
	return nil
}

func sourceName(imp *ImportOptions) string { return imp.Host + ":" + strconv.Itoa(imp.Port) }

func readPasswordFile(path string) (string, error) {
	data, err := os.ReadFile(path) //nolint:gosec // a mounted Secret named on the command line
	if err != nil {
		return "", fmt.Errorf("while reading the import source's password: %w", err)
	}
	p := strings.TrimRight(string(data), "\r\n")
	if p == "" {
		return "", fmt.Errorf("the import source's password file %s is empty", path)
	}
	return p, nil
}

// sourceConnInfo is libpq's keyword/value string for the source, without
// the password (pgx gets it apart; the tools get PGPASSWORD).
func sourceConnInfo(imp *ImportOptions, database string) string {
	kv := []string{
		"host=" + quoteConnValue(imp.Host), "port=" + strconv.Itoa(imp.Port),
		"user=" + quoteConnValue(imp.User), "dbname=" + quoteConnValue(database),
		"sslmode=" + imp.SSLMode, "connect_timeout=10", "application_name=tusk-import",
	}
	if imp.CAFile != "" {
		kv = append(kv, "sslrootcert="+quoteConnValue(imp.CAFile))
	}
	return strings.Join(kv, " ")
}

// quoteConnValue quotes a value of a keyword/value connection string.
func quoteConnValue(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

func (m *Manager) connectSource(ctx context.Context, database, password string) (*pgx.Conn, error) {
	imp := m.opts.Import
	cfg, err := pgx.ParseConfig(sourceConnInfo(imp, database))
	if err != nil {
		return nil, fmt.Errorf("while configuring the connection to the import source: %w", err)
	}
	cfg.Password = password
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("while connecting to the import source %s as %s (database %s, sslmode %s): %w",
			sourceName(imp), imp.User, database, imp.SSLMode, err)
	}
	return conn, nil
}

func (m *Manager) readImportSource(ctx context.Context, password string) (*importSource, error) {
	imp := m.opts.Import
	conn, err := m.connectSource(ctx, imp.Database, password)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	src := &importSource{}
	var num int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('server_version_num')::int").Scan(&src.version, &num); err != nil {
		return nil, fmt.Errorf("while reading the import source's version: %w", err)
	}
	src.major = num / 10000
	if src.major < minImportMajor {
		return nil, fmt.Errorf("the import source runs PostgreSQL %s; imports need %d or later", src.version, minImportMajor)
	}
	if src.roles, err = readSourceRoles(ctx, conn); err != nil {
		return nil, err
	}
	if src.memberships, err = readSourceMemberships(ctx, conn); err != nil {
		return nil, err
	}
	if src.databases, err = readSourceDatabases(ctx, conn, imp.Databases); err != nil {
		return nil, err
	}
	return src, nil
}

// sourceRole is a role of the source as pg_roles shows it.
type sourceRole struct {
	name                                     string
	superuser, inherit, createRole, createDB bool
	login, replication, bypassRLS            bool
	connLimit                                int32
	validUntil                               *string
	// verifier is the password's SCRAM or MD5 verifier, when readable.
	verifier *string
	// settings are its ALTER ROLE SET settings for every database.
	settings []string
}

type sourceMembership struct {
	role, member string
	admin        bool
}

type sourceDatabase struct {
	name, owner, encoding string
	settings              []string
}

// readSourceRoles reads the source's roles, with their password verifiers
// when the import's user may read pg_authid (a superuser, or a member of
// pg_read_all_data); the plan reports the login roles left without.
func readSourceRoles(ctx context.Context, conn *pgx.Conn) ([]sourceRole, error) {
	rows, err := conn.Query(ctx, `SELECT r.rolname, r.rolsuper, r.rolinherit, r.rolcreaterole, r.rolcreatedb, r.rolcanlogin,
       r.rolreplication, r.rolbypassrls, r.rolconnlimit, r.rolvaliduntil::text,
       coalesce((SELECT s.setconfig FROM pg_db_role_setting s WHERE s.setrole = r.oid AND s.setdatabase = 0), '{}')
  FROM pg_roles r WHERE r.rolname !~ '^pg_' ORDER BY r.rolname`)
	if err != nil {
		return nil, fmt.Errorf("while reading the import source's roles: %w", err)
	}
	roles, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sourceRole, error) {
		var r sourceRole
		err := row.Scan(&r.name, &r.superuser, &r.inherit, &r.createRole, &r.createDB, &r.login,
			&r.replication, &r.bypassRLS, &r.connLimit, &r.validUntil, &r.settings)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("while reading the import source's roles: %w", err)
	}
	verifiers := map[string]string{}
	rows, err = conn.Query(ctx, "SELECT rolname, rolpassword FROM pg_authid WHERE rolpassword IS NOT NULL")
	if err == nil {
		err = collectInto(rows, verifiers)
	}
	switch {
	case isInsufficientPrivilege(err): // not a superuser
		return roles, nil
	case err != nil:
		return nil, fmt.Errorf("while reading the import source's password verifiers: %w", err)
	}
	for i := range roles {
		if v, ok := verifiers[roles[i].name]; ok {
			roles[i].verifier = &v
		}
	}
	return roles, nil
}

func collectInto(rows pgx.Rows, into map[string]string) error {
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return err
		}
		into[k] = v
	}
	return rows.Err()
}

func readSourceMemberships(ctx context.Context, conn *pgx.Conn) ([]sourceMembership, error) {
	rows, err := conn.Query(ctx, `SELECT r.rolname, m.rolname, a.admin_option
  FROM pg_auth_members a JOIN pg_roles r ON r.oid = a.roleid JOIN pg_roles m ON m.oid = a.member
 ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("while reading the import source's role memberships: %w", err)
	}
	ms, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sourceMembership, error) {
		var ms sourceMembership
		err := row.Scan(&ms.role, &ms.member, &ms.admin)
		return ms, err
	})
	if err != nil {
		return nil, fmt.Errorf("while reading the import source's role memberships: %w", err)
	}
	return ms, nil
}

func readSourceDatabases(ctx context.Context, conn *pgx.Conn, names []string) ([]sourceDatabase, error) {
	rows, err := conn.Query(ctx, `SELECT d.datname, pg_get_userbyid(d.datdba), pg_encoding_to_char(d.encoding),
       coalesce((SELECT s.setconfig FROM pg_db_role_setting s WHERE s.setdatabase = d.oid AND s.setrole = 0), '{}')
  FROM pg_database d WHERE d.datname = ANY($1) AND d.datallowconn`, names)
	if err != nil {
		return nil, fmt.Errorf("while reading the import source's databases: %w", err)
	}
	found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sourceDatabase, error) {
		var d sourceDatabase
		err := row.Scan(&d.name, &d.owner, &d.encoding, &d.settings)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("while reading the import source's databases: %w", err)
	}
	byName := map[string]sourceDatabase{}
	for _, d := range found {
		byName[d.name] = d
	}
	var dbs []sourceDatabase
	var missing []string
	for _, n := range names {
		d, ok := byName[n]
		if !ok {
			missing = append(missing, n)
			continue
		}
		dbs = append(dbs, d)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("the import source has no database %s that accepts connections: check bootstrap.initdb.import.databases",
			strings.Join(missing, ", "))
	}
	return dbs, nil
}

func localRoleNames(ctx context.Context, conn *pgx.Conn) (map[string]bool, error) {
	rows, err := conn.Query(ctx, "SELECT rolname FROM pg_roles")
	if err != nil {
		return nil, fmt.Errorf("while listing the new cluster's roles: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("while listing the new cluster's roles: %w", err)
	}
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	return set, nil
}

// importDatabase creates the database (unless the bootstrap made it
// already, empty), checks what the source's database holds, restores it
// as the restore role, and checks that the restore changed no role: a
// dump of one database never does, so a change is the source's code
// acting as an imported role (say, setting the application owner's
// password to log in as it later).
func (m *Manager) importDatabase(ctx context.Context, local *pgx.Conn, db sourceDatabase, sourceMajor int, password string, restore *restoreLogin) error {
	appDatabase, appOwner := m.opts.InitDB.Database, m.opts.InitDB.Owner
	for _, s := range createDatabaseStatements(db, appDatabase, appOwner) {
		if _, err := local.Exec(ctx, s); err != nil {
			return fmt.Errorf("while creating the database %s to import (%s): %w", db.name, firstWords(s, 3), err)
		}
	}
	objs, err := m.readSourceDatabaseObjects(ctx, db.name, password, sourceMajor)
	if err != nil {
		return err
	}
	untrusted, err := untrustedExtensions(ctx, local, objs.extensions)
	if err != nil {
		return err
	}
	logical := m.opts.Import.Method == importMethodLogical
	if err := refuseUnsafeObjects(db.name, objs, untrusted, !logical); err != nil {
		return err
	}
	owner := targetDatabaseOwner(db, appDatabase, appOwner)
	notKept := ownersNotKept(objs, restore.carried)
	if len(notKept) > 0 {
		m.log.Info("The import gives the database's owner every object of a database where it cannot give some their owners",
			"database", db.name, "owner", owner, "ownersNotKept", notKept)
	}
	before, err := rolesDigest(ctx, local)
	if err != nil {
		return err
	}
	if err := m.restoreDatabase(ctx, db.name, password, restore, len(notKept) == 0); err != nil {
		return err
	}
	after, err := rolesDigest(ctx, local)
	if err != nil {
		return err
	}
	if after != before {
		return fmt.Errorf("the code of the import source's database %s changed the new cluster's roles, memberships or databases "+
			"while it was restored (a function its tables, domains or indexes call, acting with the rights of the roles it imports): "+
			"the import stops; remove that code on the source to import it", db.name)
	}
	return m.handOverRestoredObjects(ctx, db.name, owner)
}

// restoreDatabase pipes pg_dump of the source's database into pg_restore
// logged in as the restore role, then analyzes the restored tables as that
// role: pg_restore leaves no statistics.
func (m *Manager) restoreDatabase(ctx context.Context, database, password string, restore *restoreLogin, keepOwners bool) error {
	logical := m.opts.Import.Method == importMethodLogical
	dumpEnv, restoreEnv := m.importToolEnvs(database, password, restore)
	// Subscriptions would connect out of the new cluster on their own,
	// and its storage has no tablespaces but the default.
	dump := []string{"--format=custom", "--no-subscriptions", "--no-tablespaces"}
	if logical {
		// The subscription's initial copy brings the rows; the source's
		// publications are the import's plumbing there (one of all
		// tables, which only a superuser may create).
		dump = append(dump, "--schema-only", "--no-publications")
	}
	if err := m.pipeTools(ctx, dumpEnv, dump, restoreEnv, restoreArgs(database, keepOwners)); err != nil {
		return fmt.Errorf("while copying the database %s: %w", database, err)
	}
	if logical {
		return nil
	}
	return m.analyzeRestored(ctx, database, restore)
}

// importToolEnvs are pg_dump's environment, reaching the source as the
// import's user, and pg_restore's, reaching the new cluster as the restore
// role.
func (m *Manager) importToolEnvs(database, password string, restore *restoreLogin) (dumpEnv, restoreEnv []string) {
	imp := m.opts.Import
	dumpEnv = append(envWithoutLibpq(), "PGHOST="+imp.Host, "PGPORT="+strconv.Itoa(imp.Port), "PGUSER="+imp.User,
		"PGPASSWORD="+password, "PGDATABASE="+database, "PGSSLMODE="+imp.SSLMode, "PGCONNECT_TIMEOUT=10", "PGAPPNAME=tusk-import")
	if imp.CAFile != "" {
		dumpEnv = append(dumpEnv, "PGSSLROOTCERT="+imp.CAFile)
	}
	// The import presents no client certificate: libpq would otherwise
	// look in ~/.postgresql, which is not the manager's to offer.
	noCert := filepath.Join(m.opts.RunDir, "import-has-no-client-certificate")
	dumpEnv = append(dumpEnv, "PGSSLCERT="+noCert, "PGSSLKEY="+noCert)
	restoreEnv = append(envWithoutLibpq(), "PGHOST="+m.opts.SocketDir, "PGPORT="+portArg(m.opts.Port), "PGUSER="+restoreRole,
		"PGPASSWORD="+restore.password, "PGDATABASE="+database, "PGAPPNAME=tusk-import")
	return dumpEnv, restoreEnv
}

// envWithoutLibpq is the manager's environment without libpq's PG*
// variables, so each tool gets exactly the connection it is given.
func envWithoutLibpq() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

// pipeTools runs pg_dump into pg_restore through a pipe: nothing of the
// dump lands on disk. pg_dump's failure is the one reported when both
// fail, as pg_restore then only saw its output end.
func (m *Manager) pipeTools(ctx context.Context, dumpEnv, dumpArgs, restoreEnv, restoreArgs []string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	var dumpOut, restoreOut strings.Builder
	dump := exec.CommandContext(ctx, filepath.Join(m.opts.BinDir, "pg_dump"), dumpArgs...) //nolint:gosec // PostgreSQL's own programs
	dump.Env, dump.Stdout, dump.Stderr = dumpEnv, w, &dumpOut
	restore := exec.CommandContext(ctx, filepath.Join(m.opts.BinDir, "pg_restore"), restoreArgs...) //nolint:gosec // PostgreSQL's own programs
	restore.Env, restore.Stdin, restore.Stdout, restore.Stderr = restoreEnv, r, &restoreOut, &restoreOut
	if err := m.reaper.Start(restore); err != nil {
		_ = r.Close()
		_ = w.Close()
		return fmt.Errorf("while starting pg_restore: %w", err)
	}
	_ = r.Close()
	startErr := m.reaper.Start(dump)
	_ = w.Close() // pg_restore sees the end once pg_dump exits (or never started)
	var dumpErr error
	if startErr != nil {
		dumpErr = fmt.Errorf("while starting pg_dump: %w", startErr)
	} else if err := m.reaper.Wait(dump); err != nil {
		dumpErr = fmt.Errorf("pg_dump failed (%w): %s", err, lastLines(dumpOut.String(), 3))
	}
	restoreErr := m.reaper.Wait(restore)
	m.logToolOutput("pg_dump", dumpOut.String())
	m.logToolOutput("pg_restore", restoreOut.String())
	switch {
	case dumpErr != nil:
		return dumpErr
	case restoreErr != nil:
		// pg_restore's error spans a few lines: the error, its detail, and
		// the statement it ran. The message reaches the cluster's status,
		// which more people read than the rows: without the rows' values
		// (the manager's log has the whole output).
		return fmt.Errorf("pg_restore failed (%w): %s (the instance manager's log has pg_restore's whole output)",
			restoreErr, withoutRowData(lastLines(restoreOut.String(), 6)))
	}
	return nil
}

// rowValue is a value PostgreSQL quotes in an error: `integer: "abc"`, a
// DETAIL's `Key (id)=(42)`.
var rowValue = regexp.MustCompile(`(: )"[^"]*"|(=)\([^)]*\)`)

// withoutRowData drops from pg_restore's error lines what may hold the
// rows' values: DETAIL and CONTEXT lines (a failing key, the COPY line's
// data), the statement it ran ("Command was:", an INSERT's values), and
// the values an ERROR quotes; names of tables and constraints stay.
func withoutRowData(out string) string {
	var kept []string
	for _, line := range strings.Split(out, " / ") {
		t := strings.ToLower(strings.TrimPrefix(strings.TrimSpace(line), "pg_restore: "))
		if strings.HasPrefix(t, "detail:") || strings.HasPrefix(t, "context:") || strings.HasPrefix(t, "command was:") {
			continue
		}
		kept = append(kept, rowValue.ReplaceAllString(line, `$1$2(…)`))
	}
	return strings.Join(kept, " / ")
}

func (m *Manager) logToolOutput(name, out string) {
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line != "" {
			m.pgLog.WithName(name).Info(line)
		}
	}
}

// isInsufficientPrivilege says PostgreSQL refused err for the role's
// rights (SQLSTATE 42501).
func isInsufficientPrivilege(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// superuserOnlySettings are the parameters only a superuser may set on
// this server (pg_settings.context 'superuser').
func superuserOnlySettings(ctx context.Context, conn *pgx.Conn) (map[string]bool, error) {
	rows, err := conn.Query(ctx, "SELECT name FROM pg_settings WHERE context = 'superuser'")
	var names []string
	if err == nil {
		names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return nil, fmt.Errorf("while reading which settings need a superuser: %w", err)
	}
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set, nil
}

// dropGuardedSettings removes from the source's roles and databases the
// settings (ALTER ROLE/DATABASE ... SET) only a superuser may set: the
// import would set them as one, and every session of the role or in the
// database would then run with them (session_replication_role = replica
// skips triggers and foreign keys). It says what it left out, as "role SET
// name" or "database DATABASE SET name".
func dropGuardedSettings(src *importSource, guarded map[string]bool) []string {
	var dropped []string
	keep := func(settings []string, what string) []string {
		var kept []string
		for _, kv := range settings {
			if name, _, _ := strings.Cut(kv, "="); guarded[name] {
				dropped = append(dropped, what+" SET "+name)
				continue
			}
			kept = append(kept, kv)
		}
		return kept
	}
	for i := range src.roles {
		src.roles[i].settings = keep(src.roles[i].settings, src.roles[i].name)
	}
	for i := range src.databases {
		src.databases[i].settings = keep(src.databases[i].settings, "database "+src.databases[i].name)
	}
	return dropped
}
