package instance

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instance/fsutil"
	"tusk.dev/tusk/internal/instance/sqlobjects"
	"tusk.dev/tusk/internal/instanceapi"
)

// A logical import copies the schema at bootstrap and then follows the
// source through one subscription per database until a cutover. What it
// needs after the bootstrap lives in the data directory (importStateDir),
// so that every instance copied from the primary has it: the source's CA,
// which the subscriptions' connection strings name, and the state.
const (
	importMethodLogical = "logical"
	importStateDir      = "tusk-import"
	importStateFile     = "state.json"
	importCAFile        = "ca.crt"
)

// Import phases, as instanceapi.ImportStatus.Phase.
const (
	importReplicating   = "Replicating"
	importCuttingOver   = "CuttingOver"
	importCutOver       = "CutOver"
	importCutoverFailed = "CutoverFailed"
)

// importState is what a logical import recorded in the data directory.
type importState struct {
	// Subscriptions maps each imported database to its subscription (and
	// slot on the source).
	Subscriptions map[string]string `json:"subscriptions"`
	// Enabled says the subscriptions were enabled and their tables
	// registered for the initial copy (after the first start).
	Enabled bool `json:"enabled,omitempty"`
	// CutOver says the cutover is done; Cutover names the request, and
	// WriteGapSeconds its length.
	CutOver         bool    `json:"cutOver,omitempty"`
	Cutover         string  `json:"cutover,omitempty"`
	WriteGapSeconds float64 `json:"writeGapSeconds,omitempty"`
	// Steps says how long each step of the cutover took.
	Steps string `json:"steps,omitempty"`
}

// importSubscriptionName is a database's subscription, and its slot on the
// source: unique per cluster and database, as slots of several importing
// clusters may share one source.
func importSubscriptionName(cluster, database string) string {
	sum := sha256.Sum256([]byte(cluster + "/" + database))
	return "tusk_import_" + hex.EncodeToString(sum[:6])
}

func importStatePath(dataDir string) string {
	return filepath.Join(dataDir, importStateDir, importStateFile)
}

func readImportState(dataDir string) (*importState, error) {
	data, err := os.ReadFile(importStatePath(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st importState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("while reading the logical import's state: %w", err)
	}
	return &st, nil
}

func writeImportState(dataDir string, st *importState) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomically(importStatePath(dataDir), data)
}

// minLogicalImportMajor is the first PostgreSQL major whose subscriptions
// apply as each table's owner (run_as_owner = false). Before it they
// apply as their owner, a superuser: whoever owns a table on the source
// owns it here too (the schema's restore keeps owners) and could run code
// as this cluster's superuser with a trigger ENABLE ALWAYS.
const minLogicalImportMajor = 16

// refuseLogicalImportBefore16 refuses a logical import into a server older
// than minLogicalImportMajor, before anything is created.
func refuseLogicalImportBefore16(method string, major int) error {
	if method != importMethodLogical || major >= minLogicalImportMajor {
		return nil
	}
	return fmt.Errorf("a logical import needs PostgreSQL %d or later, and this cluster's image runs PostgreSQL %d: its subscriptions "+
		"would apply the source's rows as superuser, so the owner of any imported table could run code as superuser (a trigger ENABLE ALWAYS). "+
		"Use an image of PostgreSQL %d or later, or import with method dump", minLogicalImportMajor, major, minLogicalImportMajor)
}

// prepareLogicalImport readies one database's subscription during the
// bootstrap, after its schema was restored: the slot on the source (made
// now, so the changes from here on are kept for it) and the subscription,
// made without connecting, as the data directory is not in place yet; the
// first start enables it and starts the initial copy (enableLogicalImport).
func (m *Manager) prepareLogicalImport(ctx context.Context, dir string, db sourceDatabase, password string, st *importState) error {
	imp := m.opts.Import
	name := importSubscriptionName(m.opts.ClusterName, db.name)
	src, err := m.connectSource(ctx, db.name, password)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close(context.Background()) }()
	if err := checkLogicalSource(ctx, src, db.name, imp.Publication); err != nil {
		return err
	}
	// A slot left by a failed attempt is dropped: it would hold WAL for
	// nobody, and its position is not this attempt's.
	if _, err := src.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", name); err != nil {
		return fmt.Errorf("while dropping the slot %s left on the source by an earlier attempt: %w", name, err)
	}
	if _, err := src.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", name); err != nil {
		return fmt.Errorf("while creating the slot %s in the source's database %s (the import's user needs REPLICATION): %w", name, db.name, err)
	}
	// No client certificate: the server's libpq would otherwise look in
	// the postgres user's ~/.postgresql.
	noCert := quoteConnValue(filepath.Join(m.opts.DataDir, importStateDir, "no-client-certificate"))
	conninfo := sourceConnInfo(imp, db.name) + " sslcert=" + noCert + " sslkey=" + noCert + " password=" + quoteConnValue(password)
	if imp.CAFile != "" {
		ca, err := os.ReadFile(imp.CAFile)
		if err != nil {
			return fmt.Errorf("while reading the import source's CA: %w", err)
		}
		if err := fsutil.WriteFileAtomically(filepath.Join(dir, importStateDir, importCAFile), ca); err != nil {
			return err
		}
		// The subscription connects once the data directory is in place.
		conninfo = strings.Replace(conninfo, "sslrootcert="+quoteConnValue(imp.CAFile),
			"sslrootcert="+quoteConnValue(filepath.Join(m.opts.DataDir, importStateDir, importCAFile)), 1)
	}
	local, err := m.connectDatabase(ctx, db.name)
	if err != nil {
		return err
	}
	defer func() { _ = local.Close(context.Background()) }()
	// synchronous_commit = on: an applied change is acknowledged to the
	// source only once this cluster's synchronous standbys have it too,
	// so the cutover, which waits for those acknowledgements, loses
	// nothing to a failover right after it. run_as_owner = false (16's
	// default, said anyway): the apply runs as each table's owner, not as
	// the superuser who owns the subscription.
	stmt := fmt.Sprintf("CREATE SUBSCRIPTION %s CONNECTION %s PUBLICATION %s "+
		"WITH (connect = false, synchronous_commit = 'on', run_as_owner = false)",
		ident(name), literal(conninfo), ident(imp.Publication))
	if _, err := local.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("while creating the subscription %s of the database %s: %s", name, db.name, sqlobjects.RedactConnInfo(err.Error(), conninfo))
	}
	st.Subscriptions[db.name] = name
	return writeImportState(dir, st)
}

// checkLogicalSource refuses a source that cannot feed a logical import.
func checkLogicalSource(ctx context.Context, src *pgx.Conn, database, publication string) error {
	var walLevel string
	if err := src.QueryRow(ctx, "SELECT current_setting('wal_level')").Scan(&walLevel); err != nil {
		return fmt.Errorf("while reading the source's wal_level: %w", err)
	}
	if walLevel != "logical" {
		return fmt.Errorf("the source's wal_level is %s: a logical import needs wal_level = logical there (a restart of the source)", walLevel)
	}
	var allTables bool
	err := src.QueryRow(ctx, "SELECT puballtables FROM pg_publication WHERE pubname = $1", publication).Scan(&allTables)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("the source's database %s has no publication %s: create it there (CREATE PUBLICATION %s FOR ALL TABLES)",
			database, publication, ident(publication))
	}
	return err
}

// startLogicalImport, on a primary whose data directory holds a logical
// import, reports it and, after the first start, enables its
// subscriptions.
func (m *Manager) startLogicalImport(ctx context.Context) {
	st, err := readImportState(m.opts.DataDir)
	if err != nil {
		m.log.Error(err, "Reading the logical import's state")
		return
	}
	if st == nil {
		return
	}
	m.reportImport(st, "")
	if st.CutOver || st.Enabled || m.opts.Role != instanceapi.RolePrimary {
		return
	}
	go m.enableLogicalImportUntilDone(ctx, st)
}

// enableLogicalImportUntilDone enables the subscriptions once postgres
// runs, trying again with a growing wait while it fails (the source
// unreachable, say): the status says why meanwhile.
func (m *Manager) enableLogicalImportUntilDone(ctx context.Context, st *importState) {
	var wait time.Duration
	for {
		if err := m.waitStartedAndRunning(ctx); err != nil {
			return
		}
		err := m.enableLogicalImport(ctx, st)
		if err == nil {
			return
		}
		wait = bootstrapRetryBackoff.next(wait)
		m.log.Error(err, "Enabling the logical import's subscriptions", "retryIn", wait)
		m.mu.Lock()
		m.state.logicalImport = &instanceapi.ImportStatus{Phase: importReplicating, Cutover: st.Cutover,
			Message: fmt.Sprintf("enabling the subscriptions failed, trying again in %s: %v", wait, err)}
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// enableLogicalImport enables each subscription and registers its
// publication's tables, which starts their initial copy.
func (m *Manager) enableLogicalImport(ctx context.Context, st *importState) error {
	for db, name := range st.Subscriptions {
		conn, err := m.connectDatabase(ctx, db)
		if err != nil {
			return err
		}
		for _, s := range []string{"ALTER SUBSCRIPTION %s ENABLE", "ALTER SUBSCRIPTION %s REFRESH PUBLICATION WITH (copy_data = true)"} {
			if _, err = conn.Exec(ctx, fmt.Sprintf(s, ident(name))); err != nil {
				break
			}
		}
		_ = conn.Close(context.Background())
		if err != nil {
			return fmt.Errorf("while enabling the subscription %s of %s: %w", name, db, err)
		}
	}
	st.Enabled = true
	if err := writeImportState(m.opts.DataDir, st); err != nil {
		return err
	}
	m.log.Info("Enabled the logical import's subscriptions", "subscriptions", st.Subscriptions)
	m.reportImport(st, "")
	return nil
}

// reportImport sets the import's status from its state; failure, when
// set, is why the last step failed.
func (m *Manager) reportImport(st *importState, failure string) {
	var follows []string
	for _, db := range slices.Sorted(maps.Keys(st.Subscriptions)) {
		follows = append(follows, fmt.Sprintf("database %s by subscription %s", db, st.Subscriptions[db]))
	}
	r := &instanceapi.ImportStatus{Phase: importReplicating, Cutover: st.Cutover, Message: "following the source: " + strings.Join(follows, ", ")}
	switch {
	case st.CutOver && st.WriteGapSeconds == 0:
		r.Phase, r.Message = importCutOver, "cut over on an earlier primary; the cluster no longer follows the source"
	case st.CutOver:
		r.Phase, r.WriteGapSeconds = importCutOver, st.WriteGapSeconds
		r.Message = fmt.Sprintf("cut over: writes were kept out for %.1fs (%s); the cluster no longer follows the source", st.WriteGapSeconds, st.Steps)
	case failure != "":
		r.Phase, r.Message = importCutoverFailed, failure
	}
	m.mu.Lock()
	m.state.logicalImport = r
	m.mu.Unlock()
}

// cutoverTimeout bounds the wait for the subscriptions to apply the
// source's last changes.
const cutoverTimeout = 2 * time.Minute
