package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// The files PostgreSQL's logging collector writes, as named pipes in the
// log directory. log_filename is LogFileName; the collector writes jsonlog
// to the same name ending in .json, and keeps the stderr-format file open
// for output that is no log message (what archive_command's program
// prints on its stderr).
const (
	LogFileName     = "postgres.log"
	JSONLogFileName = "postgres.json"
)

// LogPipes are the named pipes (FIFOs) PostgreSQL's logging collector
// writes its log to (PostgreSQL 15 and later: log_destination = jsonlog),
// in a directory of the manager's, never on the data volume: nothing is
// stored, each record goes to the manager's log as it comes. The manager
// holds both pipes open for reading and writing for as long as it runs, so
// the collector opening them never blocks, and a collector that exits (a
// postgres stop, a crash restart) never ends the reading.
type LogPipes struct {
	dir         string
	json, plain *os.File
	out         emitter

	mu      sync.Mutex
	current *Postmaster // the postmaster whose records come now
	flushes map[uint64]chan struct{}
	seq     atomic.Uint64
	done    sync.WaitGroup
}

// OpenLogPipes makes dir (mode 0700) with the named pipes and starts
// forwarding what PostgreSQL writes into them to log, as StartPostmaster
// forwards its stderr. Close stops it.
func OpenLogPipes(dir string, log logr.Logger) (*LogPipes, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("while creating the log directory: %w", err)
	}
	l := &LogPipes{dir: dir, out: newEmitter(log.WithName(LoggerName)), flushes: map[uint64]chan struct{}{}}
	var err error
	if l.json, err = openFIFO(filepath.Join(dir, JSONLogFileName)); err != nil {
		return nil, err
	}
	if l.plain, err = openFIFO(filepath.Join(dir, LogFileName)); err != nil {
		_ = l.json.Close()
		return nil, err
	}
	l.done.Add(2)
	go l.read(l.json, l.handleJSON)
	go l.read(l.plain, l.handleText)
	return l, nil
}

// openFIFO makes path a named pipe (replacing anything else found there,
// such as a file a collector created while the pipe was missing) and opens
// it for reading and writing: an open for reading alone would block until
// a writer comes, and would end at the first writer's exit.
func openFIFO(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeNamedPipe == 0 {
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("while replacing %s with a named pipe: %w", path, err)
		}
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("while creating the named pipe %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0) //nolint:gosec // a pipe in the manager's own directory
	if err != nil {
		return nil, fmt.Errorf("while opening the named pipe %s: %w", path, err)
	}
	return f, nil
}

// Dir is the directory of the pipes: log_directory.
func (l *LogPipes) Dir() string { return l.dir }

// Close stops the reading and closes the pipes.
func (l *LogPipes) Close() error {
	err := errors.Join(l.json.Close(), l.plain.Close())
	l.done.Wait()
	return err
}

func (l *LogPipes) read(f *os.File, handle func([]byte)) {
	defer l.done.Done()
	_ = readLines(f, handle) // ends when Close closes f
}

// attach makes the records that come from now on p's, for its error
// detection (see Postmaster.observe).
func (l *LogPipes) attach(p *Postmaster) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.current = p
}

func (l *LogPipes) postmaster() *Postmaster {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.current
}

// flushMark starts the line flush writes into the JSON pipe; no jsonlog
// record starts so (they start with the timestamp).
var flushMark = []byte(`{"tusk_flush":`)

// flush waits, at most timeout, until every record written into the JSON
// pipe before it was handled: it writes a mark into the pipe and waits for
// the reader to come to it. A postmaster's logging collector has written
// everything and exited when the postmaster's stderr ends (it holds that
// stderr too), so a flush then makes a FATAL it logged as it stopped
// known before the exit is reported.
func (l *LogPipes) flush(timeout time.Duration) {
	n := l.seq.Add(1)
	seen := make(chan struct{})
	l.mu.Lock()
	l.flushes[n] = seen
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.flushes, n)
		l.mu.Unlock()
	}()
	if _, err := fmt.Fprintf(l.json, "%s%d}\n", flushMark, n); err != nil {
		return
	}
	select {
	case <-seen:
	case <-time.After(timeout):
	}
}

func (l *LogPipes) handleJSON(line []byte) {
	if rest, ok := bytes.CutPrefix(line, flushMark); ok {
		n, _ := strconv.ParseUint(string(bytes.TrimSuffix(rest, []byte("}"))), 10, 64)
		l.mu.Lock()
		if seen, ok := l.flushes[n]; ok {
			close(seen)
			delete(l.flushes, n)
		}
		l.mu.Unlock()
		return
	}
	r, err := parseJSONRecord(line)
	if err != nil {
		// Not jsonlog: pass it on as it is rather than lose it.
		l.out.emit(levelOf(""), string(line), []any{"severity", ""})
		return
	}
	if p := l.postmaster(); p != nil {
		p.observe(r.Severity, pidText(r.PID), r.Message)
	}
	l.out.emit(levelOf(r.Severity), r.Message, r.fields())
}

func (l *LogPipes) handleText(line []byte) {
	level, pid, msg := parseTextLine(string(line))
	if p := l.postmaster(); p != nil && level != "" {
		p.observe(level, pid, msg)
	}
	l.out.emit(levelOf(level), msg, textFields(level, pid))
}
