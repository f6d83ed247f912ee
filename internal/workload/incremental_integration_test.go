//go:build integration

package workload

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// liveWriter runs Write against pg until stopped (at the latest when the
// test ends).
type liveWriter struct {
	cancel func()
	done   chan error
	once   sync.Once
	err    error
}

func startLiveWriter(t *testing.T, pg *pgServer, table, ledger string) *liveWriter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &liveWriter{cancel: cancel, done: make(chan error, 1)}
	go func() {
		_, err := Write(ctx, WriteOptions{DSN: pg.DSN(), Clients: 4, Table: table, Ledger: ledger, Interval: time.Millisecond})
		w.done <- err
	}()
	t.Cleanup(func() { _ = w.stop() })
	return w
}

// stop stops the writer and returns its error.
func (w *liveWriter) stop() error {
	w.once.Do(func() {
		w.cancel()
		w.err = <-w.done
	})
	return w.err
}

func mustCheckSince(t *testing.T, pg *pgServer, table, ledger, state string, opts CheckOptions) *CheckReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts.Live = true
	rep, err := CheckDatabaseSince(ctx, pg.DSN(), table, ledger, state, 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Incremental == nil {
		t.Fatal("an incremental check reported nothing of what it read")
	}
	return rep
}

// fromCheckpoint fails the test unless the check decided from the
// checkpoint an earlier one left.
func fromCheckpoint(t *testing.T, rep *CheckReport) {
	t.Helper()
	if in := rep.Incremental; in.FromStartBecause != "" || in.FullBecause != "" || in.LedgerFrom == 0 {
		t.Fatalf("the check did not go on from its checkpoint: %+v", in)
	}
}

// TestIncrementalCheckFindsAnOldRowLost: a row the first incremental
// check verified, deleted afterwards (as a failover to a replica that
// lacks it would lose it), is LOST in the next incremental check, which
// reads it from the start; the checks after it go on from their
// checkpoint and still report it, as the full check does.
func TestIncrementalCheckFindsAnOldRowLost(t *testing.T) {
	pg := startPGServer(t)
	dir := t.TempDir()
	ledger, state := filepath.Join(dir, "ledger.jsonl"), filepath.Join(dir, "ledger.check.json")
	w := startLiveWriter(t, pg, "lost", ledger)
	n := pg.waitRows("lost", 200)
	opts := CheckOptions{SplitBrainWindow: 5 * time.Second}
	first := mustCheckSince(t, pg, "lost", ledger, state, opts)
	if !first.OK || first.Incremental.FromStartBecause != "no checkpoint yet" {
		t.Fatalf("first check: %+v, %+v", first, first.Incremental)
	}
	n = pg.waitRows("lost", n+200)
	if rep := mustCheckSince(t, pg, "lost", ledger, state, opts); !rep.OK {
		t.Fatalf("second check: %v", rep.Failures)
	} else {
		fromCheckpoint(t, rep)
	}
	victim := Key{Run: first.Runs[0], Client: 1, Seq: 5}
	pg.mustExec(`DELETE FROM lost WHERE run = $1 AND client = $2 AND seq = $3`, victim.Run, victim.Client, victim.Seq)
	n = pg.waitRows("lost", n+200)
	rep := mustCheckSince(t, pg, "lost", ledger, state, opts)
	t.Logf("after the delete: %+v", rep.Incremental)
	if rep.OK || rep.Lost.Count != 1 || rep.Lost.Sample[0] != victim || !strings.Contains(rep.Incremental.FromStartBecause, "verified rows of client 1") {
		t.Fatalf("check after the delete: failures %v, lost %+v, %+v", rep.Failures, rep.Lost, rep.Incremental)
	}
	pg.waitRows("lost", n+200)
	rep = mustCheckSince(t, pg, "lost", ledger, state, opts)
	fromCheckpoint(t, rep)
	if rep.OK || rep.Lost.Count != 1 || rep.Lost.Sample[0] != victim {
		t.Fatalf("the check after, from its checkpoint: lost %+v", rep.Lost)
	}
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	if full := mustCheck(t, pg, "lost", ledger, CheckOptions{}); full.Lost.Count != 1 || full.Lost.Sample[0] != victim {
		t.Fatalf("the final full check: lost %+v", full.Lost)
	}
}

// TestIncrementalCheckFindsADuplicate: in a table without the key, a
// second copy of a row the first check verified is a DUPLICATE in the
// next incremental check.
func TestIncrementalCheckFindsADuplicate(t *testing.T) {
	pg := startPGServer(t)
	pg.mustExec(`CREATE TABLE nokey (run text NOT NULL, client integer NOT NULL, seq bigint NOT NULL,
		server text NOT NULL DEFAULT coalesce(host(inet_server_addr()), 'local'),
		committed_at timestamptz NOT NULL DEFAULT clock_timestamp(), lsn pg_lsn DEFAULT pg_current_wal_lsn())`)
	dir := t.TempDir()
	ledger, state := filepath.Join(dir, "ledger.jsonl"), filepath.Join(dir, "ledger.check.json")
	startLiveWriter(t, pg, "nokey", ledger)
	n := pg.waitRows("nokey", 200)
	first := mustCheckSince(t, pg, "nokey", ledger, state, CheckOptions{})
	if !first.OK {
		t.Fatalf("first check: %v", first.Failures)
	}
	pg.mustExec(`INSERT INTO nokey SELECT * FROM nokey WHERE client = 2 AND seq = 3`)
	pg.waitRows("nokey", n+200)
	rep := mustCheckSince(t, pg, "nokey", ledger, state, CheckOptions{})
	want := Key{Run: first.Runs[0], Client: 2, Seq: 3}
	if rep.OK || rep.Duplicates.Count != 1 || rep.Duplicates.Sample[0] != want {
		t.Fatalf("check after the duplicate: failures %v, duplicates %+v, %+v", rep.Failures, rep.Duplicates, rep.Incremental)
	}
	t.Logf("after the duplicate: %+v", rep.Incremental)
}

// handWriter writes a ledger and the rows it acknowledges by hand: which
// server committed each and when.
type handWriter struct {
	t      *testing.T
	pg     *pgServer
	ledger *LedgerWriter
	table  string
	run    string
	seq    map[int]int64
}

func newHandWriter(t *testing.T, pg *pgServer, table, path string) *handWriter {
	t.Helper()
	pg.mustExec(createTableSQL(table))
	l, err := CreateLedger(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	h := &handWriter{t: t, pg: pg, ledger: l, table: table, run: "hand", seq: map[int]int64{}}
	h.append(Record{Kind: KindBegin, Run: h.run, At: t0, Table: table, Clients: 2})
	return h
}

func (h *handWriter) append(r Record) {
	h.t.Helper()
	if err := h.ledger.Append(r); err != nil {
		h.t.Fatal(err)
	}
}

// commit writes an acknowledged row of client by server at second at.
func (h *handWriter) commit(client int, server string, at float64) {
	h.t.Helper()
	h.seq[client]++
	k := Key{Run: h.run, Client: client, Seq: h.seq[client]}
	h.append(Record{Kind: KindTry, Run: k.Run, Client: k.Client, Seq: k.Seq, At: sec(at)})
	h.pg.mustExec(`INSERT INTO `+h.table+` (run, client, seq, server, committed_at) VALUES ($1, $2, $3, $4, $5)`,
		k.Run, k.Client, k.Seq, server, sec(at))
	h.append(Record{Kind: KindAck, Run: k.Run, Client: k.Client, Seq: k.Seq, At: sec(at), Server: server, ServerTime: sec(at)})
}

// TestIncrementalCheckSplitBrainAcrossTheCheckpoint: A commits, then B;
// the first check closes the split-brain books on both; A commits again
// 3 s after it left, within the 5 s window: the next check, from its
// checkpoint, reports the interleaving as the full check does.
func TestIncrementalCheckSplitBrainAcrossTheCheckpoint(t *testing.T) {
	pg := startPGServer(t)
	dir := t.TempDir()
	ledger, state := filepath.Join(dir, "ledger.jsonl"), filepath.Join(dir, "ledger.check.json")
	h := newHandWriter(t, pg, "sb", ledger)
	for i := range 20 {
		h.commit(1+i%2, "A", 0.1*float64(i)) // A until 1.9 s
	}
	for i := range 10 {
		h.commit(1+i%2, "B", 2.5+0.1*float64(i)) // B from 2.5 to 3.4 s
	}
	// Quiet until 5 s: the books close a second before.
	h.append(Record{Kind: KindTry, Run: h.run, Client: 1, Seq: h.seq[1] + 1, At: sec(5)})
	h.append(Record{Kind: KindUnknown, Run: h.run, Client: 1, Seq: h.seq[1] + 1, At: sec(5), Error: "timeout"})
	h.seq[1]++
	opts := CheckOptions{SplitBrainWindow: 5 * time.Second}
	if rep := mustCheckSince(t, pg, "sb", ledger, state, opts); !rep.OK {
		t.Fatalf("first check: %v", rep.Failures)
	}
	var st checkState
	if b, err := os.ReadFile(state); err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("reading the checkpoint: %v", err)
	}
	if servers := serversOf(st.SplitBrain.Runs); !slices.Equal(servers, []string{"A", "B"}) || len(st.SplitBrain.Open) != 0 {
		t.Fatalf("the checkpoint did not close the books on A and B: runs %+v, open %d", st.SplitBrain.Runs, len(st.SplitBrain.Open))
	}
	h.commit(2, "A", 4.9) // A again, 3 s after it left
	h.commit(1, "A", 5.5)
	rep := mustCheckSince(t, pg, "sb", ledger, state, opts)
	fromCheckpoint(t, rep)
	if len(rep.Interleavings) != 1 {
		t.Fatalf("interleavings %+v, failures %v", rep.Interleavings, rep.Failures)
	}
	il := rep.Interleavings[0]
	if il.Server != "A" || !slices.Equal(il.Others, []string{"B"}) || !il.LeftAt.Equal(sec(1.9)) || !il.ResumedAt.Equal(sec(4.9)) {
		t.Fatalf("interleaving %+v, want A<-B from 1.9 s to 4.9 s", il)
	}
	full := mustCheck(t, pg, "sb", ledger, CheckOptions{SplitBrainWindow: 5 * time.Second, Live: true})
	if got, want := reportJSON(t, rep), reportJSON(t, full); got != want {
		t.Fatalf("the incremental report differs from the full one:\n%s", diffLines(got, want))
	}
}

// TestIncrementalCheckEqualsFullOnARealTable checks a real writer's ledger
// and table, the server crashed and restarted under the writer (unknown
// attempts, a gap) and the writer restarted (a second run), as it grows:
// the ledger is copied up to points cut at random (some mid-line), and at
// two of them an old row is deleted. At every point the incremental
// check's report is the full check's.
func TestIncrementalCheckEqualsFullOnARealTable(t *testing.T) {
	pg := startPGServer(t)
	dir := t.TempDir()
	source := filepath.Join(dir, "source.jsonl")
	for run := range 2 {
		w := startLiveWriter(t, pg, "eq", source)
		n := pg.waitRows("eq", 300)
		if run == 0 {
			pg.crash()
			time.Sleep(500 * time.Millisecond)
			pg.start()
		}
		pg.waitRows("eq", n+300)
		if err := w.stop(); err != nil {
			t.Fatal(err)
		}
	}
	text, err := os.ReadFile(source)
	if err != nil {
		t.Fatal(err)
	}
	ledger, state := filepath.Join(dir, "ledger.jsonl"), filepath.Join(dir, "ledger.check.json")
	opts := CheckOptions{SplitBrainWindow: 5 * time.Second, Live: true}
	rng := rand.New(rand.NewSource(1)) // #nosec G404 -- reproducible cuts
	cuts := []int{len(text)}
	for range 11 {
		cuts = append(cuts, rng.Intn(len(text)))
	}
	slices.Sort(cuts)
	fromCheckpoints := 0
	for i, cut := range cuts {
		if err := os.WriteFile(ledger, text[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		if i == 4 || i == 8 {
			pg.mustExec(`DELETE FROM eq WHERE ctid = (SELECT ctid FROM eq ORDER BY seq, client LIMIT 1 OFFSET $1)`, 10*i)
		}
		got := mustCheckSince(t, pg, "eq", ledger, state, opts)
		want := mustCheck(t, pg, "eq", ledger, opts)
		if g, w := reportJSON(t, got), reportJSON(t, want); g != w {
			t.Fatalf("cut %d at byte %d (%+v): the incremental report differs from the full one:\n%s", i, cut, got.Incremental, diffLines(g, w))
		}
		if got.Incremental.FromStartBecause == "" {
			fromCheckpoints++
		}
		t.Logf("cut %d at byte %d: %d attempted, %d lost, %d unknown, %d later rows; %+v", i, cut, got.Attempted, got.Lost.Count,
			got.Unknown, got.LaterRows, *got.Incremental)
	}
	if fromCheckpoints < len(cuts)-4 {
		t.Errorf("only %d of %d checks went on from their checkpoint", fromCheckpoints, len(cuts))
	}
}

// TestIncrementalCheckCost grows a table and its ledger by the same
// number of writes between checks, as the chaos test's faults do, and
// logs what a full check and an incremental one take at each size: the
// incremental check's time follows what was written since, plus one
// aggregate pass over the table in the server. Figures, not assertions.
// TUSK_WORKLOAD_COST_STEPS and TUSK_WORKLOAD_COST_WRITES (per step) scale
// it (default 5 steps of 40000 writes).
func TestIncrementalCheckCost(t *testing.T) {
	steps, writes := envInt(t, "TUSK_WORKLOAD_COST_STEPS", 5), envInt(t, "TUSK_WORKLOAD_COST_WRITES", 40000)
	pg := startPGServer(t)
	pg.mustExec(createTableSQL("cost"))
	dir := t.TempDir()
	ledger, state := filepath.Join(dir, "ledger.jsonl"), filepath.Join(dir, "ledger.check.json")
	const clients = 8
	appendLedger(t, ledger, Record{Kind: KindBegin, Run: "cost", At: t0, Table: "cost", Clients: clients})
	opts := CheckOptions{SplitBrainWindow: 5 * time.Second, Live: true}
	t.Logf("%10s %10s %10s %14s %12s %12s %14s", "writes", "ledger MB", "full", "incremental", "rows read", "records", "checkpoint kB")
	for step := range steps {
		from, to := int64(step*writes/clients+1), int64((step+1)*writes/clients)
		synthesize(t, pg, ledger, clients, from, to)
		began := time.Now()
		full := mustCheck(t, pg, "cost", ledger, opts)
		fullTook := time.Since(began)
		began = time.Now()
		rep := mustCheckSince(t, pg, "cost", ledger, state, opts)
		took := time.Since(began)
		fi, err := os.Stat(ledger)
		if err != nil {
			t.Fatal(err)
		}
		sfi, err := os.Stat(state)
		if err != nil {
			t.Fatal(err)
		}
		if !full.OK || !rep.OK || rep.Rows != full.Rows {
			t.Fatalf("step %d: full %v, incremental %v", step, full.Failures, rep.Failures)
		}
		t.Logf("%10d %10.1f %10s %14s %12d %12d %14.0f", full.Rows, float64(fi.Size())/1e6, fullTook.Round(time.Millisecond),
			took.Round(time.Millisecond), rep.Incremental.RowsRead, rep.Incremental.Records, float64(sfi.Size())/1e3)
	}
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// synthesize writes seqs from…to of every client as the writer would, a
// commit every 100 µs (all by one server): the rows, and the try and ack
// records.
func synthesize(t *testing.T, pg *pgServer, ledger string, clients int, from, to int64) {
	t.Helper()
	at := func(client int, seq int64) time.Time {
		return t0.Add(time.Duration(seq*int64(clients)+int64(client)) * 100 * time.Microsecond)
	}
	pg.mustExec(`INSERT INTO cost (run, client, seq, server, committed_at)
		SELECT 'cost', c, s, '127.0.0.1', $1::timestamptz + (s * $2 + c) * interval '100 microseconds'
		FROM generate_series($3::bigint, $4::bigint) s, generate_series(1, $2) c`, t0, clients, from, to)
	var recs []Record
	for s := from; s <= to; s++ {
		for c := 1; c <= clients; c++ {
			recs = append(recs, Record{Kind: KindTry, Run: "cost", Client: c, Seq: s, At: at(c, s)},
				Record{Kind: KindAck, Run: "cost", Client: c, Seq: s, At: at(c, s), Server: "127.0.0.1", ServerTime: at(c, s), LSN: "0/3000060"})
		}
	}
	appendLedger(t, ledger, recs...)
}

func appendLedger(t *testing.T, path string, recs ...Record) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriter(f)
	enc := json.NewEncoder(bw)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(fmt.Errorf("closing the ledger: %w", err))
	}
}

// TestCommandCheckSince runs `tusk workload check --live --state` as the
// e2e tests do: the second check goes on from the first one's checkpoint;
// --state without --live is refused.
func TestCommandCheckSince(t *testing.T) {
	pg := startPGServer(t)
	dir := t.TempDir()
	ledger, state := filepath.Join(dir, "ledger.jsonl"), filepath.Join(dir, "ledger.check.json")
	if _, err := Write(context.Background(), WriteOptions{DSN: pg.DSN(), Clients: 2, Duration: time.Second, Table: "cli", Ledger: ledger}); err != nil {
		t.Fatal(err)
	}
	check := func(args ...string) (*CheckReport, error) {
		out, err := tusk(t, append([]string{"workload", "check", "--dsn", pg.DSN(), "--table", "cli", "--ledger", ledger,
			"--split-brain-window", "5s"}, args...)...)
		rep := &CheckReport{}
		if jerr := json.Unmarshal(out, rep); jerr != nil {
			return nil, fmt.Errorf("%w; report %s: %w", err, out, jerr)
		}
		return rep, err
	}
	for i := range 2 {
		rep, err := check("--live", "--state", state)
		if err != nil || !rep.OK || rep.Incremental == nil || (i == 1) != (rep.Incremental.LedgerFrom > 0) {
			t.Fatalf("check %d: %v, %+v", i+1, err, rep)
		}
	}
	if _, err := tusk(t, "workload", "check", "--dsn", pg.DSN(), "--table", "cli", "--ledger", ledger, "--state", state); err == nil {
		t.Fatal("--state without --live was taken")
	}
}
