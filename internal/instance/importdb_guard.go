package instance

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instance/sqlobjects"
)

// A dump holds the source's code: functions its CHECK constraints, domains,
// generated columns and partition keys call while rows load, and statements
// only a superuser may run (C functions, untrusted languages and extensions,
// event triggers). pg_restore, and the ANALYZE after it, therefore log in as
// restoreRole, a role that is no superuser, made for the import and dropped
// after it. They log in as that role rather than run SET ROLE under the
// superuser: a function may RESET ROLE whenever the session's user is a
// superuser.
const restoreRole = "tusk_restore"

// restoreLogin is how the import logs in as the restore role, and whom
// that role may give objects to.
type restoreLogin struct {
	password string
	// carried are the roles it is a member of: those the import created
	// and the application owner, so that it may give their objects to them.
	carried map[string]bool
}

// createRestoreRole makes restoreRole a member of every role that may own
// the imported objects.
func createRestoreRole(ctx context.Context, local *pgx.Conn, owners []string) (*restoreLogin, error) {
	login := &restoreLogin{password: rand.Text(), carried: map[string]bool{}}
	verifier, err := sqlobjects.ScramVerifier(login.password)
	if err != nil {
		return nil, err
	}
	statements := []string{fmt.Sprintf("CREATE ROLE %s WITH LOGIN NOSUPERUSER INHERIT NOCREATEROLE NOCREATEDB NOREPLICATION NOBYPASSRLS PASSWORD %s",
		ident(restoreRole), literal(verifier))}
	for _, o := range owners {
		statements = append(statements, fmt.Sprintf("GRANT %s TO %s", ident(o), ident(restoreRole)))
		login.carried[o] = true
	}
	for _, s := range statements {
		if _, err := local.Exec(ctx, s); err != nil {
			// The statements hold a verifier, never the password.
			return nil, fmt.Errorf("while making the role the import restores as (%s): %w", firstWords(s, 3), err)
		}
	}
	return login, nil
}

// restoreRoleMembers are the roles the restore role becomes a member of:
// the roles the import created, and the application owner. A function of
// the source's that runs while rows load acts with their rights, never a
// superuser's: so not with a CREATEROLE role's either, which before
// PostgreSQL 16 may grant itself the server's files and programs. Objects
// such a role owns go to the database's owner (ownersNotKept).
func restoreRoleMembers(src *importSource, created []string, appOwner string) []string {
	createRole := map[string]bool{}
	for _, r := range src.roles {
		createRole[r.name] = r.createRole
	}
	members := slices.DeleteFunc(slices.Clone(created), func(r string) bool { return createRole[r] })
	return append(members, appOwner)
}

// analyzeRestored analyzes the tables the restore role may analyze (all
// it restored) as that role: ANALYZE runs index expressions and the
// functions of extended statistics. The catalogs keep initdb's statistics.
func (m *Manager) analyzeRestored(ctx context.Context, database string, restore *restoreLogin) error {
	cfg, err := m.localConfig(restoreRole, restore.password)
	if err != nil {
		return err
	}
	cfg.Database = database
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("while connecting to %s as %s to analyze it: %w", database, restoreRole, err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(ctx, `SELECT pg_catalog.format('%I.%I', n.nspname, c.relname)
  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'm', 'p') AND n.nspname <> 'information_schema' AND n.nspname !~ '^pg_'
   AND pg_catalog.pg_has_role(c.relowner, 'USAGE') ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("while listing the tables of %s to analyze: %w", database, err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("while listing the tables of %s to analyze: %w", database, err)
	}
	if len(tables) == 0 {
		return nil
	}
	// Each table is analyzed in a transaction of its own.
	if _, err := conn.Exec(ctx, "ANALYZE "+strings.Join(tables, ", ")); err != nil {
		return fmt.Errorf("while analyzing %s: %w", database, err)
	}
	return nil
}

// rolesDigestQuery digests what a database's restore must not change: the
// roles (with their password verifiers), memberships, role settings, and
// the databases' owners, rights and limits.
const rolesDigestQuery = `SELECT pg_catalog.md5(pg_catalog.string_agg(x, E'\n' ORDER BY x)) FROM (
  SELECT 'role ' || a::text AS x FROM pg_catalog.pg_authid a
  UNION ALL SELECT 'member ' || m::text FROM pg_catalog.pg_auth_members m
  UNION ALL SELECT 'setting ' || s::text FROM pg_catalog.pg_db_role_setting s
  UNION ALL SELECT 'database ' || pg_catalog.concat_ws(' ', d.oid, d.datname, d.datdba, d.datallowconn, d.datconnlimit, d.datacl)
    FROM pg_catalog.pg_database d
) shared`

func rolesDigest(ctx context.Context, local *pgx.Conn) (string, error) {
	var digest string
	if err := local.QueryRow(ctx, rolesDigestQuery).Scan(&digest); err != nil {
		return "", fmt.Errorf("while reading the new cluster's roles: %w", err)
	}
	return digest, nil
}

// handOverRestoredObjects gives what the restore role still owns in a
// database (its extensions; every object when the owners were not kept)
// to the database's owner, and drops its privileges there, so that the
// role can go.
func (m *Manager) handOverRestoredObjects(ctx context.Context, database, owner string) error {
	conn, err := m.connectDatabase(ctx, database)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	for _, s := range []string{
		fmt.Sprintf("REASSIGN OWNED BY %s TO %s", ident(restoreRole), ident(owner)),
		"DROP OWNED BY " + ident(restoreRole),
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("while handing the restored objects of %s to %s (%s): %w", database, owner, firstWords(s, 3), err)
		}
	}
	return nil
}

// sourceDatabaseObjects is what the import checks in a source database
// before it copies it.
type sourceDatabaseObjects struct {
	eventTriggers []string
	extensions    []string
	// wholePublications publish every table, or every table of a schema:
	// only a superuser may create them.
	wholePublications []string
	// owners are the roles owning what pg_dump copies; schemaGuests those
	// of them owning objects in a schema by a grant (sourceOwnersQuery).
	owners, schemaGuests []string
}

// firstNormalObjectID is PostgreSQL's FirstNormalObjectId: objects below it
// come with initdb, and pg_dump leaves them out.
const firstNormalObjectID = 16384

// pgDatabaseOwnerID is pg_database_owner's OID, the public schema's owner
// from PostgreSQL 15 on (pg_dump then leaves its owner out).
const pgDatabaseOwnerID = 6171

// ownedCatalogs are the catalogs of the objects pg_dump copies with an
// owner, their owner and schema columns, and which of their rows are such
// objects (besides being the database's own, not initdb's nor an
// extension's): a table's indexes, TOAST table, row type and array type
// follow it.
var ownedCatalogs = []struct{ catalog, owner, schema, which string }{
	{"pg_namespace", "nspowner", "", "o.nspname !~ '^pg_'"},
	{"pg_class", "relowner", "relnamespace", "o.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') AND o.relpersistence <> 't'"},
	{"pg_proc", "proowner", "pronamespace", ""},
	{"pg_type", "typowner", "typnamespace", "o.typtype IN ('b', 'd', 'e', 'r') AND o.typcategory <> 'A'"},
	{"pg_operator", "oprowner", "oprnamespace", ""}, {"pg_opclass", "opcowner", "opcnamespace", ""},
	{"pg_opfamily", "opfowner", "opfnamespace", ""}, {"pg_collation", "collowner", "collnamespace", ""},
	{"pg_conversion", "conowner", "connamespace", ""}, {"pg_ts_dict", "dictowner", "dictnamespace", ""},
	{"pg_ts_config", "cfgowner", "cfgnamespace", ""}, {"pg_statistic_ext", "stxowner", "stxnamespace", ""},
	{"pg_language", "lanowner", "", ""}, {"pg_foreign_data_wrapper", "fdwowner", "", ""},
	{"pg_foreign_server", "srvowner", "", ""}, {"pg_publication", "pubowner", "", ""},
	{"pg_largeobject_metadata", "lomowner", "", ""},
}

// sourceOwnersQuery lists the owners of a source database's objects that
// pg_dump copies with their owner, and of the public schema when pg_dump
// names its owner (any but pg_database_owner). With guests, only those
// owning an object in a schema whose owner's rights they lack: they create
// there by a grant, and pg_restore gives an object its owner before it
// restores any grant, which only a superuser may then do.
func sourceOwnersQuery(guests bool) string {
	parts := make([]string, 0, len(ownedCatalogs))
	for _, c := range ownedCatalogs {
		if guests && c.schema == "" {
			continue
		}
		own := fmt.Sprintf("o.oid >= %d", firstNormalObjectID)
		if c.catalog == "pg_namespace" {
			own = fmt.Sprintf("(%s OR (o.nspname = 'public' AND o.nspowner <> %d))", own, pgDatabaseOwnerID)
		}
		if c.which != "" {
			own += " AND " + c.which
		}
		if guests {
			own += fmt.Sprintf(" AND NOT pg_catalog.pg_has_role(o.%s, (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.oid = o.%s), 'USAGE')", c.owner, c.schema)
		}
		parts = append(parts, fmt.Sprintf(`SELECT o.%s AS owner FROM pg_catalog.%s o WHERE %s
   AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_catalog.%s'::regclass AND d.objid = o.oid AND d.deptype = 'e')`,
			c.owner, c.catalog, own, c.catalog))
	}
	return "SELECT DISTINCT pg_catalog.pg_get_userbyid(owner) FROM (\n" + strings.Join(parts, "\nUNION ALL ") + "\n) owned ORDER BY 1"
}

// readSourceDatabaseObjects reads a source database's event triggers,
// extensions, owners and publications of whole schemas.
func (m *Manager) readSourceDatabaseObjects(ctx context.Context, database, password string, sourceMajor int) (sourceDatabaseObjects, error) {
	var objs sourceDatabaseObjects
	conn, err := m.connectSource(ctx, database, password)
	if err != nil {
		return objs, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	for _, q := range []struct {
		sql  string
		into *[]string
	}{
		{"SELECT evtname FROM pg_catalog.pg_event_trigger ORDER BY 1", &objs.eventTriggers},
		{fmt.Sprintf("SELECT extname FROM pg_catalog.pg_extension WHERE oid >= %d ORDER BY 1", firstNormalObjectID), &objs.extensions},
		{sourceOwnersQuery(false), &objs.owners},
		{sourceOwnersQuery(true), &objs.schemaGuests},
		{wholePublicationsQuery(sourceMajor), &objs.wholePublications},
	} {
		rows, err := conn.Query(ctx, q.sql)
		if err == nil {
			*q.into, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			return objs, fmt.Errorf("while reading the objects of the import source's database %s: %w", database, err)
		}
	}
	return objs, nil
}

// wholePublicationsQuery lists the publications FOR ALL TABLES, and FOR
// TABLES IN SCHEMA on a source of PostgreSQL 15 or later.
func wholePublicationsQuery(sourceMajor int) string {
	q := "SELECT p.pubname FROM pg_catalog.pg_publication p WHERE p.puballtables"
	if sourceMajor >= 15 {
		q += " OR EXISTS (SELECT FROM pg_catalog.pg_publication_namespace n WHERE n.pnpubid = p.oid)"
	}
	return q + " ORDER BY 1"
}

// untrustedExtensions are those of names this cluster has but only a
// superuser may create (their default version is not marked trusted).
// An extension the image lacks is left to pg_restore, which names it.
func untrustedExtensions(ctx context.Context, local *pgx.Conn, names []string) ([]string, error) {
	rows, err := local.Query(ctx, `SELECT e.name FROM pg_catalog.pg_available_extensions e
  JOIN pg_catalog.pg_available_extension_versions v ON v.name = e.name AND v.version = e.default_version
 WHERE e.name = ANY($1) AND NOT v.trusted ORDER BY 1`, names)
	if err != nil {
		return nil, fmt.Errorf("while checking which extensions are trusted: %w", err)
	}
	untrusted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("while checking which extensions are trusted: %w", err)
	}
	return untrusted, nil
}

// refuseUnsafeObjects says why a source database cannot be imported as it
// is: its event triggers would run as whoever changes the schema later,
// Tusk's superuser too; an untrusted extension, and a publication of all
// tables (which a dump keeps), need a superuser to create them. They are
// refused rather than skipped: the copy would not be the application's
// database without them, and the user decides.
func refuseUnsafeObjects(database string, objs sourceDatabaseObjects, untrusted []string, keepsPublications bool) error {
	var why []string
	if len(objs.eventTriggers) > 0 {
		why = append(why, fmt.Sprintf("the event trigger%s %s (it would run as whoever changes the schema, Tusk's superuser too)",
			plural(objs.eventTriggers), strings.Join(objs.eventTriggers, ", ")))
	}
	if len(untrusted) > 0 {
		why = append(why, fmt.Sprintf("the extension%s %s (not marked trusted, so only a superuser may create %s)",
			plural(untrusted), strings.Join(untrusted, ", "), pronoun(untrusted)))
	}
	if keepsPublications && len(objs.wholePublications) > 0 {
		why = append(why, fmt.Sprintf("the publication%s %s (of all tables or of a schema, so only a superuser may create %s; method logical leaves publications out)",
			plural(objs.wholePublications), strings.Join(objs.wholePublications, ", "), pronoun(objs.wholePublications)))
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("the import source's database %s has %s; the import restores as a role that is no superuser, "+
		"so that nothing of the source runs as one: drop what is named here on the source to import the database",
		database, strings.Join(why, " and "))
}

func pronoun(s []string) string {
	if len(s) > 1 {
		return "them"
	}
	return "it"
}

func plural(s []string) string {
	if len(s) > 1 {
		return "s"
	}
	return ""
}

// ownersNotKept are the owners of a source database's objects that the
// restore cannot give their objects to: roles the restore role may not act
// as (the source's superuser, Tusk's roles, CREATEROLE ones), and roles
// that create in a schema by a grant pg_restore has not restored yet. With
// any, the restore leaves the owners out and the database's owner gets
// every object.
func ownersNotKept(objs sourceDatabaseObjects, carried map[string]bool) []string {
	notKept := slices.DeleteFunc(slices.Clone(objs.owners), func(o string) bool { return carried[o] })
	for _, g := range objs.schemaGuests {
		if !slices.Contains(notKept, g) {
			notKept = append(notKept, g)
		}
	}
	slices.Sort(notKept)
	return notKept
}

// restoreArgs are pg_restore's arguments for a database.
func restoreArgs(database string, keepOwners bool) []string {
	args := []string{"--exit-on-error", "--no-tablespaces", "--dbname=" + database}
	if !keepOwners {
		args = append(args, "--no-owner")
	}
	return args
}
