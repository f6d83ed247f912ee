package sqlobjects

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"tusk.dev/tusk/internal/instanceapi"
)

// Declarative logical replication: the operator PUTs the desired state of
// one publication or subscription, the primary's manager compares it with
// the catalogs and issues only the statements that close the difference
// (see instanceapi.PublicationRequest and SubscriptionRequest).

// logicalStep is one statement of a plan: its SQL, and what it changes in
// words for the reply and the log (never a secret: a subscription's SQL
// holds its connection string, password included).
type logicalStep struct {
	sql    string
	change string
}

// qualifiedTable is a table of a publication, schema and name apart.
type qualifiedTable struct {
	schema, name string
}

func (t qualifiedTable) String() string { return t.schema + "." + t.name }

func (t qualifiedTable) sql() string { return pgx.Identifier{t.schema, t.name}.Sanitize() }

// parseTable reads "schema.table" or "table" (in public).
func parseTable(s string) (qualifiedTable, error) {
	schema, name, found := strings.Cut(s, ".")
	if !found {
		schema, name = "public", s
	}
	if schema == "" || name == "" || strings.Contains(name, ".") {
		return qualifiedTable{}, fmt.Errorf("table %q is neither \"schema.table\" nor \"table\"", s)
	}
	return qualifiedTable{schema: schema, name: name}, nil
}

// parseTables reads a request's tables, sorted and without duplicates.
func parseTables(in []string) ([]qualifiedTable, error) {
	tables := make([]qualifiedTable, 0, len(in))
	for _, s := range in {
		t, err := parseTable(s)
		if err != nil {
			return nil, err
		}
		tables = append(tables, t)
	}
	slices.SortFunc(tables, func(a, b qualifiedTable) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(tables), nil
}

// publicationState is a publication as the catalogs have it.
type publicationState struct {
	exists    bool
	allTables bool
	tables    []qualifiedTable // sorted
	// schemas: the publication has schemas (FOR TABLES IN SCHEMA), which
	// requests never ask for.
	schemas bool
}

// planPublication lists the statements that make current what req asks;
// tables are req's, parsed (parseTables).
func planPublication(req instanceapi.PublicationRequest, tables []qualifiedTable, current publicationState) []logicalStep {
	name := Ident(req.Name)
	drop := logicalStep{sql: "DROP PUBLICATION " + name, change: "dropped publication " + req.Name}
	if req.Ensure == instanceapi.EnsureAbsent {
		if current.exists {
			return []logicalStep{drop}
		}
		return nil
	}
	create := logicalStep{sql: "CREATE PUBLICATION " + name + " FOR ALL TABLES",
		change: "created publication " + req.Name + " for all tables"}
	if !req.AllTables {
		create = logicalStep{sql: "CREATE PUBLICATION " + name + " FOR" + publicationTablesSQL(tables),
			change: "created publication " + req.Name + " for " + tableList(tables)}
	}
	switch {
	case !current.exists:
		return []logicalStep{create}
	case current.allTables != req.AllTables:
		return []logicalStep{drop, create}
	case req.AllTables || (slices.Equal(current.tables, tables) && !current.schemas):
		return nil
	}
	return []logicalStep{{sql: "ALTER PUBLICATION " + name + " SET" + publicationTablesSQL(tables),
		change: "set the tables of publication " + req.Name + " to " + tableList(tables)}}
}

// publicationTablesSQL is " TABLE a, b", after FOR (CREATE) or SET
// (ALTER); validatePublication refuses an empty list.
func publicationTablesSQL(tables []qualifiedTable) string {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.sql()
	}
	return " TABLE " + strings.Join(names, ", ")
}

func tableList(tables []qualifiedTable) string {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.String()
	}
	return strings.Join(names, ", ")
}

// ApplyPublication makes the publication req names what it asks, in its
// database: created, its tables set exactly, or dropped.
func (o *Objects) ApplyPublication(ctx context.Context, req instanceapi.PublicationRequest) (instanceapi.ApplyResult, error) {
	if err := validatePublication(req); err != nil {
		return instanceapi.ApplyResult{}, err
	}
	tables, err := parseTables(req.Tables)
	if err != nil {
		return instanceapi.ApplyResult{}, &refusal{reason: err.Error()}
	}
	conn, err := o.port.ConnectWritable(ctx, req.Database)
	if nothingToDrop(req.Ensure, err) {
		return instanceapi.ApplyResult{}, nil
	}
	if err != nil {
		return instanceapi.ApplyResult{}, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if req.Ensure != instanceapi.EnsureAbsent && !req.AllTables {
		if err := checkTables(ctx, conn, tables); err != nil {
			return instanceapi.ApplyResult{}, err
		}
	}
	current, err := queryPublication(ctx, conn, req.Name)
	if err != nil {
		return instanceapi.ApplyResult{}, err
	}
	steps := planPublication(req, tables, current)
	// In one transaction: subscribers never see the publication missing
	// between a drop and its creation.
	var res instanceapi.ApplyResult
	if len(steps) > 0 {
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var stepErr error
			res, stepErr = o.runLogicalSteps(ctx, tx, req.Database, steps, nil)
			return stepErr
		})
	}
	res.Exists = req.Ensure != instanceapi.EnsureAbsent
	if err != nil {
		res.Exists = current.exists
		return res, fmt.Errorf("while applying publication %s: %w", req.Name, err)
	}
	return res, nil
}

func validatePublication(req instanceapi.PublicationRequest) error {
	switch {
	case req.Name == "" || req.Database == "":
		return &refusal{reason: "a publication needs a name and a database"}
	case len(req.Name) > maxIdentifierLength:
		return &refusal{reason: fmt.Sprintf("publication name %q is longer than %d bytes", req.Name, maxIdentifierLength)}
	case req.Ensure != "" && req.Ensure != instanceapi.EnsurePresent && req.Ensure != instanceapi.EnsureAbsent:
		return &refusal{reason: fmt.Sprintf("ensure %q is neither present nor absent", req.Ensure)}
	case req.Ensure == instanceapi.EnsureAbsent:
		return nil
	case req.AllTables && len(req.Tables) > 0:
		return &refusal{reason: fmt.Sprintf("publication %s names tables and all tables: pick one", req.Name)}
	case !req.AllTables && len(req.Tables) == 0:
		return &refusal{reason: fmt.Sprintf("publication %s publishes nothing: name its tables or all tables", req.Name)}
	}
	return nil
}

// checkTables refuses tables that do not exist or are not tables.
func checkTables(ctx context.Context, conn *pgx.Conn, tables []qualifiedTable) error {
	var missing []string
	for _, t := range tables {
		var kind string
		err := conn.QueryRow(ctx, `SELECT c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2`, t.schema, t.name).Scan(&kind)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			missing = append(missing, t.String())
		case err != nil:
			return fmt.Errorf("while looking up table %s: %w", t, err)
		case kind != "r" && kind != "p":
			return &refusal{reason: fmt.Sprintf("%s is not a table: only tables can be published", t)}
		}
	}
	if len(missing) > 0 {
		return &refusal{reason: fmt.Sprintf("table %s does not exist in database %s",
			strings.Join(missing, ", "), conn.Config().Database)}
	}
	return nil
}

func queryPublication(ctx context.Context, conn *pgx.Conn, name string) (publicationState, error) {
	var st publicationState
	err := conn.QueryRow(ctx, `SELECT puballtables FROM pg_publication WHERE pubname = $1`, name).Scan(&st.allTables)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("while reading publication %s: %w", name, err)
	}
	st.exists = true
	if st.allTables {
		return st, nil
	}
	// pg_publication_rel holds the tables as added: pg_publication_tables
	// shows a partitioned table's partitions instead (unless
	// publish_via_partition_root), and would never match the request.
	rows, err := conn.Query(ctx, `SELECT n.nspname::text, c.relname::text FROM pg_publication_rel r
		JOIN pg_class c ON c.oid = r.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_publication p ON p.oid = r.prpubid WHERE p.pubname = $1`, name)
	if err == nil {
		st.tables, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (qualifiedTable, error) {
			var t qualifiedTable
			return t, row.Scan(&t.schema, &t.name)
		})
	}
	if err != nil {
		return st, fmt.Errorf("while reading the tables of publication %s: %w", name, err)
	}
	slices.SortFunc(st.tables, func(a, b qualifiedTable) int { return strings.Compare(a.String(), b.String()) })
	// A schema added by hand (FOR TABLES IN SCHEMA, 15 and later) is a
	// difference too: SET TABLE removes it.
	err = conn.QueryRow(ctx, `SELECT to_regclass('pg_catalog.pg_publication_namespace') IS NOT NULL
		AND EXISTS (SELECT FROM pg_catalog.pg_publication_namespace s JOIN pg_publication p ON p.oid = s.pnpubid
		WHERE p.pubname = $1)`, name).Scan(&st.schemas)
	if err != nil {
		return st, fmt.Errorf("while reading the schemas of publication %s: %w", name, err)
	}
	return st, nil
}

// execer runs a statement: a session or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
}

// runLogicalSteps runs steps in conn (a session's steps each alone,
// outside a transaction block: creating or dropping a subscription's
// replication slot cannot run inside one), logging each change in
// database. explain, when set, rewrites a failed statement's
// error first (a subscription's: its text may hold the connection
// string, and an unreachable publisher is a refusal with what to do).
func (o *Objects) runLogicalSteps(ctx context.Context, conn execer, database string, steps []logicalStep,
	explain func(error) error) (instanceapi.ApplyResult, error) {
	res := instanceapi.ApplyResult{}
	for _, s := range steps {
		o.port.Log.Info(logMessage(s.change), "database", database)
		if _, err := conn.Exec(ctx, s.sql); err != nil {
			if explain != nil {
				err = explain(err)
			}
			return res, classifyPostgresError(err)
		}
		res.Statements++
		res.Changes = append(res.Changes, s.change)
	}
	return res, nil
}

// logMessage turns a change ("created publication p") into an SRE's log
// message ("Creating publication p").
func logMessage(change string) string {
	verb, rest, _ := strings.Cut(change, " ")
	ing, ok := map[string]string{
		"created": "Creating", "dropped": "Dropping", "set": "Setting", "changed": "Changing",
		"enabled": "Enabling", "disabled": "Disabling",
	}[verb]
	if !ok {
		return "Applying: " + change
	}
	return ing + " " + rest
}

// Slots reports the primary's logical replication slots: its
// subscribers', and how much WAL each holds back.
func (o *Objects) Slots(ctx context.Context) (instanceapi.SlotsStatus, error) {
	conn, err := o.port.ConnectWritable(ctx, "postgres")
	if err != nil {
		return instanceapi.SlotsStatus{}, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	st := instanceapi.SlotsStatus{Slots: []instanceapi.Slot{}}
	rows, err := conn.Query(ctx, `SELECT slot_name::text, coalesce(database::text, ''), active,
		coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint, coalesce(wal_status, '')
		FROM pg_replication_slots WHERE slot_type = 'logical' ORDER BY slot_name`)
	if err == nil {
		st.Slots, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (instanceapi.Slot, error) {
			var s instanceapi.Slot
			return s, row.Scan(&s.Name, &s.Database, &s.Active, &s.RetainedBytes, &s.WALStatus)
		})
	}
	if err != nil {
		return st, fmt.Errorf("while reading the replication slots: %w", err)
	}
	// -1 (unlimited) is -1 bytes too.
	err = conn.QueryRow(ctx, `SELECT pg_size_bytes(current_setting('max_slot_wal_keep_size'))`).Scan(&st.MaxSlotWALKeepBytes)
	if err != nil {
		return st, fmt.Errorf("while reading max_slot_wal_keep_size: %w", err)
	}
	return st, nil
}
