package workload

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/big"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// sim is a simulated writer and its table, with the faults the checker
// must see: failovers (some back and forth within the split-brain
// window), pauses, rows lost, duplicated, altered, added for clients and
// runs the ledger does not know, commits whose acknowledgement was lost,
// late commits of unknown attempts, records written long after their
// clock was read, and a writer killed and restarted.
type sim struct {
	rng     *rand.Rand
	now     time.Time
	server  string
	run     string
	runs    int
	clients []*simClient
	ledger  []Record
	table   []Row
}

type simClient struct {
	id       int
	seq      int64
	inFlight *Key
	row      bool // the attempt in flight committed
}

func newSim(seed int64) *sim {
	s := &sim{rng: rand.New(rand.NewSource(seed)), now: t0, server: "A"} // #nosec G404 -- a reproducible test
	s.begin()
	return s
}

func (s *sim) begin() {
	s.runs++
	s.run = fmt.Sprintf("run%d", s.runs)
	s.clients = nil
	for i := range 3 {
		s.clients = append(s.clients, &simClient{id: i + 1})
	}
	s.ledger = append(s.ledger, Record{Kind: KindBegin, Run: s.run, At: s.now, Table: "t", Clients: 3})
}

func (s *sim) step() {
	s.now = s.now.Add(time.Duration(1+s.rng.Intn(20)) * time.Millisecond)
	// Per 100000 steps (a check comes every 50 to 350).
	switch r := s.rng.Intn(100000); {
	case r < 60: // a failover, or a failback
		s.server = map[string]string{"A": "B", "B": "A"}[s.server]
	case r < 200:
		s.now = s.now.Add(2 * time.Second)
	case r < 260 && len(s.table) > 0: // a row lost, old or new
		i := s.rng.Intn(len(s.table))
		s.table = slices.Delete(s.table, i, i+1)
	case r < 300 && len(s.table) > 0: // a duplicate (a table without the key)
		s.table = append(s.table, s.table[s.rng.Intn(len(s.table))])
	case r < 340:
		s.table = append(s.table, Row{Run: s.run, Client: 9, Seq: 1, Server: s.server, CommittedAt: s.now})
	case r < 380:
		s.table = append(s.table, Row{Run: "other", Client: 1, Seq: int64(r), Server: s.server, CommittedAt: s.now})
	case r < 400: // the writer killed mid-INSERT and restarted
		s.begin()
	case r < 420 && len(s.table) > 0: // a row altered: another server's
		s.table[s.rng.Intn(len(s.table))].Server = "C"
	}
	c := s.clients[s.rng.Intn(len(s.clients))]
	if c.inFlight == nil {
		s.try(c)
	} else {
		s.outcome(c)
	}
}

func (s *sim) record(kind Kind, k Key) Record {
	// A record's clock is read a moment before it is written; now and
	// then, long before (a writer descheduled), past the checkpoint.
	at := s.now.Add(-time.Duration(s.rng.Intn(3)) * time.Millisecond)
	if s.rng.Intn(2000) == 0 {
		at = s.now.Add(-3 * checkpointSlack)
	}
	return Record{Kind: kind, Run: k.Run, Client: k.Client, Seq: k.Seq, At: at}
}

func (s *sim) try(c *simClient) {
	c.seq++
	if s.rng.Intn(50) == 0 { // an ordinary client's failed connect: its seq is skipped, unrecorded
		c.seq++
	}
	k := Key{Run: s.run, Client: c.id, Seq: c.seq}
	c.inFlight, c.row = &k, s.rng.Intn(20) > 0
	s.ledger = append(s.ledger, s.record(KindTry, k))
	if c.row {
		s.table = append(s.table, Row{Run: k.Run, Client: k.Client, Seq: k.Seq, Server: s.server, CommittedAt: s.now})
	}
}

func (s *sim) outcome(c *simClient) {
	k := *c.inFlight
	c.inFlight = nil
	switch {
	case c.row && s.rng.Intn(10) > 0:
		r := s.record(KindAck, k)
		i := slices.IndexFunc(s.table, func(r Row) bool { return r.Run == k.Run && r.Client == k.Client && r.Seq == k.Seq })
		r.Server, r.ServerTime = s.server, s.now
		if i >= 0 {
			r.Server, r.ServerTime = s.table[i].Server, s.table[i].CommittedAt
		}
		s.ledger = append(s.ledger, r)
	default:
		r := s.record(KindUnknown, k)
		r.Error = "timeout"
		s.ledger = append(s.ledger, r)
		if !c.row && s.rng.Intn(10) == 0 {
			// It commits after all, visible only now; now and then with
			// the time its INSERT ran at, long before.
			at := s.now
			if s.rng.Intn(4) == 0 {
				at = at.Add(-3 * checkpointSlack)
			}
			s.table = append(s.table, Row{Run: k.Run, Client: k.Client, Seq: k.Seq, Server: s.server, CommittedAt: at})
		}
	}
}

// simHash stands for rowHashSQL.
func simHash(r Row) int64 {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s|%d|%d", r.Server, r.Seq, r.CommittedAt.UnixNano())
	return int64(h.Sum64()) // a hash: wrapped on purpose
}

// simSnapshot reads the table as readSnapshot does.
func simSnapshot(st *checkState, runs map[string]bool, table []Row) *snapshot {
	verified := map[clientKey]int64{}
	for _, m := range st.verifiedMarks() {
		verified[clientKey{m.Run, m.Client}] = m.Verified
	}
	groups := map[clientKey]*groupCount{}
	var ids []clientKey
	for _, r := range table {
		id := clientKey{r.Run, r.Client}
		g := groups[id]
		if g == nil {
			g = &groupCount{id: id, sum: new(big.Int)}
			groups[id] = g
			ids = append(ids, id)
		}
		g.rows++
		if v, ok := verified[id]; ok && r.Seq <= v {
			g.verified++
			g.sum.Add(g.sum, big.NewInt(simHash(r)))
		}
	}
	snap := &snapshot{}
	for _, id := range ids {
		snap.groups = append(snap.groups, *groups[id])
	}
	above := map[clientKey]int64{}
	for _, m := range st.rowsToRead(snap.groups, runs) {
		above[clientKey{m.Run, m.Client}] = m.Verified
	}
	for _, r := range table {
		if v, ok := above[clientKey{r.Run, r.Client}]; ok && r.Seq > v {
			snap.rows = append(snap.rows, hashedRow{Row: r, hash: simHash(r)})
		}
	}
	return snap
}

// checkSince is CheckDatabaseSince on the simulated table: from st with
// the records since, or from the start when that cannot decide.
func checkSince(t *testing.T, st *checkState, since, all []Record, table []Row, opts CheckOptions) (*CheckReport, *checkState, string) {
	t.Helper()
	rep, next, why := st.advance(since, simSnapshot(st, st.runsWith(since), table), opts)
	if why == "" {
		return rep, next, ""
	}
	fresh := newCheckState("t", opts)
	rep, next, why2 := fresh.advance(all, simSnapshot(fresh, fresh.runsWith(all), table), opts)
	if why2 != "" {
		t.Fatalf("a check from the start could not decide: %s", why2)
	}
	return rep, next, why
}

// roundTrip passes the state through its file's encoding.
func roundTrip(t *testing.T, st *checkState) *checkState {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	out := &checkState{}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func reportJSON(t *testing.T, rep *CheckReport) string {
	t.Helper()
	r := *rep
	r.Incremental = nil
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestIncrementalEqualsFull checks simulated runs again and again, each
// check reading the ledger up to a little before its end and the table
// after (as a live check does): the incremental check's report is always
// the full check's, and most checks decide from their checkpoint.
func TestIncrementalEqualsFull(t *testing.T) {
	opts := CheckOptions{Live: true, SplitBrainWindow: 5 * time.Second, GapThreshold: time.Second}
	var incremental, fromStart, failing, interleaved int
	reasons := map[string]int{}
	for seed := range int64(40) {
		s := newSim(seed)
		st, cut := newCheckState("t", opts), 0
		for check := range 12 {
			for range 50 + s.rng.Intn(300) {
				s.step()
			}
			next := max(cut, len(s.ledger)-s.rng.Intn(4))
			want := Check(s.ledger[:next], s.table, opts)
			got, nextState, why := checkSince(t, st, s.ledger[cut:next], s.ledger[:next], s.table, opts)
			if g, w := reportJSON(t, got), reportJSON(t, want); g != w {
				t.Fatalf("seed %d, check %d (%s): the incremental report differs from the full one:\n%s", seed, check, why, diffLines(g, w))
			}
			if why == "" {
				incremental++
			} else {
				fromStart++
				reasons[strings.Map(func(r rune) rune {
					if r >= '0' && r <= '9' {
						return -1
					}
					return r
				}, why)]++
			}
			if !want.OK {
				failing++
			}
			if len(want.Interleavings) > 0 {
				interleaved++
			}
			st, cut = roundTrip(t, nextState), next
		}
	}
	t.Logf("%d checks from the checkpoint, %d from the start %v; %d reports failing, %d with interleavings",
		incremental, fromStart, reasons, failing, interleaved)
	if incremental < 3*fromStart || failing == 0 || interleaved == 0 {
		t.Errorf("the simulation does not exercise the incremental check enough")
	}
}

// TestVerifiedSeqStepsOverSkippedSeqs: the seq of an attempt never made
// (an ordinary client's failed connect) does not hold the client's verified
// seq back, which would make every later check read all its rows again
// (seen in CI: the ordinary client's stuck at 36); a row that appears at
// that seq later is still found.
func TestVerifiedSeqStepsOverSkippedSeqs(t *testing.T) {
	opts := CheckOptions{Live: true, SplitBrainWindow: 5 * time.Second, GapThreshold: time.Second}
	ledger := []Record{{Kind: KindBegin, Run: "r", At: t0, Table: "t", Clients: 1}}
	var table []Row
	for _, seq := range []int64{1, 2, 4, 5, 7} { // 3 and 6 never tried
		at := t0.Add(time.Duration(seq) * 100 * time.Millisecond)
		ledger = append(ledger, Record{Kind: KindTry, Run: "r", Client: 1, Seq: seq, At: at},
			Record{Kind: KindAck, Run: "r", Client: 1, Seq: seq, At: at, Server: "A", ServerTime: at})
		table = append(table, Row{Run: "r", Client: 1, Seq: seq, Server: "A", CommittedAt: at})
	}
	st := newCheckState("t", opts)
	rep, next, why := checkSince(t, st, ledger, ledger, table, opts)
	if !rep.OK || why != "" {
		t.Fatalf("first check: OK %v, from the start because %q", rep.OK, why)
	}
	if got := next.marks()[clientKey{"r", 1}].Verified; got != 7 {
		t.Fatalf("verified seq %d after the first check, want 7 (past the seqs never tried)", got)
	}
	// A row at a seq never tried appears: the next check must report it.
	table = append(table, Row{Run: "r", Client: 1, Seq: 3, Server: "A", CommittedAt: t0.Add(time.Second)})
	rep, _, _ = checkSince(t, roundTrip(t, next), nil, ledger, table, opts)
	if rep.Phantoms.Count != 1 {
		t.Errorf("the row at seq 3, never tried, is not reported as a phantom: %+v", rep.Phantoms)
	}
	if g, w := reportJSON(t, rep), reportJSON(t, Check(ledger, table, opts)); g != w {
		t.Fatalf("after a row at a skipped seq appeared, the incremental report differs from the full one:\n%s", diffLines(g, w))
	}
}

// diffLines shows the first lines where got and want differ.
func diffLines(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d: got %s\nwant %s\n(got %d lines, want %d)", i+1, g[i], w[i], len(g), len(w))
		}
	}
	return fmt.Sprintf("got %d lines, want %d", len(g), len(w))
}

// TestCheckStateFile: a missing, unreadable or foreign checkpoint makes a
// check start from the start, saying why; a saved one is read back.
func TestCheckStateFile(t *testing.T) {
	opts := CheckOptions{Live: true, SplitBrainWindow: 5 * time.Second, GapThreshold: time.Second}
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	if st, why := loadCheckState(path, "t", opts); !st.fresh() || why != "no checkpoint yet" {
		t.Fatalf("no file: %+v, %q", st, why)
	}
	st := newCheckState("t", opts)
	st.Ledger.Offset = 100
	st.Clients = []clientMark{{Run: "r", Client: 1, Verified: 3, Rows: 3, Sum: "-12345678901234567890"}}
	if err := st.save(path); err != nil {
		t.Fatal(err)
	}
	if got, why := loadCheckState(path, "t", opts); why != "" || got.Ledger.Offset != 100 || !slices.Equal(got.Clients, st.Clients) {
		t.Fatalf("read back: %+v, %q", got, why)
	}
	for name, c := range map[string]struct {
		table string
		opts  CheckOptions
		file  string
		want  string
	}{
		"another table":  {table: "u", opts: opts, want: "another version, table"},
		"another window": {table: "t", opts: CheckOptions{SplitBrainWindow: time.Second, GapThreshold: time.Second}, want: "another version, table"},
		"garbage":        {table: "t", opts: opts, file: `{"version":`, want: "does not parse"},
		"a bad sum": {table: "t", opts: opts, file: `{"version":1,"table":"t","splitBrainWindow":5000000000,"gapThreshold":1000000000,` +
			`"clients":[{"run":"r","client":1,"verified":1,"sum":"x"}]}`, want: "is not a number"},
	} {
		if c.file != "" {
			if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if got, why := loadCheckState(path, c.table, c.opts); !got.fresh() || !strings.Contains(why, c.want) {
			t.Errorf("%s: %+v, %q; want a fresh state because %q", name, got, why, c.want)
		}
	}
}

// TestReadLedgerSince reads a ledger that grows, a line cut short at the
// end of a read included; a ledger replaced or cut since is not read on.
func TestReadLedgerSince(t *testing.T) {
	recs := testLedgerRecords()
	text := writeTestLedger(t, recs)
	path := filepath.Join(t.TempDir(), "ledger")
	second := strings.Index(text, "\n") + 1
	cut := second + 10 // into the second line
	if err := os.WriteFile(path, []byte(text[:cut]), 0o600); err != nil {
		t.Fatal(err)
	}
	got, mark, info, why, err := readLedgerSince(path, ledgerMark{})
	if err != nil || why != "" || !slices.Equal(got, recs[:1]) || !info.TruncatedTail || mark.Offset != int64(second) {
		t.Fatalf("first read: %v %q, %d records, %+v, mark %+v", err, why, len(got), info, mark)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	got, next, info, why, err := readLedgerSince(path, mark)
	if err != nil || why != "" || !slices.Equal(got, recs[1:]) || info.TruncatedTail || next.Offset != int64(len(text)) {
		t.Fatalf("second read: %v %q, %+v, %+v, mark %+v", err, why, got, info, next)
	}
	other := strings.Replace(text, `"r1"`, `"r2"`, 1)
	for name, content := range map[string]string{"replaced": other, "cut": text[:len(text)/2]} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, _, why, err := readLedgerSince(path, next); err != nil || why == "" {
			t.Errorf("a ledger %s: read on (%v)", name, err)
		}
	}
}

// TestIncrementalRefusesRecordsItCannotPlace: a new record of an attempt
// verified already, or of a run the ledger never began, sends the check
// back to the start.
func TestIncrementalRefusesRecordsItCannotPlace(t *testing.T) {
	opts := CheckOptions{Live: true, GapThreshold: time.Second}
	recs := ledger("ack 1 1 A 1", "ack 1 2 A 2")
	table := rows("1 1 A 1", "1 2 A 2")
	st := newCheckState("t", opts)
	rep, next, why := st.advance(recs, simSnapshot(st, st.runsWith(recs), table), opts)
	if why != "" || !rep.OK || next.Clients[0].Verified != 2 {
		t.Fatalf("first check: %q, %+v, %+v", why, rep, next.Clients)
	}
	for name, more := range map[string][]Record{
		"a verified seq again": {{Kind: KindTry, Run: "r", Client: 1, Seq: 2, At: sec(3)}},
		"a run not begun":      {{Kind: KindTry, Run: "s", Client: 1, Seq: 1, At: sec(3)}},
	} {
		if _, _, why := next.advance(more, simSnapshot(next, next.runsWith(more), table), opts); why == "" {
			t.Errorf("%s: taken", name)
		}
	}
}
