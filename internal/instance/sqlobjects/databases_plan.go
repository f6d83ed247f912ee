package sqlobjects

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"tusk.dev/tusk/internal/instanceapi"
)

// reservedDatabases are PostgreSQL's own databases: no managed database
// may create, change or drop them.
var reservedDatabases = []string{"postgres", "template0", "template1"}

// sqlStep is one statement of a plan: its SQL, the Info line logged as it
// runs and the sentence ApplyResult.Changes reports.
type sqlStep struct {
	sql    string
	action string // "Creating database", logged with kv
	kv     []any
	change string // "created database app"
	// defaultSearchPath runs the statement with search_path public
	// instead of the manager's pinned pg_catalog: CREATE EXTENSION without
	// a schema creates the extension in the first schema of the
	// search_path. Not PostgreSQL's default ("$user", public): for the
	// superuser's session "$user" is a schema named postgres, which any
	// role that may create schemas could make.
	defaultSearchPath bool
}

// serverObservation is what the catalogs shared by all databases say of a
// DatabaseRequest, read in the postgres database.
type serverObservation struct {
	// database is the database's row; nil when it does not exist.
	database *observedDatabase
	// sessions counts the database's sessions (pg_stat_activity).
	sessions int
	// roles are the request's owner roles that exist.
	roles map[string]bool
	// templateExists: the request's template database exists.
	templateExists bool
	// available is the image's extensions (pg_available_extensions), by
	// name, each with its installable versions.
	available map[string][]string
}

type observedDatabase struct {
	owner           string
	connectionLimit int32
}

// databaseObservation is what a database's own catalogs say of the
// request's extensions and schemas, read in that database.
type databaseObservation struct {
	owner      string
	extensions map[string]observedExtension
	schemas    map[string]observedSchema
	// installable are the request's extensions as the image has them
	// (pg_available_extension_versions), by name.
	installable map[string]installableExtension
}

// installableExtension is what the image says of an extension: its
// default version and the versions PostgreSQL marks trusted.
type installableExtension struct {
	defaultVersion string
	trusted        []string
}

type observedExtension struct {
	version string
	schema  string
}

type observedSchema struct {
	owner string
	// objects counts what the schema holds that belongs to no extension
	// (the extensions in it are counted from databaseObservation).
	objects int
}

func absent(e instanceapi.Ensure) bool { return e == instanceapi.EnsureAbsent }

// validateDatabaseRequest refuses what no catalog can make right: a
// reserved or empty name, an unknown Ensure, names listed twice.
func validateDatabaseRequest(req instanceapi.DatabaseRequest) error {
	if req.Name == "" {
		return refuse("the database has no name")
	}
	if slices.Contains(reservedDatabases, req.Name) {
		return refuse("database %s is PostgreSQL's own: it cannot be managed", req.Name)
	}
	ensures := []instanceapi.Ensure{req.Ensure}
	seen := map[string]bool{}
	for _, e := range req.Extensions {
		if e.Name == "" || seen["e"+e.Name] {
			return refuse("extension %q is listed twice or has no name", e.Name)
		}
		if strings.HasPrefix(e.Schema, "pg_") || e.Schema == "information_schema" {
			// Objects put among PostgreSQL's own would shadow them for every role.
			return refuse("extension %s cannot go to schema %s, which is PostgreSQL's own", e.Name, e.Schema)
		}
		seen["e"+e.Name] = true
		ensures = append(ensures, e.Ensure)
	}
	for _, s := range req.Schemas {
		if s.Name == "" || seen["s"+s.Name] {
			return refuse("schema %q is listed twice or has no name", s.Name)
		}
		if strings.HasPrefix(s.Name, "pg_") || s.Name == "information_schema" {
			return refuse("schema %s is PostgreSQL's own: it cannot be managed", s.Name)
		}
		seen["s"+s.Name] = true
		ensures = append(ensures, s.Ensure)
	}
	for _, e := range ensures {
		if e != "" && e != instanceapi.EnsurePresent && e != instanceapi.EnsureAbsent {
			return refuse("ensure %q is neither %q nor %q", e, instanceapi.EnsurePresent, instanceapi.EnsureAbsent)
		}
	}
	return nil
}

// planServer plans the statements run alone in the postgres database:
// creating, altering or dropping the database. It refuses, before any
// change, what the shared catalogs show cannot be applied.
func planServer(req instanceapi.DatabaseRequest, obs serverObservation) ([]sqlStep, error) {
	if err := validateDatabaseRequest(req); err != nil {
		return nil, err
	}
	if absent(req.Ensure) {
		return planDrop(req, obs)
	}
	if err := checkDependencies(req, obs); err != nil {
		return nil, err
	}
	if obs.database == nil {
		return []sqlStep{createDatabase(req)}, nil
	}
	return alterDatabase(req, *obs.database), nil
}

func planDrop(req instanceapi.DatabaseRequest, obs serverObservation) ([]sqlStep, error) {
	if obs.database == nil {
		return nil, nil
	}
	sql := "DROP DATABASE " + Ident(req.Name)
	if obs.sessions > 0 {
		if !req.ForceDrop {
			return nil, refuse("database %s has %d open sessions; forceDrop ends them", req.Name, obs.sessions)
		}
		sql += " WITH (FORCE)"
	}
	return []sqlStep{{sql: sql, action: "Dropping database", kv: []any{"database", req.Name, "sessions", obs.sessions},
		change: "dropped database " + req.Name}}, nil
}

// checkDependencies refuses a request whose owners, template or
// extensions this server lacks.
func checkDependencies(req instanceapi.DatabaseRequest, obs serverObservation) error {
	if req.Owner != "" && !obs.roles[req.Owner] {
		return refuse("owner role %s does not exist", req.Owner)
	}
	if obs.database == nil && req.Template != "" && !obs.templateExists {
		return refuse("template database %s does not exist", req.Template)
	}
	for _, s := range req.Schemas {
		if !absent(s.Ensure) && s.Owner != "" && !obs.roles[s.Owner] {
			return refuse("owner role %s of schema %s does not exist", s.Owner, s.Name)
		}
	}
	for _, e := range req.Extensions {
		if absent(e.Ensure) {
			continue
		}
		versions, ok := obs.available[e.Name]
		if !ok {
			return refuse("extension %s is not available in this image (no control file)", e.Name)
		}
		if e.Version != "" && !slices.Contains(versions, e.Version) {
			return refuse("extension %s version %s is not available in this image (no script for it; available: %s)",
				e.Name, e.Version, strings.Join(versions, ", "))
		}
		if obs.database == nil && e.Schema != "" && !schemaInNewDatabase(e.Schema, req) {
			// Refused before CREATE DATABASE, not after it, half applied.
			return refuse("schema %s of extension %s does not exist; list it among the schemas", e.Schema, e.Name)
		}
	}
	return nil
}

// schemaInNewDatabase says whether a database created from req will have
// the schema: one req makes, or public from PostgreSQL's own templates (a
// template of the user's may hold any).
func schemaInNewDatabase(name string, req instanceapi.DatabaseRequest) bool {
	if req.Template != "" && req.Template != "template0" && req.Template != "template1" {
		return true
	}
	return name == "public" || schemaWillExist(name, req, databaseObservation{})
}

// ownerNames are the roles a request names as owners, for observation.
func ownerNames(req instanceapi.DatabaseRequest) []string {
	var names []string
	if req.Owner != "" {
		names = append(names, req.Owner)
	}
	for _, s := range req.Schemas {
		if s.Owner != "" {
			names = append(names, s.Owner)
		}
	}
	return names
}

func connectionLimit(limit *int32) int32 {
	if limit == nil {
		return -1
	}
	return *limit
}

func createDatabase(req instanceapi.DatabaseRequest) sqlStep {
	sql := "CREATE DATABASE " + Ident(req.Name)
	if req.Owner != "" {
		sql += " OWNER " + Ident(req.Owner)
	}
	if req.Encoding != "" {
		sql += " ENCODING " + Literal(req.Encoding)
	}
	if req.Locale != "" {
		sql += " LOCALE " + Literal(req.Locale)
	}
	if req.Template != "" {
		sql += " TEMPLATE " + Ident(req.Template)
	}
	if limit := connectionLimit(req.ConnectionLimit); limit != -1 {
		sql += " CONNECTION LIMIT " + strconv.Itoa(int(limit))
	}
	return sqlStep{sql: sql, action: "Creating database", kv: []any{"database", req.Name, "owner", req.Owner},
		change: "created database " + req.Name}
}

// alterDatabase closes the difference in what can change after creation:
// the owner and the connection limit. Encoding, locale and template apply
// at creation only.
func alterDatabase(req instanceapi.DatabaseRequest, db observedDatabase) []sqlStep {
	var steps []sqlStep
	name := Ident(req.Name)
	if req.Owner != "" && req.Owner != db.owner {
		steps = append(steps, sqlStep{sql: "ALTER DATABASE " + name + " OWNER TO " + Ident(req.Owner),
			action: "Changing the database owner", kv: []any{"database", req.Name, "owner", req.Owner, "was", db.owner},
			change: fmt.Sprintf("set owner of database %s to %s", req.Name, req.Owner)})
	}
	if limit := connectionLimit(req.ConnectionLimit); limit != db.connectionLimit {
		steps = append(steps, sqlStep{sql: fmt.Sprintf("ALTER DATABASE %s CONNECTION LIMIT %d", name, limit),
			action: "Changing the database connection limit", kv: []any{"database", req.Name, "limit", limit, "was", db.connectionLimit},
			change: fmt.Sprintf("set connection limit of database %s to %d", req.Name, limit)})
	}
	return steps
}

// schemaNames are the schemas a request names, its extensions' included,
// for observation.
func schemaNames(req instanceapi.DatabaseRequest) []string {
	var names []string
	for _, s := range req.Schemas {
		names = append(names, s.Name)
	}
	for _, e := range req.Extensions {
		if e.Schema != "" && !slices.Contains(names, e.Schema) {
			names = append(names, e.Schema)
		}
	}
	return names
}

// planInDatabase plans the statements run in the database, in one
// transaction: schemas created or given their owner, then extensions
// created, updated or moved, then extensions dropped, then schemas
// dropped. It refuses the drop of a schema that still holds anything and
// an extension whose schema will not exist.
func planInDatabase(req instanceapi.DatabaseRequest, obs databaseObservation) ([]sqlStep, error) {
	dbOwner := req.Owner
	if dbOwner == "" {
		dbOwner = obs.owner
	}
	var schemas, drops []sqlStep
	for _, s := range req.Schemas {
		if !absent(s.Ensure) {
			schemas = append(schemas, planSchema(s, dbOwner, obs)...)
		}
	}
	extensions, extDrops, err := planExtensions(req, obs)
	if err != nil {
		return nil, err
	}
	for _, s := range req.Schemas {
		if !absent(s.Ensure) {
			continue
		}
		step, err := dropSchema(s.Name, req, obs)
		if err != nil {
			return nil, err
		}
		drops = append(drops, step...)
	}
	return slices.Concat(schemas, extensions, extDrops, drops), nil
}

func planSchema(s instanceapi.SchemaRequest, dbOwner string, obs databaseObservation) []sqlStep {
	owner := s.Owner
	if owner == "" {
		owner = dbOwner
	}
	seen, ok := obs.schemas[s.Name]
	if !ok {
		return []sqlStep{{sql: "CREATE SCHEMA " + Ident(s.Name) + " AUTHORIZATION " + Ident(owner),
			action: "Creating schema", kv: []any{"schema", s.Name, "owner", owner},
			change: fmt.Sprintf("created schema %s owned by %s", s.Name, owner)}}
	}
	if seen.owner == owner {
		return nil
	}
	return []sqlStep{{sql: "ALTER SCHEMA " + Ident(s.Name) + " OWNER TO " + Ident(owner),
		action: "Changing the schema owner", kv: []any{"schema", s.Name, "owner", owner, "was", seen.owner},
		change: fmt.Sprintf("set owner of schema %s to %s", s.Name, owner)}}
}

// planExtensions returns the statements that create, update or move the
// present extensions, and those that drop the absent ones.
func planExtensions(req instanceapi.DatabaseRequest, obs databaseObservation) (changes, drops []sqlStep, err error) {
	for _, e := range req.Extensions {
		seen, exists := obs.extensions[e.Name]
		switch {
		case absent(e.Ensure):
			if exists {
				drops = append(drops, sqlStep{sql: "DROP EXTENSION " + Ident(e.Name),
					action: "Dropping extension", kv: []any{"extension", e.Name},
					change: "dropped extension " + e.Name})
			}
		case e.Schema != "" && !schemaWillExist(e.Schema, req, obs):
			return nil, nil, refuse("schema %s of extension %s does not exist; list it among the schemas", e.Schema, e.Name)
		case !exists:
			if err := checkTrusted(e.Name, e.Version, req, obs); err != nil {
				return nil, nil, err
			}
			changes = append(changes, createExtension(e))
		default:
			if e.Version != "" && e.Version != seen.version {
				if err := checkTrusted(e.Name, e.Version, req, obs); err != nil {
					return nil, nil, err
				}
			}
			changes = append(changes, alterExtension(e, seen)...)
		}
	}
	return changes, drops, nil
}

// checkTrusted refuses to run the script of an extension version that
// PostgreSQL does not mark trusted (version "": the default one), unless
// the request allows untrusted extensions. Its script runs as the
// superuser: a trusted one is written to be safe in schemas other roles
// may write, an untrusted one is not, and may hand roles that are no
// superusers the server's files or programs.
func checkTrusted(name, version string, req instanceapi.DatabaseRequest, obs databaseObservation) error {
	if req.AllowUntrustedExtensions {
		return nil
	}
	inst := obs.installable[name]
	if version == "" {
		version = inst.defaultVersion
	}
	if slices.Contains(inst.trusted, version) {
		return nil
	}
	return refuse("extension %s version %s is not trusted by PostgreSQL: its script, run as the superuser, could hand the server's files, "+
		"programs or superuser rights to other roles; set spec.allowUntrustedExtensions on the cluster to allow it", name, version)
}

func schemaWillExist(name string, req instanceapi.DatabaseRequest, obs databaseObservation) bool {
	for _, s := range req.Schemas {
		if s.Name == name {
			return !absent(s.Ensure)
		}
	}
	_, ok := obs.schemas[name]
	return ok
}

func createExtension(e instanceapi.ExtensionRequest) sqlStep {
	sql, change := "CREATE EXTENSION "+Ident(e.Name), "created extension "+e.Name
	if e.Schema != "" {
		sql += " WITH SCHEMA " + Ident(e.Schema)
		change += " in schema " + e.Schema
	}
	if e.Version != "" {
		sql += " VERSION " + Literal(e.Version)
		change += " version " + e.Version
	}
	return sqlStep{sql: sql, action: "Creating extension", kv: []any{"extension", e.Name, "version", e.Version, "schema", e.Schema},
		change: change, defaultSearchPath: e.Schema == ""}
}

func alterExtension(e instanceapi.ExtensionRequest, seen observedExtension) []sqlStep {
	var steps []sqlStep
	if e.Version != "" && e.Version != seen.version {
		steps = append(steps, sqlStep{sql: "ALTER EXTENSION " + Ident(e.Name) + " UPDATE TO " + Literal(e.Version),
			action: "Updating extension", kv: []any{"extension", e.Name, "version", e.Version, "was", seen.version},
			change: fmt.Sprintf("updated extension %s from version %s to %s", e.Name, seen.version, e.Version)})
	}
	if e.Schema != "" && e.Schema != seen.schema {
		steps = append(steps, sqlStep{sql: "ALTER EXTENSION " + Ident(e.Name) + " SET SCHEMA " + Ident(e.Schema),
			action: "Moving extension", kv: []any{"extension", e.Name, "schema", e.Schema, "was", seen.schema},
			change: fmt.Sprintf("moved extension %s from schema %s to %s", e.Name, seen.schema, e.Schema)})
	}
	return steps
}

// dropSchema drops a schema that holds nothing once the request's
// extensions are dropped or moved; never with CASCADE.
func dropSchema(name string, req instanceapi.DatabaseRequest, obs databaseObservation) ([]sqlStep, error) {
	seen, ok := obs.schemas[name]
	if !ok {
		return nil, nil
	}
	held := seen.objects
	for ext, e := range obs.extensions {
		if e.schema == name && !extensionLeaves(ext, name, req) {
			held++
		}
	}
	if held > 0 {
		return nil, refuse("schema %s holds %d objects; drop or move them first (a managed schema is never dropped with CASCADE)", name, held)
	}
	return []sqlStep{{sql: "DROP SCHEMA " + Ident(name), action: "Dropping schema", kv: []any{"schema", name},
		change: "dropped schema " + name}}, nil
}

// extensionLeaves says whether the request drops extension ext or moves
// it out of schema.
func extensionLeaves(ext, schema string, req instanceapi.DatabaseRequest) bool {
	for _, e := range req.Extensions {
		if e.Name == ext {
			return absent(e.Ensure) || (e.Schema != "" && e.Schema != schema)
		}
	}
	return false
}
