package workload

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Row is a row of the workload's table, as the checker reads it back.
type Row struct {
	Run         string
	Client      int
	Seq         int64
	Server      string
	CommittedAt time.Time
}

// Key names an attempt: one (run, client, seq).
type Key struct {
	Run    string `json:"run"`
	Client int    `json:"client"`
	Seq    int64  `json:"seq"`
}

func (k Key) compare(o Key) int {
	return cmp.Or(cmp.Compare(k.Run, o.Run), cmp.Compare(k.Client, o.Client), cmp.Compare(k.Seq, o.Seq))
}

// maxSample bounds the keys a report lists; counts are always complete.
// Lost rows are listed up to MaxLost too, so that a caller that bounds the
// loss otherwise (by when each was acknowledged) can judge every tolerated
// one.
const maxSample = 100

// KeyList is a count of keys and the first of them.
type KeyList struct {
	Count  int   `json:"count"`
	Sample []Key `json:"sample,omitempty"`
}

func newKeyList(keys []Key) KeyList { return newKeyListOf(keys, maxSample) }

// newKeyListOf lists at most limit keys.
func newKeyListOf(keys []Key, limit int) KeyList {
	slices.SortFunc(keys, Key.compare)
	return KeyList{Count: len(keys), Sample: keys[:min(len(keys), limit)]}
}

// ClientSummary compares, for one client of one run, what the ledger says
// with what the table holds.
type ClientSummary struct {
	Run          string `json:"run"`
	Client       int    `json:"client"`
	MaxAttempted int64  `json:"maxAttempted"`
	MaxAcked     int64  `json:"maxAcked"`
	MaxPresent   int64  `json:"maxPresent"`
	Lost         int    `json:"lost"`
}

// CheckOptions configure Check.
type CheckOptions struct {
	// MaxLost is how many lost rows are tolerated (asynchronous
	// replication); zero for synchronous mode.
	MaxLost int
	// SplitBrainWindow turns on the interleaving rule when positive.
	SplitBrainWindow time.Duration
	// GapThreshold: gaps longer than this are listed; default 1 s.
	GapThreshold time.Duration
	// Live says the writer may still be running: the ledger was read before
	// the rows, so a row whose seq is above the highest its client had
	// attempted in the ledger is a later attempt, not a phantom. It is
	// counted in LaterRows and left out of every rule; a phantom at or below
	// that seq still fails.
	Live bool
}

// CheckReport is the checker's verdict; OK is false when a rule is broken,
// and Failures says which.
type CheckReport struct {
	OK       bool       `json:"ok"`
	Failures []string   `json:"failures,omitempty"`
	Runs     []string   `json:"runs"`
	Ledger   LedgerInfo `json:"ledger"`
	// Ledger counts.
	Attempted    int `json:"attempted"`
	Acknowledged int `json:"acknowledged"`
	Unknown      int `json:"unknown"`
	// Rows of the ledger's runs in the table, and of other runs (ignored).
	Rows          int `json:"rows"`
	OtherRunsRows int `json:"otherRunsRows"`
	// LaterRows are rows attempted after the ledger was read (Live only).
	LaterRows int `json:"laterRows,omitempty"`
	// The rules.
	Lost           KeyList `json:"lost"`
	Duplicates     KeyList `json:"duplicates"`
	Rejected       KeyList `json:"rejected"`
	Phantoms       KeyList `json:"phantoms"`
	UnknownPresent int     `json:"unknownPresent"`
	UnknownAbsent  int     `json:"unknownAbsent"`
	// AckedWithWarning lists the acknowledged rows the server warned about
	// (a cancelled wait for synchronous replication): if lost, that is
	// PostgreSQL's documented caveat, not the operator's doing.
	AckedWithWarning KeyList         `json:"ackedWithWarning"`
	Clients          []ClientSummary `json:"clients"`
	Gaps             GapReport       `json:"gaps"`
	// SplitBrainWindow is in seconds; zero when the rule was off.
	SplitBrainWindow float64        `json:"splitBrainWindowSeconds,omitempty"`
	Interleavings    []Interleaving `json:"interleavings,omitempty"`
	// Incremental says what an incremental check read (CheckDatabaseSince;
	// nil for the others).
	Incremental *IncrementalInfo `json:"incremental,omitempty"`
}

// outcome is what the ledger knows of one attempt.
type outcome struct {
	kind       Kind // KindTry when the writer stopped before recording an outcome
	server     string
	serverTime time.Time
	warning    string
}

// checker holds one Check's indexes.
type checker struct {
	opts     CheckOptions
	attempts map[Key]*outcome
	maxTried map[clientKey]int64
	runs     map[string]bool
	present  map[Key]int
	rep      CheckReport
}

func newChecker(opts CheckOptions) *checker {
	return &checker{opts: opts, attempts: map[Key]*outcome{}, maxTried: map[clientKey]int64{}, runs: map[string]bool{}, present: map[Key]int{}}
}

// Check applies the rules of the package documentation to a ledger and the
// rows read back.
func Check(recs []Record, rows []Row, opts CheckOptions) *CheckReport {
	setDefault(&opts.GapThreshold, time.Second)
	c := newChecker(opts)
	c.indexLedger(recs)
	c.indexRows(rows)
	t := c.tally(anyKey)
	t.report(&c.rep, opts.MaxLost)
	c.rep.Gaps = Gaps(ackTimes(recs), opts.GapThreshold)
	if opts.SplitBrainWindow > 0 {
		c.rep.SplitBrainWindow = opts.SplitBrainWindow.Seconds()
		c.rep.Interleavings = Interleavings(c.commits(rows, anyKey), opts.SplitBrainWindow)
	}
	verdict(&c.rep, opts.MaxLost)
	return &c.rep
}

func anyKey(Key) bool { return true }

func (c *checker) indexLedger(recs []Record) {
	for _, r := range recs {
		if r.Kind == KindBegin {
			if !c.runs[r.Run] {
				c.rep.Runs = append(c.rep.Runs, r.Run)
			}
			c.runs[r.Run] = true
			continue
		}
		if !r.Kind.attempt() {
			continue
		}
		k := Key{Run: r.Run, Client: r.Client, Seq: r.Seq}
		id := clientKey{r.Run, r.Client}
		c.maxTried[id] = max(c.maxTried[id], r.Seq)
		o := c.attempts[k]
		if o == nil {
			o = &outcome{}
			c.attempts[k] = o
		}
		if r.Kind == KindTry && o.kind != "" {
			continue // an outcome recorded before its try: keep the outcome
		}
		o.kind, o.server, o.serverTime, o.warning = r.Kind, r.Server, r.ServerTime, r.Warning
	}
}

func (c *checker) indexRows(rows []Row) {
	for _, r := range rows {
		if !c.runs[r.Run] {
			c.rep.OtherRunsRows++
			continue
		}
		if c.opts.Live && r.Seq > c.maxTried[clientKey{r.Run, r.Client}] {
			c.rep.LaterRows++
			continue
		}
		c.present[Key{Run: r.Run, Client: r.Client, Seq: r.Seq}]++
	}
}

// tally applies the rules to the attempts and the rows of the keys keep
// takes, walking each once.
func (c *checker) tally(keep func(Key) bool) tally {
	var t tally
	for k, o := range c.attempts {
		if keep(k) {
			t.attempt(k, o, c.present[k])
		}
	}
	for k, n := range c.present {
		if keep(k) {
			t.rows(k, n, c.attempts[k] != nil)
		}
	}
	return t
}

// tally is what the rules found over a set of keys: the tallies of two
// disjoint sets add up to the tally of their union, so an incremental
// check keeps the tally of the keys it verified and adds the new ones'.
type tally struct {
	Attempted      int   `json:"attempted"`
	Acknowledged   int   `json:"acknowledged"`
	Unknown        int   `json:"unknown"`
	UnknownPresent int   `json:"unknownPresent"`
	UnknownAbsent  int   `json:"unknownAbsent"`
	Rows           int   `json:"rows"`
	Lost           []Key `json:"lost,omitempty"`
	Duplicates     []Key `json:"duplicates,omitempty"`
	Rejected       []Key `json:"rejected,omitempty"`
	Phantoms       []Key `json:"phantoms,omitempty"`
	Warned         []Key `json:"warned,omitempty"`
	// clients are the per-client summaries; an incremental check keeps
	// them in its clients' marks.
	clients map[clientKey]*ClientSummary
}

func (t *tally) summary(k Key) *ClientSummary {
	id := clientKey{k.Run, k.Client}
	if t.clients == nil {
		t.clients = map[clientKey]*ClientSummary{}
	}
	if t.clients[id] == nil {
		t.clients[id] = &ClientSummary{Run: k.Run, Client: k.Client}
	}
	return t.clients[id]
}

// attempt counts an attempt of the ledger, present n times in the table.
func (t *tally) attempt(k Key, o *outcome, n int) {
	s := t.summary(k)
	t.Attempted++
	s.MaxAttempted = max(s.MaxAttempted, k.Seq)
	switch o.kind {
	case KindAck:
		t.Acknowledged++
		s.MaxAcked = max(s.MaxAcked, k.Seq)
		if o.warning != "" {
			t.Warned = append(t.Warned, k)
		}
		if n == 0 {
			t.Lost = append(t.Lost, k)
			s.Lost++
		}
	case KindRejected:
		t.Rejected = append(t.Rejected, k)
	default: // unknown, or tried with no outcome recorded
		t.Unknown++
		if n > 0 {
			t.UnknownPresent++
		} else {
			t.UnknownAbsent++
		}
	}
}

// rows counts the n rows of a key present in the table.
func (t *tally) rows(k Key, n int, attempted bool) {
	t.Rows += n
	s := t.summary(k)
	s.MaxPresent = max(s.MaxPresent, k.Seq)
	if n > 1 {
		t.Duplicates = append(t.Duplicates, k)
	}
	if !attempted {
		t.Phantoms = append(t.Phantoms, k)
	}
}

// add adds o, the tally of other keys.
func (t *tally) add(o tally) {
	t.Attempted += o.Attempted
	t.Acknowledged += o.Acknowledged
	t.Unknown += o.Unknown
	t.UnknownPresent += o.UnknownPresent
	t.UnknownAbsent += o.UnknownAbsent
	t.Rows += o.Rows
	t.Lost = append(t.Lost, o.Lost...)
	t.Duplicates = append(t.Duplicates, o.Duplicates...)
	t.Rejected = append(t.Rejected, o.Rejected...)
	t.Phantoms = append(t.Phantoms, o.Phantoms...)
	t.Warned = append(t.Warned, o.Warned...)
	for _, s := range o.clients {
		t.addSummary(*s)
	}
}

// addSummary merges the summary of other keys of the same client.
func (t *tally) addSummary(o ClientSummary) {
	s := t.summary(Key{Run: o.Run, Client: o.Client})
	s.MaxAttempted = max(s.MaxAttempted, o.MaxAttempted)
	s.MaxAcked = max(s.MaxAcked, o.MaxAcked)
	s.MaxPresent = max(s.MaxPresent, o.MaxPresent)
	s.Lost += o.Lost
}

// report writes the tally into r.
func (t *tally) report(r *CheckReport, maxLost int) {
	r.Attempted, r.Acknowledged, r.Unknown = t.Attempted, t.Acknowledged, t.Unknown
	r.UnknownPresent, r.UnknownAbsent, r.Rows = t.UnknownPresent, t.UnknownAbsent, t.Rows
	r.Lost = newKeyListOf(slices.Clone(t.Lost), max(maxSample, maxLost))
	r.Duplicates, r.Rejected = newKeyList(slices.Clone(t.Duplicates)), newKeyList(slices.Clone(t.Rejected))
	r.Phantoms, r.AckedWithWarning = newKeyList(slices.Clone(t.Phantoms)), newKeyList(slices.Clone(t.Warned))
	r.Clients = sortedSummaries(t.clients)
}

type clientKey struct {
	run    string
	client int
}

func sortedSummaries(m map[clientKey]*ClientSummary) []ClientSummary {
	out := make([]ClientSummary, 0, len(m))
	for _, s := range m {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b ClientSummary) int {
		return cmp.Or(cmp.Compare(a.Run, b.Run), cmp.Compare(a.Client, b.Client))
	})
	return out
}

// commits is every commit the checker knows of among the keys keep takes:
// the rows of the ledger's runs, and the acknowledgements (which outlive
// rows a deposed primary lost), each once.
func (c *checker) commits(rows []Row, keep func(Key) bool) []Commit {
	seen := map[Key]bool{}
	var out []Commit
	for _, r := range rows {
		k := Key{Run: r.Run, Client: r.Client, Seq: r.Seq}
		if c.runs[r.Run] && !seen[k] && keep(k) {
			seen[k] = true
			out = append(out, Commit{Server: r.Server, At: r.CommittedAt})
		}
	}
	for k, o := range c.attempts {
		if o.kind == KindAck && !seen[k] && keep(k) {
			out = append(out, Commit{Server: o.server, At: o.serverTime})
		}
	}
	return out
}

// verdict lists the broken rules in r.Failures.
func verdict(r *CheckReport, maxLost int) {
	fail := func(format string, args ...any) { r.Failures = append(r.Failures, fmt.Sprintf(format, args...)) }
	if len(r.Runs) == 0 {
		fail("the ledger names no run")
	}
	if r.Lost.Count > maxLost {
		fail("LOST: %d acknowledged rows are missing (%d tolerated)", r.Lost.Count, maxLost)
	}
	if r.Duplicates.Count > 0 {
		fail("DUPLICATE: %d rows are present more than once", r.Duplicates.Count)
	}
	if r.Rejected.Count > 0 {
		fail("DUPLICATE: the primary key rejected %d attempts (the writer never retries a seq)", r.Rejected.Count)
	}
	if r.Phantoms.Count > 0 {
		fail("PHANTOM: %d rows are present that the ledger never attempted", r.Phantoms.Count)
	}
	if len(r.Interleavings) > 0 {
		fail("SPLIT BRAIN: %d interleavings of servers within %.1fs", len(r.Interleavings), r.SplitBrainWindow)
	}
	r.OK = len(r.Failures) == 0
}
