//go:build integration

package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/testenv"
)

func TestWriteAndCheckCleanRun(t *testing.T) {
	pg := startPGServer(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	rep, err := Write(context.Background(), WriteOptions{DSN: pg.DSN(), Clients: 4, Duration: 2 * time.Second, Table: "clean", Ledger: ledger})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("writer: %d acknowledged, longest gap %+v", rep.Acknowledged, rep.Gaps.Longest)
	if rep.Acknowledged < 100 || rep.Unknown != 0 || rep.Rejected != 0 || len(rep.Errors) != 0 || rep.Attempted != rep.Acknowledged {
		t.Fatalf("writer report %+v", rep)
	}
	if len(rep.Servers) != 1 || rep.Servers["127.0.0.1"] != rep.Acknowledged {
		t.Fatalf("acknowledgements by server: %v", rep.Servers)
	}
	check := mustCheck(t, pg, "clean", ledger, CheckOptions{SplitBrainWindow: 10 * time.Second})
	if !check.OK || check.Lost.Count != 0 || int64(check.Acknowledged) != rep.Acknowledged || int64(check.Rows) != rep.Acknowledged {
		t.Fatalf("check %+v", check)
	}
	for _, c := range check.Clients {
		if c.MaxAcked != c.MaxPresent || c.MaxAcked == 0 {
			t.Errorf("client %+v", c)
		}
	}
}

// TestWriterOutlivesACrash crashes the server under the writer, keeps it
// down for a while and starts it again: the writer reconnects and goes on,
// no acknowledged row is lost, and the gap covers the downtime.
func TestWriterOutlivesACrash(t *testing.T) {
	const downtime = 2 * time.Second
	pg := startPGServer(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		rep *WriteReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := Write(ctx, WriteOptions{DSN: pg.DSN(), Clients: 4, Table: "crash", Ledger: ledger, Timeout: 2 * time.Second})
		done <- result{rep, err}
	}()
	pg.waitRows("crash", 200)
	pg.crash()
	testenv.Consistently(t, downtime, 100*time.Millisecond, func(ctx context.Context) error {
		if _, err := pg.count(ctx, "crash"); err == nil {
			return errors.New("the crashed server answered")
		}
		return nil
	})
	pg.start()
	n := pg.waitRows("crash", 0)
	pg.waitRows("crash", n+200)
	cancel()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	rep := res.rep
	t.Logf("writer: %d acknowledged, %d unknown, errors %v, longest gap %+v", rep.Acknowledged, rep.Unknown, rep.Errors, rep.Gaps.Longest)
	if rep.Rejected != 0 || len(rep.Errors) == 0 {
		t.Fatalf("writer report %+v", rep)
	}
	if rep.Gaps.Longest == nil || rep.Gaps.Longest.Seconds < downtime.Seconds() || len(rep.Gaps.Over) == 0 {
		t.Fatalf("longest gap %+v, want at least the downtime %s", rep.Gaps.Longest, downtime)
	}
	check := mustCheck(t, pg, "crash", ledger, CheckOptions{SplitBrainWindow: 10 * time.Second})
	if !check.OK || int64(check.Acknowledged) != rep.Acknowledged || check.Unknown != int(rep.Unknown) {
		t.Fatalf("check %+v", check)
	}
	if check.Gaps.Longest == nil || check.Gaps.Longest.Seconds < downtime.Seconds() {
		t.Fatalf("the checker's longest gap %+v, want at least %s", check.Gaps.Longest, downtime)
	}
}

// TestLiveCheckWhileWriting checks while the writer runs, as the chaos test
// does after each fault: rows committed after the ledger was read are
// later attempts (Live), never phantoms, and nothing acknowledged is lost.
func TestLiveCheckWhileWriting(t *testing.T) {
	pg := startPGServer(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Write(ctx, WriteOptions{DSN: pg.DSN(), Clients: 4, Table: "live", Ledger: ledger})
		done <- err
	}()
	n := pg.waitRows("live", 100)
	later := 0
	for range 5 {
		check := mustCheck(t, pg, "live", ledger, CheckOptions{Live: true, SplitBrainWindow: 10 * time.Second})
		if !check.OK || check.Acknowledged == 0 || check.Phantoms.Count != 0 {
			t.Fatalf("live check while writing: %+v", check)
		}
		later += check.LaterRows
		n = pg.waitRows("live", n+50)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows were committed after a live check read the ledger", later)
	if check := mustCheck(t, pg, "live", ledger, CheckOptions{}); !check.OK || check.LaterRows != 0 {
		t.Fatalf("check after the writer stopped: %+v", check)
	}
}

// TestDuplicateReported uses a table without the primary key, where a
// duplicate row can exist, and adds one by hand.
func TestDuplicateReported(t *testing.T) {
	pg := startPGServer(t)
	pg.mustExec(`CREATE TABLE nokey (run text NOT NULL, client integer NOT NULL, seq bigint NOT NULL,
		server text NOT NULL DEFAULT coalesce(host(inet_server_addr()), 'local'),
		committed_at timestamptz NOT NULL DEFAULT clock_timestamp(), lsn pg_lsn DEFAULT pg_current_wal_lsn())`)
	ledger := filepath.Join(t.TempDir(), "ledger")
	if _, err := Write(context.Background(), WriteOptions{DSN: pg.DSN(), Clients: 2, Duration: time.Second, Table: "nokey", Ledger: ledger}); err != nil {
		t.Fatal(err)
	}
	if check := mustCheck(t, pg, "nokey", ledger, CheckOptions{}); !check.OK {
		t.Fatalf("check before the duplicate: %+v", check)
	}
	pg.mustExec(`INSERT INTO nokey SELECT * FROM nokey WHERE client = 2 AND seq = 3`)
	check := mustCheck(t, pg, "nokey", ledger, CheckOptions{})
	if check.OK || check.Duplicates.Count != 1 || check.Duplicates.Sample[0].Client != 2 || check.Duplicates.Sample[0].Seq != 3 {
		t.Fatalf("check %+v", check)
	}
}

// TestCommandsReportALostRow runs `tusk workload write` and `check` as
// processes; a row deleted behind the writer's back is LOST and the check
// exits non-zero.
func TestCommandsReportALostRow(t *testing.T) {
	pg := startPGServer(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	out, err := tusk(t, "workload", "write", "--dsn", pg.DSN(), "--clients", "2", "--duration", "1s", "--table", "lost", "--ledger", ledger)
	if err != nil {
		t.Fatalf("tusk workload write: %v\n%s", err, out)
	}
	var wrep WriteReport
	if err := json.Unmarshal(out, &wrep); err != nil || wrep.Acknowledged == 0 {
		t.Fatalf("write report %s: %v", out, err)
	}
	recs, _, err := ReadLedgerFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	var victim Key
	for _, r := range recs {
		if r.Kind == KindAck && r.Seq == 5 {
			victim = Key{Run: r.Run, Client: r.Client, Seq: r.Seq}
			break
		}
	}
	pg.mustExec(`DELETE FROM lost WHERE run = $1 AND client = $2 AND seq = $3`, victim.Run, victim.Client, victim.Seq)
	out, err = tusk(t, "workload", "check", "--dsn", pg.DSN(), "--table", "lost", "--ledger", ledger)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("tusk workload check: %v, want exit status 1\n%s", err, out)
	}
	var rep CheckReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("check report %s: %v", out, err)
	}
	if rep.OK || rep.Lost.Count != 1 || rep.Lost.Sample[0] != victim {
		t.Fatalf("check report: lost %+v, want %+v", rep.Lost, victim)
	}
}

// TestKilledWriterLeavesAUsableLedger SIGKILLs the writer mid-run: the
// ledger is still readable and the check passes (attempts cut short are
// unknown, present or not).
func TestKilledWriterLeavesAUsableLedger(t *testing.T) {
	pg := startPGServer(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	cmd := exec.Command(tuskBinary(t), "workload", "write", "--dsn", pg.DSN(), "--clients", "4", "--duration", "1m",
		"--table", "killed", "--ledger", ledger)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pg.waitRows("killed", 300)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	out, err := tusk(t, "workload", "check", "--dsn", pg.DSN(), "--table", "killed", "--ledger", ledger)
	if err != nil {
		t.Fatalf("tusk workload check after the writer was killed: %v\n%s", err, out)
	}
}

func mustCheck(t *testing.T, pg *pgServer, table, ledger string, opts CheckOptions) *CheckReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := CheckDatabase(ctx, pg.DSN(), table, ledger, 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestMain removes the tusk binary the tests built (123 MB each run).
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binDir holds the tusk binary once buildTusk made it.
var binDir string

var buildTusk = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "tusk-workload-bin-")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "tusk")
	build := exec.Command("go", "build", "-o", bin, "./cmd/tusk")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return "", errors.New(string(out))
	}
	return bin, nil
})

func tuskBinary(t *testing.T) string {
	t.Helper()
	bin, err := buildTusk()
	if err != nil {
		t.Fatalf("building tusk: %v", err)
	}
	return bin
}

// tusk runs the tusk binary and returns its stdout; stderr goes to the log.
func tusk(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(tuskBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if stderr.Len() > 0 {
		t.Logf("tusk %v stderr:\n%s", args, stderr.String())
	}
	return stdout.Bytes(), err
}

// sessions is how many sessions the server's app database has had
// (pg_stat_database.sessions).
func sessions(t *testing.T, pg *pgServer) int64 {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var n int64
	if err := conn.QueryRow(context.Background(), "SELECT sessions FROM pg_stat_database WHERE datname = current_database()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOrdinaryClient: an ordinary client opens a session for every
// INSERT, and nothing bounds its connection attempts or statements: a
// Timeout so short that a tuned client could connect nowhere is ignored.
func TestOrdinaryClient(t *testing.T) {
	pg := startPGServer(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	before := sessions(t, pg)
	rep, err := Write(context.Background(), WriteOptions{DSN: pg.DSN(), Clients: 2, Duration: 2 * time.Second, Table: "ordinary",
		Ledger: ledger, Ordinary: true, Timeout: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Acknowledged < 20 || rep.Unknown != 0 || len(rep.Errors) != 0 {
		t.Fatalf("writer report %+v", rep)
	}
	// The table's creation had a session of its own.
	if opened := sessions(t, pg) - before; opened < rep.Attempted+1 {
		t.Errorf("%d sessions for %d INSERTs: not one per statement", opened, rep.Attempted)
	}
	check := mustCheck(t, pg, "ordinary", ledger, CheckOptions{})
	if !check.OK || int64(check.Rows) != rep.Acknowledged {
		t.Fatalf("check %+v", check)
	}
}

// TestOrdinaryReader: in read mode the clients write nothing and create
// no table; every answered query is an acknowledgement.
func TestOrdinaryReader(t *testing.T) {
	pg := startPGServer(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	rep, err := Write(context.Background(), WriteOptions{DSN: pg.DSN(), Clients: 1, Duration: time.Second, Table: "never_created",
		Ledger: ledger, Ordinary: true, Read: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Acknowledged < 10 || rep.Acknowledged != rep.Attempted || rep.Servers["127.0.0.1"] != rep.Acknowledged {
		t.Fatalf("reader report %+v", rep)
	}
	conn, err := pgx.Connect(context.Background(), pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var exists bool
	if err := conn.QueryRow(context.Background(), "SELECT to_regclass('never_created') IS NOT NULL").Scan(&exists); err != nil || exists {
		t.Fatalf("the reader created its table (%t, %v)", exists, err)
	}
}
