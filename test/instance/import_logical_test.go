//go:build integration

package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

// TestLogicalImportCutover: a logical import copies the schema at
// bootstrap, then follows the source through a subscription (rows written
// after the bootstrap arrive); the cutover makes the source's database
// read-only, applies the last rows, copies the sequences and drops the
// subscription and its slot; a second request for the same cutover
// changes nothing. The import's user is no superuser: REPLICATION, a
// member of the database's owner and of pg_signal_backend.
func TestLogicalImportCutover(t *testing.T) {
	source, n := startLogicalImportPair(t, "l")
	waitShop := func(sql, want string) {
		t.Helper()
		n.waitFor(sql+" = "+want, func(instanceapi.Status) error {
			got, err := inShop(n, "postgres", superuserPassword, sql)
			if err != nil || got != want {
				return fmt.Errorf("%q (%w)", got, err)
			}
			return nil
		})
	}
	waitShop("SELECT count(*)::text FROM orders", "500")
	mustInShop(t, source, "WITH i AS (INSERT INTO orders (note) SELECT 'later ' || g FROM generate_series(1, 100) g RETURNING 1) SELECT count(*)::text FROM i")
	waitShop("SELECT count(*)::text FROM orders", "600")

	// Writers commit on the source, each on its own session, until the
	// cutover ends their sessions: every commit they saw acknowledged
	// must reach the new cluster, the last ones, in flight as their
	// sessions were ended, included.
	acked := startAckWriters(t, source, 8)
	n.command("POST", instanceapi.PathImportCutover, instanceapi.ImportCutoverRequest{Cutover: "now"}, nil)
	st := n.waitFor("the cutover", func(st instanceapi.Status) error {
		if st.Import == nil || (st.Import.Phase != "CutOver" && st.Import.Phase != "CutoverFailed") {
			return fmt.Errorf("import %+v", st.Import)
		}
		return nil
	})
	if st.Import.Phase != "CutOver" || st.Import.WriteGapSeconds <= 0 || st.Import.Cutover != "now" {
		t.Fatalf("import %+v: want CutOver for \"now\" with a write gap", st.Import)
	}
	t.Logf("cutover write gap %.3fs", st.Import.WriteGapSeconds)
	checkAcksArrived(t, n, acked())
	if got := mustInShop(t, n, "SELECT nextval('orders_id_seq')::text"); got != "601" {
		t.Errorf("nextval after the cutover = %s, want 601 (the source's sequence)", got)
	}
	if got := mustInShop(t, n, "SELECT count(*)::text FROM pg_subscription"); got != "0" {
		t.Errorf("%s subscriptions left after the cutover", got)
	}
	if got := mustInShop(t, source, "SELECT count(*)::text FROM pg_replication_slots WHERE slot_type = 'logical'"); got != "0" {
		t.Errorf("%s logical slots left on the source after the cutover", got)
	}
	if _, err := inShop(source, "shop", "shop-secret", "INSERT INTO orders (note) VALUES ('too late') RETURNING 'x'"); err == nil ||
		!strings.Contains(err.Error(), "read-only transaction") {
		t.Errorf("a write on the source after the cutover: %v, want a read-only refusal", err)
	}
	if got := mustInShop(t, n, "INSERT INTO orders (note) VALUES ('on the new cluster') RETURNING id::text"); got != "602" {
		t.Errorf("a write on the new cluster got id %s, want 602", got)
	}
	// The same request again changes nothing.
	n.command("POST", instanceapi.PathImportCutover, instanceapi.ImportCutoverRequest{Cutover: "now"}, nil)
	if st, _ := n.status(context.Background()); st.Import == nil || st.Import.Phase != "CutOver" {
		t.Errorf("after a repeated request the import is %+v", st.Import)
	}
	// A replica copied before the cutover, promoted after it, has a state
	// file that says the import still runs: asked again, it finds the
	// subscription gone and records the cutover without touching anything.
	statePath := filepath.Join(n.dir, "pgdata", "tusk-import", "state.json")
	data, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	stale := strings.Replace(string(data), `"cutOver":true`, `"cutOver":false`, 1)
	if err := os.WriteFile(statePath, []byte(stale), 0o600); err != nil || stale == string(data) {
		t.Fatalf("rewriting the state file: %v (%s)", err, data)
	}
	n.command("POST", instanceapi.PathImportCutover, instanceapi.ImportCutoverRequest{Cutover: "after-failover"}, nil)
	st = n.waitFor("the second cutover", func(st instanceapi.Status) error {
		if st.Import == nil || st.Import.Cutover != "after-failover" || st.Import.Phase == "CuttingOver" {
			return fmt.Errorf("import %+v", st.Import)
		}
		return nil
	})
	if st.Import.Phase != "CutOver" || !strings.Contains(st.Import.Message, "earlier primary") {
		t.Errorf("a cutover of a stale state file: %+v, want CutOver on an earlier primary", st.Import)
	}
	if got := mustInShop(t, n, "SELECT count(*)::text FROM orders"); got != "601" {
		t.Errorf("%s rows after the second cutover, want 601", got)
	}
}

// startAckWriters starts clients that insert (client, seq) into acks on
// the source's shop database, each on one session, until an error (the
// cutover ending the session); the function returned waits for them and
// gives every acknowledged row.
func startAckWriters(t *testing.T, source *node, clients int) func() map[[2]int]bool {
	t.Helper()
	var mu sync.Mutex
	acked := map[[2]int]bool{}
	var wg sync.WaitGroup
	for c := range clients {
		conn, err := source.tryConnect(context.Background(), "shop", "shop-secret", "shop")
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { _ = conn.Close(context.Background()) }()
			for seq := 1; ; seq++ {
				if _, err := conn.Exec(context.Background(), "INSERT INTO acks VALUES ($1, $2)", c, seq); err != nil {
					return
				}
				mu.Lock()
				acked[[2]int{c, seq}] = true
				mu.Unlock()
			}
		}()
	}
	return func() map[[2]int]bool {
		wg.Wait()
		return acked
	}
}

// checkAcksArrived checks that every acknowledged row is on n.
func checkAcksArrived(t *testing.T, n *node, acked map[[2]int]bool) {
	t.Helper()
	conn, err := n.tryConnect(context.Background(), "postgres", superuserPassword, "shop")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(context.Background(), "SELECT client, seq FROM acks")
	if err != nil {
		t.Fatal(err)
	}
	present := map[[2]int]bool{}
	for rows.Next() {
		var c, s int
		if err := rows.Scan(&c, &s); err != nil {
			t.Fatal(err)
		}
		present[[2]int{c, s}] = true
	}
	var lost [][2]int
	for k := range acked {
		if !present[k] {
			lost = append(lost, k)
		}
	}
	if len(acked) == 0 || len(lost) > 0 {
		t.Errorf("%d rows acknowledged on the source before the cutover, %d of them missing on the new cluster: %v", len(acked), len(lost), lost)
	}
	t.Logf("%d rows acknowledged on the source during the cutover's start, all on the new cluster", len(acked))
}

// startLogicalImportPair starts a source server (wal_level logical, a
// database shop with 500 orders, a publication) and a new primary
// importing shop from it logically as migrator, a non-superuser, over
// verified TLS, and waits until the import replicates.
func startLogicalImportPair(t *testing.T, prefix string) (source, n *node) {
	t.Helper()
	// The importing cluster runs PostgreSQL 16 or later: Tusk refuses a
	// logical import before (TestLogicalImportRefusedBefore16).
	source, n = startLogicalImport(t, prefix, testenv.RequirePostgres16(t))
	n.waitReady(instanceapi.RolePrimary)
	n.waitFor("the import replicating", func(st instanceapi.Status) error {
		if st.Import == nil || st.Import.Phase != "Replicating" {
			return fmt.Errorf("import %+v", st.Import)
		}
		return nil
	})
	return source, n
}

// startLogicalImport starts the source of startLogicalImportPair and a new
// primary of binDir's PostgreSQL importing from it, without waiting for
// the import.
func startLogicalImport(t *testing.T, prefix, binDir string) (source, n *node) {
	t.Helper()
	sourcePKI, ownPKI := newClusterPKI(t), newClusterPKI(t)
	source = startNode(t, prefix+"src-1", nodeOptions{role: instanceapi.RolePrimary, tls: sourcePKI,
		config: &instanceapi.Config{Parameters: map[string]string{"wal_level": "logical"}}})
	source.waitReady(instanceapi.RolePrimary)
	source.exec(`CREATE ROLE shop LOGIN PASSWORD 'shop-secret';
CREATE ROLE migrator LOGIN REPLICATION PASSWORD 'migrate-me' IN ROLE pg_read_all_data, pg_signal_backend, shop`)
	source.exec("CREATE DATABASE shop OWNER shop")
	source.withConn("postgres", superuserPassword, "shop", func(conn *pgx.Conn) error {
		_, err := conn.Exec(context.Background(), `CREATE TABLE orders (id serial PRIMARY KEY, note text NOT NULL);
ALTER TABLE orders OWNER TO shop; INSERT INTO orders (note) SELECT 'order ' || g FROM generate_series(1, 500) g;
CREATE TABLE acks (client int, seq int, PRIMARY KEY (client, seq)); ALTER TABLE acks OWNER TO shop;
CREATE PUBLICATION tusk_import FOR ALL TABLES`)
		return err
	})

	caDir := filepath.Join(workDir(t), "import-ca")
	mountCerts(t, caDir, sourcePKI.repl, sourcePKI.ca)
	secrets := filepath.Join(workDir(t), "import-secrets")
	if err := os.Mkdir(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	chown(t, secrets)
	n = startNode(t, prefix+"imp-1", nodeOptions{role: instanceapi.RolePrimary, tls: ownPKI, binDir: binDir, extraArgs: []string{
		"--import-host", "127.0.0.1", "--import-port", strconv.Itoa(source.port), "--import-method", "logical",
		"--import-user", "migrator", "--import-password-file", writeSecret(t, secrets, "password", "migrate-me"),
		"--import-sslmode", "verify-full", "--import-ca-file", filepath.Join(caDir, "ca.crt"), "--import-database", "shop"}})
	return source, n
}

// TestLogicalImportRefusedBefore16: a logical import into PostgreSQL 15,
// whose subscription would apply the source's rows as superuser (so the
// owner of any imported table could run code as superuser with a
// trigger), is refused before anything is made: the status says why, no
// data directory, no slot on the source.
func TestLogicalImportRefusedBefore16(t *testing.T) {
	if major, _ := strconv.Atoi(filepath.Base(filepath.Dir(pgBinDir))); major >= 16 {
		t.Skipf("TUSK_PG_BINDIR %s is PostgreSQL 16 or later: the refusal is for 13 to 15", pgBinDir)
	}
	source, n := startLogicalImport(t, "r", "")
	n.waitFor("the refusal", func(st instanceapi.Status) error {
		if !strings.Contains(st.LastError, "a logical import needs PostgreSQL 16 or later") {
			return fmt.Errorf("last error %q", st.LastError)
		}
		return nil
	})
	st, _ := n.status(context.Background())
	for _, want := range []string{"PostgreSQL 15", "superuser", "method dump"} {
		if !strings.Contains(st.LastError, want) {
			t.Errorf("the refusal %q does not say %q", st.LastError, want)
		}
	}
	if st.Import != nil || st.Role == instanceapi.RolePrimary && st.Ready {
		t.Errorf("the refused import: %+v, want no import and no ready primary", st)
	}
	if _, err := os.Stat(filepath.Join(n.dir, "pgdata", "PG_VERSION")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a data directory was made for the refused import (%v)", err)
	}
	if got := mustInShop(t, source, "SELECT count(*)::text FROM pg_replication_slots"); got != "0" {
		t.Errorf("%s slots on the source after the refusal, want none", got)
	}
}

// inShop runs sql in n's database shop as user and returns its one value.
func inShop(n *node, user, password, sql string) (string, error) {
	conn, err := n.tryConnect(context.Background(), user, password, "shop")
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var out string
	err = conn.QueryRow(context.Background(), sql).Scan(&out)
	return out, err
}

// mustInShop is inShop as the superuser, failing the test on an error.
func mustInShop(t *testing.T, n *node, sql string) string {
	t.Helper()
	out, err := inShop(n, "postgres", superuserPassword, sql)
	if err != nil {
		t.Fatalf("%s: %s: %v", n.name, sql, err)
	}
	return out
}

// TestLogicalImportAbandon: POST /v1/import/abandon, which the operator
// sends before deleting a cluster whose import was not cut over, drops
// the subscription and its slot on the source (which would otherwise keep
// the source's WAL), leaves the source writable, and asked again changes
// nothing.
func TestLogicalImportAbandon(t *testing.T) {
	source, n := startLogicalImportPair(t, "a")
	slots := "SELECT count(*)::text FROM pg_replication_slots WHERE slot_type = 'logical'"
	if got := mustInShop(t, source, slots); got != "1" {
		t.Fatalf("%s logical slots on the source while importing, want 1", got)
	}
	for try := 1; try <= 2; try++ {
		var res instanceapi.ImportAbandonResult
		n.command("POST", instanceapi.PathImportAbandon, nil, &res)
		if len(res.Left) != 0 || (try == 1 && len(res.Dropped) != 1) {
			t.Errorf("abandon #%d: %+v, want the one slot dropped (then nothing left)", try, res)
		}
	}
	if got := mustInShop(t, source, slots); got != "0" {
		t.Errorf("%s logical slots left on the source after the abandon", got)
	}
	if got := mustInShop(t, n, "SELECT count(*)::text FROM pg_subscription"); got != "0" {
		t.Errorf("%s subscriptions left after the abandon", got)
	}
	if _, err := inShop(source, "shop", "shop-secret", "INSERT INTO orders (note) VALUES ('still writable') RETURNING 'x'"); err != nil {
		t.Errorf("the source after the abandon: %v, want it writable", err)
	}
}
