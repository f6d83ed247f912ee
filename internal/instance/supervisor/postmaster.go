// Package supervisor runs the postgres server as a child of the instance
// manager: starts it, forwards its log lines as JSON, stops it in the right
// order, and reaps orphaned processes when the manager is PID 1.
package supervisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// ShutdownMode is one of PostgreSQL's shutdown modes.
type ShutdownMode int

// PostgreSQL's shutdown modes, gentlest first; Stop escalates through them.
const (
	// Smart waits for every session to end.
	Smart ShutdownMode = iota
	// Fast disconnects sessions, rolls back their transactions and
	// checkpoints: a clean shutdown that loses nothing committed.
	Fast
	// Immediate stops at once; the next start replays WAL.
	Immediate
)

var modeSignals = []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT}

func (m ShutdownMode) String() string { return [...]string{"smart", "fast", "immediate"}[m] }

// Timeouts bound each shutdown mode before Stop moves to the next, harsher
// one; after Immediate comes SIGKILL.
type Timeouts struct {
	Smart, Fast, Immediate time.Duration
}

// DefaultTimeouts leave sessions a little time, then insist.
var DefaultTimeouts = Timeouts{Smart: 5 * time.Second, Fast: 20 * time.Second, Immediate: 5 * time.Second}

// Postmaster is one run of the postgres server.
type Postmaster struct {
	cmd    *exec.Cmd
	reaper *Reaper
	log    logr.Logger // the supervisor's own messages
	out    logr.Logger // postgres's stderr
	done   chan struct{}
	err    error // exit error; valid after done is closed

	mu        sync.Mutex
	lastError string
	recent    []logLine // the last few lines, to explain a FATAL
	diverged  string
	// historyMismatch is the startup process's FATAL saying the data
	// directory is past the fork of the timeline it must follow.
	historyMismatch string
}

type logLine struct{ pid, text string }

// recentLines is how many earlier lines may explain an error: PostgreSQL
// often logs the cause ("invalid value for parameter ...") as a LOG line
// just before the FATAL one.
const recentLines = 4

// Output is where a postmaster's log goes: PostgreSQL's records to Log
// (under the logger name "postgres"), read from postgres's stderr and,
// when Pipes is not nil (PostgreSQL 15 and later, the logging collector
// writing jsonlog into them), from the pipes too.
type Output struct {
	Log   logr.Logger
	Pipes *LogPipes
}

// StartPostmaster starts `postgres -D dataDir [args...]` and forwards its
// log to out, one JSON record per line; log is the supervisor's own
// (starting, stopping). The records that come through out.Pipes count for
// this postmaster's errors (LastError, Diverged, HistoryMismatch) as its
// stderr's do.
func StartPostmaster(binDir, dataDir string, args []string, reaper *Reaper, out Output, log logr.Logger) (*Postmaster, error) {
	cmd := exec.Command(filepath.Join(binDir, "postgres"), append([]string{"-D", dataDir}, args...)...) //nolint:gosec // the server binary found by pgbin
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group keeps a terminal's Ctrl-C away from it;
		// the manager decides how postgres stops.
		Setpgid: true,
		// If the manager dies without stopping postgres, stop it at once
		// rather than leave a postmaster without a supervisor.
		Pdeathsig: syscall.SIGQUIT,
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = cmd.Stderr
	p := &Postmaster{cmd: cmd, reaper: reaper, log: log, out: out.Log.WithName(LoggerName), done: make(chan struct{})}
	pipes := out.Pipes
	if pipes != nil {
		pipes.attach(p)
	}
	if err := reaper.Start(cmd); err != nil {
		return nil, fmt.Errorf("while starting postgres: %w", err)
	}
	forwarded := make(chan struct{})
	go func() {
		p.forwardLog(stderr)
		if pipes != nil {
			// The logging collector held this stderr too: it has
			// written its last records. Handle them before the exit
			// is known.
			pipes.flush(pipesFlushTimeout)
		}
		close(forwarded)
	}()
	go func() {
		<-forwarded // Wait closes the pipe; read everything first
		p.err = reaper.Wait(cmd)
		close(p.done)
	}()
	return p, nil
}

// pipesFlushTimeout bounds the wait for the log pipes' last records when
// postgres exits.
const pipesFlushTimeout = 2 * time.Second

// Pid is the postmaster's process ID.
func (p *Postmaster) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the postmaster has exited.
func (p *Postmaster) Done() <-chan struct{} { return p.done }

// ExitErr is how the postmaster exited (nil for a clean exit); valid once
// Done is closed.
func (p *Postmaster) ExitErr() error { return p.err }

// LastError is the last FATAL, PANIC or ERROR message postgres logged,
// after the earlier lines of the same process that explain it, which usually
// says why it would not start.
func (p *Postmaster) LastError() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastError
}

// Diverged is the startup process's message saying this standby cannot
// follow its upstream's new timeline, because it has WAL past the point
// where that timeline forked off ("" while it has not said so): a replica
// of a primary that failed over received WAL the new primary never had.
// It keeps retrying and never gets further; only a rewind helps.
func (p *Postmaster) Diverged() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.diverged
}

// HistoryMismatch is the startup process's FATAL saying this data directory
// already went past the point where the timeline it must follow forked
// off ("" while it has not said so). Unlike Diverged, postgres exits and
// every restart fails the same way: the directory must be rewound or
// copied afresh.
func (p *Postmaster) HistoryMismatch() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.historyMismatch
}

// clientRefusals are FATALs PostgreSQL sends a client it turns away while it
// starts, recovers or stops. They say nothing of why the server itself
// failed, and they are frequent (probes, the manager's own checks), so the
// last error keeps the server's own message instead: a replica that kept
// crashing after a rewind was once reported only as "the database system
// is in recovery mode".
var clientRefusals = []string{
	"the database system is starting up",
	"the database system is in recovery mode",
	"the database system is shutting down",
	"the database system is not yet accepting connections",
	"the database system is not accepting connections",
	"connection to client lost",
}

func clientRefusal(text string) bool {
	return slices.ContainsFunc(clientRefusals, func(m string) bool { return strings.Contains(text, m) })
}

// divergedMessage is the part of PostgreSQL's message (xlogrecovery.c,
// rescanLatestTimeLine) that says the standby diverged.
const divergedMessage = "forked off current database system timeline"

// historyMismatchMessages are the parts of the startup process's FATALs
// (xlogrecovery.c, InitWalRecovery) that refuse a data directory whose
// last checkpoint, or minimum recovery point, lies on an older timeline
// past the point where the requested timeline forked off. A standby that
// pg_rewind found needing no rewind, while its pg_wal held the old
// timeline past the fork, meets them after replaying that WAL.
var historyMismatchMessages = []string{
	"is not a child of this server's history",
	"does not contain minimum recovery point",
}

func historyMismatch(text string) bool {
	return slices.ContainsFunc(historyMismatchMessages, func(m string) bool { return strings.Contains(text, m) })
}

// severity finds PostgreSQL's message level in a log line, whatever
// log_line_prefix puts before it.
var severity = regexp.MustCompile(`\b(DEBUG[1-5]|LOG|INFO|NOTICE|WARNING|ERROR|FATAL|PANIC|DETAIL|HINT|CONTEXT|STATEMENT):  `)

// processID finds the PID that the default log_line_prefix ("%m [%p] ")
// puts in each line.
var processID = regexp.MustCompile(`\[(\d+)\]`)

// parseTextLine finds the severity, the PID (from the default
// log_line_prefix) and the message of a line in PostgreSQL's stderr
// format; level is "" for a line without a severity (a program's own
// output), and msg is then the whole line.
func parseTextLine(line string) (level, pid, msg string) {
	m := severity.FindStringSubmatchIndex(line)
	if m == nil {
		return "", "", line
	}
	if p := processID.FindStringSubmatch(line[:m[0]]); p != nil {
		pid = p[1]
	}
	return line[m[2]:m[3]], pid, line[m[1]:]
}

// textFields are a stderr line's keys in the log schema.
func textFields(level, pid string) []any {
	kv := []any{"severity", level}
	if n, err := strconv.Atoi(pid); err == nil {
		kv = append(kv, "pid", n)
	}
	return kv
}

// observe keeps a message among the recent ones and, for an error, records
// it with the earlier messages of the same process as the last error.
// Whether it came as a stderr line or a jsonlog record, the texts kept
// read "LEVEL:  message", as PostgreSQL's stderr format writes them.
func (p *Postmaster) observe(level, pid, message string) {
	entry := logLine{pid: pid, text: level + ":  " + message}
	p.mu.Lock()
	defer p.mu.Unlock()
	if level == "LOG" && strings.Contains(entry.text, divergedMessage) {
		p.diverged = entry.text
	}
	if level == "FATAL" && historyMismatch(entry.text) {
		p.historyMismatch = entry.text
	}
	if (level == "ERROR" || level == "FATAL" || level == "PANIC") && !clientRefusal(entry.text) {
		var parts []string
		for _, r := range p.recent {
			if r.pid == entry.pid && r.pid != "" {
				parts = append(parts, r.text)
			}
		}
		p.lastError = strings.Join(append(parts, entry.text), " / ")
	}
	p.recent = append(p.recent, entry)
	if len(p.recent) > recentLines {
		p.recent = p.recent[1:]
	}
}

// forwardLog forwards postgres's own stderr (all of it before PostgreSQL
// 15, or without the logging collector; with it, what postgres says before
// the collector runs) and observes each message.
func (p *Postmaster) forwardLog(r io.Reader) {
	out := newEmitter(p.out)
	_ = readLines(r, func(b []byte) {
		line := string(b)
		level, pid, msg := parseTextLine(line)
		if level != "" {
			p.observe(level, pid, msg)
		}
		out.emit(levelOf(level), msg, textFields(level, pid))
	})
}

// Stop shuts postgres down starting with mode and escalating to harsher
// modes, then SIGKILL of the postmaster and every process it started (see
// killTree), when each does not finish within its timeout. It returns once
// the postmaster has exited.
func (p *Postmaster) Stop(mode ShutdownMode, t Timeouts) error {
	limits := []time.Duration{t.Smart, t.Fast, t.Immediate}
	for m := mode; m <= Immediate; m++ {
		p.log.Info("Stopping postgres", "mode", m.String())
		if err := p.cmd.Process.Signal(modeSignals[m]); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("while signalling postgres: %w", err)
		}
		select {
		case <-p.done:
			return nil
		case <-time.After(limits[m]):
		}
	}
	p.log.Info("Killing postgres and every process it started: it did not stop in immediate mode")
	if alive := killTree(p.Pid()); len(alive) > 0 {
		p.log.Info("Processes of postgres survive SIGKILL (blocked in the kernel?)", "pids", alive)
	}
	<-p.done
	return nil
}
