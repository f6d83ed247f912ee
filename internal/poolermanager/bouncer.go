package poolermanager

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"tusk.dev/tusk/internal/instance/supervisor"
)

// RestartBound bounds PgBouncer's restarts: a PgBouncer that dies within
// Quick of starting, Max times in a row, is not started again, and the
// manager exits with an error (the kubelet restarts the container, and
// its restarts and backoff show the fault). A PgBouncer that ran longer
// starts the count again.
type RestartBound struct {
	Max   int
	Quick time.Duration
	// Backoff is the pause before the n-th quick restart in a row: n
	// times Backoff.
	Backoff time.Duration
}

// DefaultRestarts gives up after five quick deaths in a row, about 15 s
// of trying.
var DefaultRestarts = RestartBound{Max: 5, Quick: 30 * time.Second, Backoff: time.Second}

func (b RestartBound) orDefault() RestartBound {
	return RestartBound{
		Max:     cmp.Or(b.Max, DefaultRestarts.Max),
		Quick:   cmp.Or(b.Quick, DefaultRestarts.Quick),
		Backoff: cmp.Or(b.Backoff, DefaultRestarts.Backoff),
	}
}

// bouncer is the PgBouncer child.
type bouncer struct {
	program, config string
	bound           RestartBound
	reaper          *supervisor.Reaper
	log             logr.Logger
	// started is called before each start with the restarts so far.
	started func(restarts int)

	mu       sync.Mutex
	cmd      *exec.Cmd // nil while none runs
	stopping bool
	stop     chan struct{} // closed by shutdown
	// done is closed when supervise returns: no PgBouncer runs any more.
	done chan struct{}
}

func newBouncer(opts Options, reaper *supervisor.Reaper, log logr.Logger, started func(int)) *bouncer {
	return &bouncer{program: opts.PgBouncer, config: cmp.Or(opts.bouncerConfig, opts.Config), bound: opts.Restarts, reaper: reaper, log: log,
		started: started, stop: make(chan struct{}), done: make(chan struct{})}
}

func (b *bouncer) running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cmd != nil
}

// supervise starts PgBouncer and starts it again when it dies, until
// shutdown (nil) or past the restart bound (an error).
func (b *bouncer) supervise() error {
	defer close(b.done)
	restarts, quick := 0, 0
	for {
		b.started(restarts)
		began := time.Now()
		err := b.run()
		if b.isStopping() {
			return nil
		}
		if time.Since(began) < b.bound.Quick {
			quick++
		} else {
			quick = 1
		}
		if quick > b.bound.Max {
			return fmt.Errorf("PgBouncer exited %d times in a row within %s of starting; the last time: %w", quick, b.bound.Quick, err)
		}
		restarts++
		b.log.Info("PgBouncer exited; starting it again", "error", err.Error(), "restarts", restarts,
			"inARow", quick, "after", b.bound.Backoff*time.Duration(quick))
		select {
		case <-b.stop:
			return nil
		case <-time.After(b.bound.Backoff * time.Duration(quick)):
		}
	}
}

// run runs PgBouncer once, until it exits. Its output is the pod's (it
// logs to stderr: the ini names no logfile).
func (b *bouncer) run() error {
	cmd := exec.Command(b.program, b.config) //nolint:gosec // the program and configuration the pod was given
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	b.mu.Lock()
	if b.stopping {
		b.mu.Unlock()
		return nil
	}
	if err := b.reaper.Start(cmd); err != nil {
		b.mu.Unlock()
		return fmt.Errorf("while starting PgBouncer: %w", err)
	}
	b.cmd = cmd
	b.mu.Unlock()
	b.log.Info("PgBouncer started", "pid", cmd.Process.Pid, "config", b.config)
	err := b.reaper.Wait(cmd)
	b.mu.Lock()
	b.cmd = nil
	b.mu.Unlock()
	if err == nil {
		err = fmt.Errorf("PgBouncer exited with status 0")
	}
	return err
}

func (b *bouncer) isStopping() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopping
}

// signal sends sig to the running PgBouncer, if any.
func (b *bouncer) signal(sig syscall.Signal) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		_ = b.cmd.Process.Signal(sig)
	}
}

// shutdown stops PgBouncer for good. SIGINT is PgBouncer's safe shutdown
// (since 1.23 the same as SHUTDOWN WAIT_FOR_SERVERS): it stops listening,
// lets every transaction in flight finish and return its server
// connection, disconnects a client as soon as it is between transactions,
// then exits. SIGTERM (since 1.23) would wait for every client to
// disconnect, which a client's connection pool never does: the pod would
// only end at its grace period's SIGKILL. Past timeout, SIGQUIT stops
// PgBouncer at once; SIGKILL 5 s later if even that did not.
func (b *bouncer) shutdown(timeout time.Duration) {
	b.mu.Lock()
	b.stopping = true
	close(b.stop)
	b.mu.Unlock()
	b.signal(syscall.SIGINT)
	for _, next := range []struct {
		after time.Duration
		sig   syscall.Signal
	}{{timeout, syscall.SIGQUIT}, {5 * time.Second, syscall.SIGKILL}} {
		if b.waitStopped(next.after) {
			return
		}
		b.log.Info("PgBouncer did not stop in time; stopping it harder", "after", next.after, "signal", next.sig.String())
		b.signal(next.sig)
	}
}

// waitStopped says whether PgBouncer stopped (and supervise returned)
// within d.
func (b *bouncer) waitStopped(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-b.done:
		return true
	case <-timer.C:
		return false
	}
}
