package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Kind is what a ledger record says.
type Kind string

// Ledger record kinds.
const (
	// KindBegin starts a run: Run, Table and Clients are set.
	KindBegin Kind = "begin"
	// KindTry is written before an INSERT is sent.
	KindTry Kind = "try"
	// KindAck is written after the commit returned without error; Server,
	// ServerTime and LSN are what the server returned.
	KindAck Kind = "ack"
	// KindUnknown is written after an error: the commit may have happened.
	KindUnknown Kind = "unknown"
	// KindRejected is written when the primary key rejected the INSERT: the
	// writer never retries a seq, so this is a bug.
	KindRejected Kind = "rejected"
	// KindEnd ends a run cleanly.
	KindEnd Kind = "end"
	// KindConnectFailed is written when a client could not connect: Client
	// and Error are set, no seq (nothing was sent). The checker ignores it;
	// it counts what a client saw (Window).
	KindConnectFailed Kind = "connect-failed"
)

// attempt says whether a record is about one attempt (one seq).
func (k Kind) attempt() bool {
	switch k {
	case KindTry, KindAck, KindUnknown, KindRejected:
		return true
	}
	return false
}

// Record is one line of the ledger.
type Record struct {
	Kind   Kind      `json:"k"`
	Run    string    `json:"r"`
	Client int       `json:"c,omitempty"`
	Seq    int64     `json:"s,omitempty"`
	At     time.Time `json:"t"` // the writer's clock when the record was made
	// Acknowledgements: the committing server's address, clock and WAL
	// position, from RETURNING.
	Server     string    `json:"srv,omitempty"`
	ServerTime time.Time `json:"st,omitzero"`
	LSN        string    `json:"lsn,omitempty"`
	// Warning is the SQLSTATE of a warning the server sent with an ack
	// (01000 "canceling wait for synchronous replication": committed
	// locally, perhaps not replicated).
	Warning string `json:"w,omitempty"`
	// Error is the kind of error of an unknown or rejected attempt.
	Error string `json:"e,omitempty"`
	// Connecting is when the connection a try is sent on began to be
	// made, on an ordinary client's tries (a new connection each): what
	// the client waited includes it.
	Connecting time.Time `json:"ct,omitzero"`
	// Begin records.
	Table   string `json:"table,omitempty"`
	Clients int    `json:"clients,omitempty"`
}

// LedgerWriter appends records to a ledger file; safe for concurrent use.
type LedgerWriter struct {
	mu     sync.Mutex
	f      *os.File
	buf    bytes.Buffer
	err    error
	dirty  bool
	stop   chan struct{}
	done   chan struct{}
	closed bool
}

// CreateLedger opens path for appending (creating it if needed) and fsyncs
// it every syncEvery (never when zero) and on Close.
func CreateLedger(path string, syncEvery time.Duration) (*LedgerWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600) //nolint:gosec // the path the user chose
	if err != nil {
		return nil, fmt.Errorf("while opening the ledger: %w", err)
	}
	w := &LedgerWriter{f: f, stop: make(chan struct{}), done: make(chan struct{})}
	go w.syncLoop(syncEvery)
	return w, nil
}

func (w *LedgerWriter) syncLoop(every time.Duration) {
	defer close(w.done)
	if every <= 0 {
		<-w.stop
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			_ = w.Sync()
		}
	}
}

// Append writes one record as one line with a single write. The first
// error sticks: later calls return it.
func (w *LedgerWriter) Append(r Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.buf.Reset()
	if err := json.NewEncoder(&w.buf).Encode(r); err != nil { // Encode adds the newline
		w.err = fmt.Errorf("while encoding a ledger record: %w", err)
		return w.err
	}
	if _, err := w.f.Write(w.buf.Bytes()); err != nil {
		w.err = fmt.Errorf("while writing the ledger: %w", err)
		return w.err
	}
	w.dirty = true
	return nil
}

// Sync fsyncs the ledger if anything was written since the last Sync.
func (w *LedgerWriter) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || !w.dirty || w.closed {
		return w.err
	}
	if err := w.f.Sync(); err != nil {
		w.err = fmt.Errorf("while syncing the ledger: %w", err)
		return w.err
	}
	w.dirty = false
	return nil
}

// Close fsyncs and closes the ledger.
func (w *LedgerWriter) Close() error {
	close(w.stop)
	<-w.done
	err := w.Sync()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return errors.Join(err, w.f.Close())
}

// LedgerInfo describes what reading a ledger found besides the records.
type LedgerInfo struct {
	// TruncatedTail is true when the last line had no newline (the writer
	// was killed while writing it); it was skipped.
	TruncatedTail bool `json:"truncatedTail,omitempty"`
}

// ReadLedger parses a ledger. A last line without a newline is skipped and
// reported in LedgerInfo; any other line that does not parse is an error.
func ReadLedger(r io.Reader) ([]Record, LedgerInfo, error) {
	var (
		recs []Record
		info LedgerInfo
	)
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			info.TruncatedTail = len(bytes.TrimSpace(line)) > 0
			return recs, info, nil
		}
		if err != nil {
			return nil, info, fmt.Errorf("while reading the ledger: %w", err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil {
			return nil, info, fmt.Errorf("while parsing line %d of the ledger: %w", n, err)
		}
		recs = append(recs, rec)
	}
}

// ReadLedgerFile is ReadLedger on a file.
func ReadLedgerFile(path string) ([]Record, LedgerInfo, error) {
	f, err := os.Open(path) //nolint:gosec // the path the user chose
	if err != nil {
		return nil, LedgerInfo{}, fmt.Errorf("while opening the ledger: %w", err)
	}
	defer func() { _ = f.Close() }()
	return ReadLedger(f)
}
