package sqlobjects

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
)

// ApplyDatabase makes one database, its extensions and its schemas what
// req says (PostgresDatabase), over the local socket as the superuser.
// It observes the catalogs, plans the statements that close the
// difference (planServer, planInDatabase) and runs them: the database's
// own statement alone (CREATE DATABASE cannot run in a transaction), the
// extensions' and schemas' in one transaction in that database. What the
// catalogs show cannot be applied is refused before any change.
func (o *Objects) ApplyDatabase(ctx context.Context, req instanceapi.DatabaseRequest) (instanceapi.ApplyResult, error) {
	if err := validateDatabaseRequest(req); err != nil {
		return instanceapi.ApplyResult{}, err
	}
	conn, err := o.port.ConnectWritable(ctx, "postgres")
	if err != nil {
		return instanceapi.ApplyResult{}, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	obs, err := observeServer(ctx, conn, req)
	if err != nil {
		return instanceapi.ApplyResult{}, err
	}
	plan, err := planServer(req, obs)
	if err != nil {
		return instanceapi.ApplyResult{}, err
	}
	// An existing database is observed inside before any change, so that
	// what it refuses (a schema that holds objects) changes nothing.
	var inside []sqlStep
	if !absent(req.Ensure) && obs.database != nil {
		if inside, err = o.planInside(ctx, req); err != nil {
			return instanceapi.ApplyResult{}, err
		}
	}
	var res instanceapi.ApplyResult
	for _, step := range plan {
		if err := runStep(ctx, o.port.Log, conn, step, &res); err != nil {
			return res, err
		}
	}
	res.Exists = !absent(req.Ensure)
	if !res.Exists {
		return res, nil
	}
	if obs.database == nil { // created: its catalogs come from its template
		if inside, err = o.planInside(ctx, req); err != nil {
			return res, err
		}
	}
	return res, o.applyInside(ctx, req.Name, inside, &res)
}

// observeServer reads the database's row, its sessions (clients and
// WAL senders: DROP DATABASE ends autovacuum workers itself), the roles
// the request names, its template and the image's extensions.
func observeServer(ctx context.Context, conn *pgx.Conn, req instanceapi.DatabaseRequest) (serverObservation, error) {
	obs := serverObservation{roles: map[string]bool{}, available: map[string][]string{}}
	var db observedDatabase
	err := conn.QueryRow(ctx, `SELECT pg_get_userbyid(datdba), datconnlimit FROM pg_database WHERE datname = $1`, req.Name).
		Scan(&db.owner, &db.connectionLimit)
	switch {
	case err == nil:
		obs.database = &db
	case !errors.Is(err, pgx.ErrNoRows):
		return obs, classifyPostgresError(fmt.Errorf("while reading database %s: %w", req.Name, err))
	}
	err = conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()
			AND backend_type IN ('client backend', 'walsender')),
		EXISTS (SELECT FROM pg_database WHERE datname = $2)`, req.Name, req.Template).
		Scan(&obs.sessions, &obs.templateExists)
	if err != nil {
		return obs, classifyPostgresError(fmt.Errorf("while reading the sessions of database %s: %w", req.Name, err))
	}
	rows, err := conn.Query(ctx, `SELECT rolname FROM pg_roles WHERE rolname = ANY($1)`, ownerNames(req))
	var roles []string
	if err == nil {
		roles, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return obs, classifyPostgresError(fmt.Errorf("while reading the owner roles: %w", err))
	}
	for _, r := range roles {
		obs.roles[r] = true
	}
	var names []string
	for _, e := range req.Extensions {
		names = append(names, e.Name)
	}
	rows, err = conn.Query(ctx, `SELECT a.name, coalesce(array_agg(v.version ORDER BY v.version) FILTER (WHERE v.version IS NOT NULL), '{}')
		FROM pg_available_extensions a LEFT JOIN pg_available_extension_versions v ON v.name = a.name
		WHERE a.name = ANY($1) GROUP BY a.name`, names)
	if err == nil {
		err = collectVersions(rows, obs.available)
	}
	if err != nil {
		return obs, classifyPostgresError(fmt.Errorf("while reading the available extensions: %w", err))
	}
	return obs, nil
}

func collectVersions(rows pgx.Rows, into map[string][]string) error {
	var name string
	var versions []string
	_, err := pgx.ForEachRow(rows, []any{&name, &versions}, func() error {
		into[name] = versions
		return nil
	})
	return err
}

// planInside observes the database's extensions and schemas in a session
// of its own and plans what closes the difference.
func (o *Objects) planInside(ctx context.Context, req instanceapi.DatabaseRequest) ([]sqlStep, error) {
	if len(req.Extensions) == 0 && len(req.Schemas) == 0 {
		return nil, nil
	}
	conn, err := o.port.ConnectWritable(ctx, req.Name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	obs, err := observeInside(ctx, conn, req)
	if err != nil {
		return nil, err
	}
	return planInDatabase(req, obs)
}

// observeInside reads, in the database, its owner, its extensions, and
// the schemas the request names with what each holds outside extensions:
// every object in a schema depends on it (pg_depend, deptype 'n'); an
// extension's members depend on their extension too (deptype 'e').
func observeInside(ctx context.Context, conn *pgx.Conn, req instanceapi.DatabaseRequest) (databaseObservation, error) {
	obs := databaseObservation{extensions: map[string]observedExtension{}, schemas: map[string]observedSchema{},
		installable: map[string]installableExtension{}}
	if err := conn.QueryRow(ctx, `SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()`).
		Scan(&obs.owner); err != nil {
		return obs, classifyPostgresError(fmt.Errorf("while reading the database's owner: %w", err))
	}
	var name string
	var ext observedExtension
	rows, err := conn.Query(ctx, `SELECT e.extname, e.extversion, n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace`)
	if err == nil {
		_, err = pgx.ForEachRow(rows, []any{&name, &ext.version, &ext.schema}, func() error {
			obs.extensions[name] = ext
			return nil
		})
	}
	if err != nil {
		return obs, classifyPostgresError(fmt.Errorf("while reading the extensions: %w", err))
	}
	if err := observeInstallable(ctx, conn, req, obs.installable); err != nil {
		return obs, err
	}
	var schema observedSchema
	rows, err = conn.Query(ctx, `SELECT n.nspname, pg_get_userbyid(n.nspowner),
		(SELECT count(*) FROM pg_depend d WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjid = n.oid
			AND d.deptype = 'n' AND d.classid <> 'pg_extension'::regclass
			AND NOT EXISTS (SELECT FROM pg_depend x WHERE x.classid = d.classid AND x.objid = d.objid AND x.deptype = 'e'))
		FROM pg_namespace n WHERE n.nspname = ANY($1)`, schemaNames(req))
	if err == nil {
		_, err = pgx.ForEachRow(rows, []any{&name, &schema.owner, &schema.objects}, func() error {
			obs.schemas[name] = schema
			return nil
		})
	}
	if err != nil {
		return obs, classifyPostgresError(fmt.Errorf("while reading the schemas: %w", err))
	}
	return obs, nil
}

// observeInstallable reads the default and the trusted versions of the
// request's extensions (pg_available_extension_versions.trusted, from
// PostgreSQL 13).
func observeInstallable(ctx context.Context, conn *pgx.Conn, req instanceapi.DatabaseRequest, into map[string]installableExtension) error {
	var names []string
	for _, e := range req.Extensions {
		names = append(names, e.Name)
	}
	rows, err := conn.Query(ctx, `SELECT a.name, coalesce(a.default_version, ''),
		coalesce(array_agg(v.version ORDER BY v.version) FILTER (WHERE v.trusted), '{}')
		FROM pg_available_extensions a LEFT JOIN pg_available_extension_versions v ON v.name = a.name
		WHERE a.name = ANY($1) GROUP BY a.name, a.default_version`, names)
	if err == nil {
		var name string
		var inst installableExtension
		_, err = pgx.ForEachRow(rows, []any{&name, &inst.defaultVersion, &inst.trusted}, func() error {
			into[name] = inst
			return nil
		})
	}
	if err != nil {
		return classifyPostgresError(fmt.Errorf("while reading which extensions are trusted: %w", err))
	}
	return nil
}

// applyInside runs the database's own statements in one transaction.
func (o *Objects) applyInside(ctx context.Context, database string, steps []sqlStep, res *instanceapi.ApplyResult) error {
	if len(steps) == 0 {
		return nil
	}
	conn, err := o.port.ConnectWritable(ctx, database)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var done instanceapi.ApplyResult
	log := o.port.Log.WithValues("database", database)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, step := range steps {
			if err := runStep(ctx, log, tx.Conn(), step, &done); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return classifyPostgresError(fmt.Errorf("while changing the extensions and schemas of database %s (rolled back): %w", database, err))
	}
	res.Statements += done.Statements
	res.Changes = append(res.Changes, done.Changes...)
	return nil
}

// runStep logs and runs one planned statement and records its change.
func runStep(ctx context.Context, log logr.Logger, conn *pgx.Conn, step sqlStep, res *instanceapi.ApplyResult) error {
	log.Info(step.action, step.kv...)
	sql := step.sql
	if step.defaultSearchPath {
		// In the statement's transaction only (sqlStep.defaultSearchPath).
		sql = `SET LOCAL search_path = public; ` + sql + `; SET LOCAL search_path = pg_catalog`
	}
	if _, err := conn.Exec(ctx, sql); err != nil {
		return classifyPostgresError(fmt.Errorf("while running %s: %w", step.sql, err))
	}
	res.Statements++
	res.Changes = append(res.Changes, step.change)
	return nil
}
