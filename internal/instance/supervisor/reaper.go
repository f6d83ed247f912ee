package supervisor

import (
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
)

// Reaper collects orphans. As PID 1 of a container (or a child subreaper),
// every process whose parent dies is re-parented to the instance manager;
// left unreaped they stay zombies forever. The reaper waits only for
// zombies it did not start itself: children started through Start are
// waited for by their own exec.Cmd, and reaping them here would steal
// their exit status.
type Reaper struct {
	mu      sync.Mutex
	started map[int]bool
	reaped  int
	log     logr.Logger
}

// Reaped counts the orphans reaped so far.
func (r *Reaper) Reaped() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reaped
}

// NewReaper returns a reaper; call Run to start reaping.
func NewReaper(log logr.Logger) *Reaper {
	return &Reaper{started: map[int]bool{}, log: log}
}

// BecomeSubreaper makes this process inherit orphaned descendants even when
// it is not PID 1 (as in tests), so it reaps them the same way.
func BecomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// Start starts cmd and remembers it as ours until Wait forgets it.
func (r *Reaper) Start(cmd *exec.Cmd) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil { //nolint:forbidigo // the reaper's own start, which registers the child
		return err
	}
	r.started[cmd.Process.Pid] = true
	return nil
}

// Wait waits for a command started with Start.
func (r *Reaper) Wait(cmd *exec.Cmd) error {
	err := cmd.Wait()
	r.mu.Lock()
	delete(r.started, cmd.Process.Pid)
	r.mu.Unlock()
	return err
}

// Run reaps orphans on every SIGCHLD until stop is closed.
func (r *Reaper) Run(stop <-chan struct{}) {
	sigchld := make(chan os.Signal, 16)
	signal.Notify(sigchld, syscall.SIGCHLD)
	defer signal.Stop(sigchld)
	for {
		select {
		case <-stop:
			return
		case <-sigchld:
			r.reapOrphans()
		}
	}
}

// reapOrphans waits for each zombie child that is not one of ours. It holds
// the lock so a child started concurrently is registered before it can be
// mistaken for an orphan.
func (r *Reaper) reapOrphans() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pid := range zombieChildren(os.Getpid()) {
		if r.started[pid] {
			continue
		}
		var ws syscall.WaitStatus
		if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err == nil && got == pid {
			r.reaped++
			r.log.V(1).Info("Reaped an orphaned process", "pid", pid, "exitStatus", ws.ExitStatus())
		}
	}
}

// zombieChildren lists the children of parent that have exited and wait to
// be reaped, from /proc.
func zombieChildren(parent int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var pids []int
	for _, path := range stats {
		state, ppid, ok := readStat(path)
		if !ok || state != "Z" || ppid != parent {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
