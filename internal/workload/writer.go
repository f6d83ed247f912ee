package workload

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// WriteOptions configure Write.
type WriteOptions struct {
	// DSN is a libpq connection string or URI; empty uses the PG*
	// environment variables.
	DSN     string
	Clients int
	// Duration bounds the run; zero runs until the context is done.
	Duration time.Duration
	Table    string
	Ledger   string
	// Timeout bounds each connection attempt and each INSERT (a stopped or
	// cut-off primary never answers); default 5 s.
	Timeout time.Duration
	// Backoff is the first wait after an error, doubled up to MaxBackoff
	// while errors go on; defaults 100 ms and 1 s.
	Backoff, MaxBackoff time.Duration
	// SyncEvery is how often the ledger is fsync'ed; default 1 s.
	SyncEvery time.Duration
	// GapThreshold: gaps longer than this are listed; default 1 s.
	GapThreshold time.Duration
	// Ordinary makes each client behave as an ordinary application or
	// script does with libpq's defaults: a new connection for every
	// statement, no connect timeout and no statement timeout (Timeout is
	// ignored), and a fixed wait of Backoff after an error. Its write gaps
	// are what such an application sees; the tuned client's are not.
	Ordinary bool
	// Interval is a client's pause between two statements: an
	// application's pace, where an unpaced client writes as fast as the
	// server commits.
	Interval time.Duration
	// Read makes the clients read instead of write: readSQL, whose
	// answers the ledger records as acknowledgements, so that its gaps
	// are read gaps. Nothing is written; the table is not created.
	Read bool
}

// ordinaryDrain is how long an ordinary client's statement in flight may
// still run after the run ended: it has no timeout of its own.
const ordinaryDrain = 30 * time.Second

func (o *WriteOptions) defaults() error {
	if o.Clients <= 0 {
		return errors.New("at least one client is needed")
	}
	if o.Ledger == "" {
		return errors.New("a ledger file is needed")
	}
	setDefault(&o.Timeout, 5*time.Second)
	setDefault(&o.Backoff, 100*time.Millisecond)
	setDefault(&o.MaxBackoff, time.Second)
	setDefault(&o.SyncEvery, time.Second)
	setDefault(&o.GapThreshold, time.Second)
	return nil
}

func setDefault(d *time.Duration, v time.Duration) {
	if *d <= 0 {
		*d = v
	}
}

// WriteReport is what Write prints at exit.
type WriteReport struct {
	Run     string    `json:"run"`
	Table   string    `json:"table"`
	Clients int       `json:"clients"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	// Attempted INSERTs, and their outcomes.
	Attempted    int64 `json:"attempted"`
	Acknowledged int64 `json:"acknowledged"`
	Unknown      int64 `json:"unknown"`
	// Rejected INSERTs were refused by the primary key: a bug.
	Rejected int64 `json:"rejected"`
	// AckedWithWarning were acknowledged with a warning (such as a
	// cancelled wait for synchronous replication).
	AckedWithWarning int64 `json:"ackedWithWarning,omitempty"`
	// Errors counts errors by kind; connection attempts are "connect_<kind>".
	Errors map[string]int64 `json:"errors"`
	// Servers counts acknowledgements by committing server.
	Servers map[string]int64 `json:"servers"`
	Gaps    GapReport        `json:"gaps"`
}

// writer is one run of Write.
type writer struct {
	opts   WriteOptions
	table  string
	ledger *LedgerWriter
	// statements is the context an ordinary client's statements run in:
	// cancelled ordinaryDrain after the run ended.
	statements context.Context

	mu   sync.Mutex
	rep  WriteReport
	gaps *gapTracker
}

// Write runs the clients until Duration has passed or ctx is done, then
// returns the report. An error means the run could not be made or the
// ledger could not be written; errors of the database are counted.
func Write(ctx context.Context, opts WriteOptions) (*WriteReport, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	table, err := quoteTable(opts.Table)
	if err != nil {
		return nil, err
	}
	ledger, err := CreateLedger(opts.Ledger, opts.SyncEvery)
	if err != nil {
		return nil, err
	}
	w := &writer{opts: opts, table: table, ledger: ledger, gaps: newGapTracker(opts.GapThreshold)}
	w.rep = WriteReport{Run: newRunID(), Table: opts.Table, Clients: opts.Clients, Started: time.Now(),
		Errors: map[string]int64{}, Servers: map[string]int64{}}
	if opts.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Duration)
		defer cancel()
	}
	var cancelStatements context.CancelFunc
	w.statements, cancelStatements = context.WithCancel(context.Background())
	defer cancelStatements()
	stopDrain := context.AfterFunc(ctx, func() { time.AfterFunc(ordinaryDrain, cancelStatements) })
	defer stopDrain()
	err = w.run(ctx)
	w.rep.Ended = time.Now()
	w.rep.Gaps = w.gaps.report()
	err = errors.Join(err, ledger.Append(Record{Kind: KindEnd, Run: w.rep.Run, At: w.rep.Ended}), ledger.Close())
	return &w.rep, err
}

func (w *writer) run(ctx context.Context) error {
	if !w.opts.Read {
		if err := w.createTable(ctx); err != nil {
			return err
		}
	}
	if err := w.ledger.Append(Record{Kind: KindBegin, Run: w.rep.Run, At: time.Now(),
		Table: w.opts.Table, Clients: w.opts.Clients}); err != nil {
		return err
	}
	client := w.client
	if w.opts.Ordinary {
		client = w.ordinaryClient
	}
	var wg sync.WaitGroup
	for id := 1; id <= w.opts.Clients; id++ {
		wg.Go(func() { client(ctx, id) })
	}
	wg.Wait()
	return w.ledger.Sync()
}

// createTable creates the table, retrying until ctx is done: the cluster
// may not accept writes yet.
func (w *writer) createTable(ctx context.Context) error {
	backoff := w.opts.Backoff
	for {
		err := w.tryCreateTable(ctx)
		if err == nil {
			return nil
		}
		w.countError("setup_" + ErrorKind(err))
		if !sleep(ctx, backoff) {
			return fmt.Errorf("while creating table %s: %w", w.opts.Table, err)
		}
		backoff = min(2*backoff, w.opts.MaxBackoff)
	}
}

func (w *writer) tryCreateTable(ctx context.Context) error {
	conn, err := w.connect(ctx, nil)
	if err != nil {
		return err
	}
	defer closeConn(conn)
	tctx, cancel := w.statementContext()
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	_, err = conn.Exec(tctx, createTableSQL(w.table))
	return err
}

// client appends rows until ctx is done, reconnecting after errors.
func (w *writer) client(ctx context.Context, id int) {
	var (
		conn    *pgx.Conn
		warning string
		backoff = w.opts.Backoff
	)
	defer func() { closeConn(conn) }()
	for seq := int64(1); ctx.Err() == nil; {
		if conn == nil {
			c, err := w.connect(ctx, &warning)
			if err != nil {
				if ended(ctx) {
					return // the run ended while connecting
				}
				if w.connectFailed(id, err) != nil {
					return
				}
				sleep(ctx, backoff)
				backoff = min(2*backoff, w.opts.MaxBackoff)
				continue
			}
			conn = c
		}
		err := w.insert(conn, try{id: id, seq: seq}, &warning)
		seq++ // never retry a seq: its commit may have happened
		switch {
		case err == nil:
			backoff = w.opts.Backoff
			sleep(ctx, w.opts.Interval)
		case errors.Is(err, errLedger):
			return // without a ledger there is no evidence; Write reports the error
		case ErrorKind(err) == uniqueViolation:
			// Counted; the connection is fine.
		default:
			closeConn(conn)
			conn = nil
			sleep(ctx, backoff)
			backoff = min(2*backoff, w.opts.MaxBackoff)
		}
	}
}

// ordinaryClient runs one statement per new connection until ctx is
// done, as an application with libpq's defaults does: nothing bounds a
// connection attempt but the kernel's own SYN retries.
func (w *writer) ordinaryClient(ctx context.Context, id int) {
	var warning string
	for seq := int64(1); ctx.Err() == nil; seq++ {
		connecting := time.Now()
		conn, err := w.connect(ctx, &warning)
		if err != nil {
			if ended(ctx) {
				return // the run ended while connecting
			}
			if w.connectFailed(id, err) != nil {
				return
			}
			sleep(ctx, w.opts.Backoff)
			continue
		}
		err = w.insert(conn, try{id: id, seq: seq, connecting: connecting}, &warning)
		closeConn(conn)
		switch {
		case errors.Is(err, errLedger):
			return
		case err != nil:
			sleep(ctx, w.opts.Backoff)
		default:
			sleep(ctx, w.opts.Interval)
		}
	}
}

var errLedger = errors.New("ledger")

// try is one attempt of a client: its seq and, for a new connection per
// attempt, when the connection began to be made.
type try struct {
	id         int
	seq        int64
	connecting time.Time
}

// connectFailed counts and records a failed connection; an error is the
// ledger's.
func (w *writer) connectFailed(id int, err error) error {
	kind := ErrorKind(err)
	w.countError("connect_" + kind)
	if lerr := w.ledger.Append(Record{Kind: KindConnectFailed, Run: w.rep.Run, Client: id, Error: kind, At: time.Now()}); lerr != nil {
		return fmt.Errorf("%w: %w", errLedger, lerr)
	}
	return nil
}

// insert makes one attempt and records it. It is not cut short by the end
// of the run, only by Timeout: an acknowledgement in flight is recorded.
func (w *writer) insert(conn *pgx.Conn, a try, warning *string) error {
	run, id, seq := w.rep.Run, a.id, a.seq
	if err := w.ledger.Append(Record{Kind: KindTry, Run: run, Client: id, Seq: seq, At: time.Now(), Connecting: a.connecting}); err != nil {
		return fmt.Errorf("%w: %w", errLedger, err)
	}
	w.count(func(r *WriteReport) { r.Attempted++ })
	ctx, cancel := w.statementContext()
	defer cancel()
	*warning = ""
	rec := Record{Run: run, Client: id, Seq: seq}
	var row pgx.Row
	if w.opts.Read {
		row = conn.QueryRow(ctx, readSQL)
	} else {
		row = conn.QueryRow(ctx, insertSQL(w.table), run, id, seq)
	}
	err := row.Scan(&rec.Server, &rec.ServerTime, &rec.LSN)
	switch {
	case err == nil:
		rec.Kind, rec.Warning = KindAck, *warning
		rec.At = w.acked(rec.Server, rec.Warning != "")
	case ErrorKind(err) == uniqueViolation:
		rec.Kind, rec.Error, rec.At = KindRejected, uniqueViolation, time.Now()
		w.count(func(r *WriteReport) { r.Rejected++ })
		w.countError(rec.Error)
	default:
		rec.Kind, rec.Error, rec.At = KindUnknown, ErrorKind(err), time.Now()
		w.count(func(r *WriteReport) { r.Unknown++ })
		w.countError(rec.Error)
	}
	if lerr := w.ledger.Append(rec); lerr != nil {
		return fmt.Errorf("%w: %w", errLedger, lerr)
	}
	return err
}

// statementContext bounds one statement: by Timeout, or for an ordinary
// client by nothing but the end of the run's drain.
func (w *writer) statementContext() (context.Context, context.CancelFunc) {
	if w.opts.Ordinary {
		return context.WithCancel(w.statements)
	}
	return context.WithTimeout(context.Background(), w.opts.Timeout)
}

// acked counts an acknowledgement and returns its time, taken under the
// lock so the gap tracker sees acknowledgements in order.
func (w *writer) acked(server string, warned bool) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	w.rep.Acknowledged++
	w.rep.Servers[server]++
	if warned {
		w.rep.AckedWithWarning++
	}
	w.gaps.add(now)
	return now
}

func (w *writer) count(f func(*WriteReport)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(&w.rep)
}

func (w *writer) countError(kind string) {
	w.count(func(r *WriteReport) { r.Errors[kind]++ })
}

// connect opens a connection; warnings the server sends are stored in
// *warning (by SQLSTATE) for the attempt in progress.
func (w *writer) connect(ctx context.Context, warning *string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(w.opts.DSN)
	if err != nil {
		return nil, fmt.Errorf("while parsing the DSN: %w", err)
	}
	cfg.RuntimeParams["application_name"] = "tusk-workload"
	if w.opts.Ordinary {
		// libpq's default: no connect_timeout, unless the DSN sets one.
		return pgx.ConnectConfig(ctx, cfg)
	}
	cfg.ConnectTimeout = w.opts.Timeout
	if warning != nil {
		cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			if n.Severity == "WARNING" {
				*warning = n.Code
			}
		}
	}
	cctx, cancel := context.WithTimeout(ctx, w.opts.Timeout)
	defer cancel()
	return pgx.ConnectConfig(cctx, cfg)
}

func closeConn(conn *pgx.Conn) {
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// sleep waits d, or less if ctx is done first; it reports whether ctx is
// still live.
// ended says whether the run ctx bounds is over. A connection attempt
// bounded by ctx's deadline fails with a timeout of the dialer's own a
// moment before ctx reports the deadline: without the second test that
// failure would count as the server's.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func newRunID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
