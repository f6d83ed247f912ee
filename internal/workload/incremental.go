package workload

import (
	"cmp"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// An incremental check (CheckDatabaseSince) keeps, between one check and
// the next, what it proved of each client's attempts up to a verified
// seq, with the count and hash sum of their rows; the next check reads only
// the ledger's records and the table's rows above those seqs, and proves
// with one aggregate query that the verified rows are all still there,
// unchanged. This file is its pure part: from the state, the new records
// and what the check read of the table, the report and the next state.

const (
	// checkStateVersion changes when the state's meaning does: a state of
	// another version is not used.
	checkStateVersion = 1
	// checkpointSlack is how far behind the newest acknowledgement and the
	// oldest attempt still open a check closes the books of the gaps and
	// the split-brain rule: a later acknowledgement or commit that falls
	// before makes the next check a full one (the ledger's records are
	// written a moment after their clock is read; the servers' clocks may
	// be a little off the writer's).
	checkpointSlack = time.Second
	// staleAttempt: an attempt without an outcome this much older than the
	// ledger's newest record (its writer was killed mid-INSERT) no longer
	// holds the split-brain books open; if it commits after all, the next
	// check is a full one.
	staleAttempt = time.Minute
)

// checkState is what an incremental check keeps for the next one.
type checkState struct {
	Version          int           `json:"version"`
	Table            string        `json:"table"`
	SplitBrainWindow time.Duration `json:"splitBrainWindow"`
	GapThreshold     time.Duration `json:"gapThreshold"`
	Ledger           ledgerMark    `json:"ledger"`
	Runs             []string      `json:"runs,omitempty"`
	Clients          []clientMark  `json:"clients,omitempty"`
	// Pending are the ledger's records of the attempts above their
	// client's verified seq, in the ledger's order.
	Pending []Record `json:"pending,omitempty"`
	// Verified is the tally of the verified attempts and rows (its
	// per-client summaries are in Clients).
	Verified   tally           `json:"verified"`
	Gaps       gapState        `json:"gaps"`
	SplitBrain splitBrainState `json:"splitBrain"`
}

// clientMark is what a check proved of one client of one run.
type clientMark struct {
	Run    string `json:"run"`
	Client int    `json:"client"`
	// MaxTried is the highest seq of the client in the ledger.
	MaxTried int64 `json:"maxTried"`
	// Verified: the attempts 1…Verified all have their outcome in the
	// ledger, and were checked against the rows.
	Verified int64 `json:"verified"`
	// Rows are the rows at or below Verified, and Sum the sum of their
	// hashes (rowHashSQL), in decimal.
	Rows    int64         `json:"rows"`
	Sum     string        `json:"sum"`
	Summary ClientSummary `json:"summary"`
}

func newCheckState(table string, opts CheckOptions) *checkState {
	return &checkState{Version: checkStateVersion, Table: table, SplitBrainWindow: opts.SplitBrainWindow, GapThreshold: opts.GapThreshold}
}

// fresh says nothing was checked yet.
func (st *checkState) fresh() bool { return st.Ledger.Offset == 0 && len(st.Clients) == 0 }

// snapshot is what a check read of the table in one transaction: every
// (run, client) with the count of its rows, and the count and hash sum of
// those at or below the client's verified seq; and the rows above it, of
// the ledger's runs.
type snapshot struct {
	groups []groupCount
	rows   []hashedRow
}

type groupCount struct {
	id       clientKey
	rows     int64
	verified int64
	sum      *big.Int
}

type hashedRow struct {
	Row
	hash int64
}

// IncrementalInfo says what an incremental check (CheckDatabaseSince)
// read, besides what an earlier check verified.
type IncrementalInfo struct {
	// LedgerFrom is the byte of the ledger the check read from, Records
	// the records it read.
	LedgerFrom int64 `json:"ledgerFrom"`
	Records    int   `json:"records"`
	// VerifiedRows are the rows verified by earlier checks, proved there
	// and unchanged by their count and hash sum; RowsRead the others read.
	VerifiedRows int64 `json:"verifiedRows"`
	RowsRead     int   `json:"rowsRead"`
	// FromStartBecause says why the check read the ledger and the table
	// from the start (the first check, or the checkpoint could not be
	// used); FullBecause why it was a full check (CheckDatabase's) and
	// kept no checkpoint.
	FromStartBecause string `json:"fromStartBecause,omitempty"`
	FullBecause      string `json:"fullBecause,omitempty"`
}

// marks indexes the clients' marks.
func (st *checkState) marks() map[clientKey]clientMark {
	out := make(map[clientKey]clientMark, len(st.Clients))
	for _, m := range st.Clients {
		out[clientKey{m.Run, m.Client}] = m
	}
	return out
}

// runsWith are the ledger's runs once recs, the records read since, are
// added.
func (st *checkState) runsWith(recs []Record) map[string]bool {
	runs := map[string]bool{}
	for _, r := range st.Runs {
		runs[r] = true
	}
	for _, r := range recs {
		if r.Kind == KindBegin {
			runs[r.Run] = true
		}
	}
	return runs
}

// validate says what in recs, the records read since, an incremental
// check cannot take: an attempt of a run the ledger never began (whose
// rows count as another run's until it does), or a record of an attempt
// verified already.
func (st *checkState) validate(recs []Record) string {
	runs, marks := st.runsWith(recs), st.marks()
	for _, r := range recs {
		if !r.Kind.attempt() {
			continue
		}
		if !runs[r.Run] {
			return fmt.Sprintf("the ledger has attempts of run %s, which it does not begin", r.Run)
		}
		if r.Seq <= marks[clientKey{r.Run, r.Client}].Verified {
			return fmt.Sprintf("the ledger has a new %s record of seq %d of client %d of run %s, verified already", r.Kind, r.Seq, r.Client, r.Run)
		}
	}
	return ""
}

// verifiedMarks are the (run, client, verified seq) whose rows the
// aggregate query counts and sums.
func (st *checkState) verifiedMarks() []clientMark {
	return slices.DeleteFunc(slices.Clone(st.Clients), func(m clientMark) bool { return m.Verified == 0 })
}

// rowsToRead are the clients of the ledger's runs with rows above their
// verified seq, each with that seq.
func (st *checkState) rowsToRead(groups []groupCount, runs map[string]bool) []clientMark {
	marks := st.marks()
	var out []clientMark
	for _, g := range groups {
		if runs[g.id.run] && g.rows > g.verified {
			out = append(out, clientMark{Run: g.id.run, Client: g.id.client, Verified: marks[g.id].Verified})
		}
	}
	return out
}

// verify says what in snap contradicts the state: the verified rows of a
// client whose count or hash sum changed (a row lost, added or altered),
// or a client whose rows do not add up in the snapshot.
func (st *checkState) verify(snap *snapshot, runs map[string]bool) string {
	groups := map[clientKey]groupCount{}
	for _, g := range snap.groups {
		groups[g.id] = g
	}
	for _, m := range st.verifiedMarks() {
		g := groups[clientKey{m.Run, m.Client}]
		if g.verified != m.Rows || g.sum == nil && m.Sum != "0" || g.sum != nil && g.sum.String() != m.Sum {
			return fmt.Sprintf("the %d verified rows of client %d of run %s (seq 1 to %d) changed: %d rows now, or another hash sum",
				m.Rows, m.Client, m.Run, m.Verified, g.verified)
		}
	}
	read := map[clientKey]int64{}
	for _, r := range snap.rows {
		read[clientKey{r.Run, r.Client}]++
	}
	for _, g := range snap.groups {
		if runs[g.id.run] && g.rows != g.verified+read[g.id] {
			return fmt.Sprintf("client %d of run %s has %d rows, %d verified and %d read", g.id.client, g.id.run, g.rows, g.verified, read[g.id])
		}
	}
	return ""
}

// advance is an incremental check: the state's verified attempts and rows
// (which snap proves unchanged), and recs (the ledger's records since) and
// snap's rows (those above the verified seqs) checked as Check would. It
// returns the report, the state for the next check, and, when it cannot
// decide, why: then only a full check can.
func (st *checkState) advance(recs []Record, snap *snapshot, opts CheckOptions) (*CheckReport, *checkState, string) {
	runs := st.runsWith(recs)
	if why := cmp.Or(st.validate(recs), st.verify(snap, runs)); why != "" {
		return nil, nil, why
	}
	a := st.newAdvance(recs, snap, opts)
	rep := a.report(snap, runs)
	next := a.nextState()
	var ok bool
	rep.Gaps, next.Gaps, ok = st.Gaps.extend(ackTimes(recs), opts.GapThreshold, checkpointSlack)
	if !ok {
		return nil, nil, "an acknowledgement read since is older than the last one the gaps were closed at"
	}
	if opts.SplitBrainWindow > 0 {
		rep.SplitBrainWindow = opts.SplitBrainWindow.Seconds()
		verified, open := a.c.commits(a.rows, a.verified), a.c.commits(a.rows, a.open)
		rep.Interleavings, next.SplitBrain, ok = st.SplitBrain.extend(verified, open, a.through(open), opts.SplitBrainWindow)
		if !ok {
			return nil, nil, "a commit read since is older than the last one the split-brain rule was closed at"
		}
	}
	verdict(rep, opts.MaxLost)
	return rep, next, ""
}

// advancing is one advance's work: the checker of the records and rows
// above the verified seqs, and how far each client's verified seq moves.
type advancing struct {
	st      *checkState
	recs    []Record // the pending records and those read since
	newRecs []Record
	rows    []Row
	hashes  []int64
	c       *checker
	upTo    map[clientKey]int64 // the next verified seqs
	now     tally               // the keys verified now
	still   tally               // the keys above the next verified seqs
}

func (st *checkState) newAdvance(recs []Record, snap *snapshot, opts CheckOptions) *advancing {
	a := &advancing{st: st, recs: slices.Concat(st.Pending, recs), newRecs: recs, c: newChecker(opts), upTo: map[clientKey]int64{}}
	for _, r := range snap.rows {
		a.rows, a.hashes = append(a.rows, r.Row), append(a.hashes, r.hash)
	}
	a.c.rep.Runs = slices.Clone(st.Runs)
	for _, r := range st.Runs {
		a.c.runs[r] = true
	}
	for _, m := range st.Clients {
		a.c.maxTried[clientKey{m.Run, m.Client}] = m.MaxTried
	}
	a.c.indexLedger(a.recs)
	a.c.indexRows(a.rows)
	marks := st.marks()
	for id := range a.c.maxTried {
		a.upTo[id] = a.c.settled(id, marks[id].Verified)
	}
	a.now, a.still = a.c.tally(a.verified), a.c.tally(a.open)
	return a
}

// settled is the highest seq up to which the client's attempts from
// verified on all have their outcome in the ledger. A seq with no record
// below the client's highest one was never tried (an ordinary client
// skips the seq of a connection that failed: nothing is written for it,
// and a client writes its records in order), so it settles as it is: a
// row with that seq is the full check's phantom either way, and one that
// appears later changes the verified rows' count.
func (c *checker) settled(id clientKey, verified int64) int64 {
	s := verified
	for {
		o := c.attempts[Key{Run: id.run, Client: id.client, Seq: s + 1}]
		switch {
		case o == nil && s+1 < c.maxTried[id]:
		case o == nil || o.kind == KindTry:
			return s
		}
		s++
	}
}

func (a *advancing) verified(k Key) bool { return k.Seq <= a.upTo[clientKey{k.Run, k.Client}] }
func (a *advancing) open(k Key) bool     { return !a.verified(k) }

// report is the check's report but for the gaps, the split-brain rule and
// the verdict.
func (a *advancing) report(snap *snapshot, runs map[string]bool) *CheckReport {
	rep := &a.c.rep
	var total tally
	total.add(a.st.Verified)
	for _, m := range a.st.Clients {
		if m.Verified > 0 {
			total.addSummary(m.Summary)
		}
	}
	total.add(a.now)
	total.add(a.still)
	total.report(rep, a.c.opts.MaxLost)
	for _, g := range snap.groups {
		if !runs[g.id.run] {
			rep.OtherRunsRows += int(g.rows)
		}
	}
	info := &IncrementalInfo{Records: len(a.newRecs), RowsRead: len(a.rows)}
	for _, m := range a.st.Clients {
		info.VerifiedRows += m.Rows
	}
	rep.Incremental = info
	return rep
}

// nextState is the state for the next check but for its ledger mark, gaps
// and split-brain rule.
func (a *advancing) nextState() *checkState {
	next := &checkState{Version: a.st.Version, Table: a.st.Table, SplitBrainWindow: a.st.SplitBrainWindow,
		GapThreshold: a.st.GapThreshold, Runs: a.c.rep.Runs}
	next.Verified.add(a.st.Verified)
	now := a.now
	clients := now.clients
	now.clients = nil
	next.Verified.add(now)
	for _, r := range a.recs {
		if r.Kind.attempt() && a.open(Key{Run: r.Run, Client: r.Client, Seq: r.Seq}) {
			next.Pending = append(next.Pending, r)
		}
	}
	marks, counts := a.st.marks(), a.rowsVerifiedNow()
	for id, maxTried := range a.c.maxTried {
		m := marks[id]
		m.Run, m.Client, m.MaxTried, m.Verified = id.run, id.client, maxTried, a.upTo[id]
		if s := clients[id]; s != nil {
			m.Summary = mergeSummaries(m.Summary, *s)
		}
		sum, ok := new(big.Int).SetString(cmp.Or(m.Sum, "0"), 10)
		if !ok { // loadCheckState refuses such a state
			sum = new(big.Int)
		}
		if c := counts[id]; c != nil {
			m.Rows += c.rows
			sum.Add(sum, c.sum)
		}
		m.Sum = sum.String()
		next.Clients = append(next.Clients, m)
	}
	slices.SortFunc(next.Clients, func(x, y clientMark) int {
		return cmp.Or(cmp.Compare(x.Run, y.Run), cmp.Compare(x.Client, y.Client))
	})
	return next
}

// rowsVerifiedNow counts and sums the hashes of the rows read at or below
// their client's next verified seq.
func (a *advancing) rowsVerifiedNow() map[clientKey]*groupCount {
	out := map[clientKey]*groupCount{}
	for i, r := range a.rows {
		id := clientKey{r.Run, r.Client}
		if r.Seq > a.upTo[id] {
			continue
		}
		if out[id] == nil {
			out[id] = &groupCount{id: id, sum: new(big.Int)}
		}
		out[id].rows++
		out[id].sum.Add(out[id].sum, big.NewInt(a.hashes[i]))
	}
	return out
}

// mergeSummaries merges b, the summary of more keys of a client, into a,
// its summary so far (zero when there was none).
func mergeSummaries(a, b ClientSummary) ClientSummary {
	var t tally
	if a != (ClientSummary{}) {
		t.addSummary(a)
	}
	t.addSummary(b)
	return *t.clients[clientKey{b.Run, b.Client}]
}

// through is the time up to which the split-brain rule can close its
// books: a little before the oldest commit not verified yet, the oldest
// attempt still open (whose commit, if it comes, comes after its try) and
// the newest record (the attempts to come), whichever is first. Zero when
// there is nothing to go by.
func (a *advancing) through(open []Commit) time.Time {
	var newest, first time.Time
	for _, r := range a.newRecs {
		if r.At.After(newest) {
			newest = r.At
		}
	}
	earlier := func(t time.Time) {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	for _, r := range a.recs {
		if r.Kind == KindTry && a.open(Key{Run: r.Run, Client: r.Client, Seq: r.Seq}) &&
			(newest.IsZero() || r.At.After(newest.Add(-staleAttempt))) {
			earlier(r.At)
		}
	}
	for _, c := range open {
		earlier(c.At)
	}
	if !newest.IsZero() {
		earlier(newest)
	}
	if first.IsZero() {
		return first
	}
	return first.Add(-checkpointSlack)
}
