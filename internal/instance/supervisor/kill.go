package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// killWait bounds how long killTree waits for the killed processes to
// exit. A process blocked in the kernel (a stuck disk) dies only when its
// I/O returns; the caller must not hang on it forever.
const killWait = 5 * time.Second

// process is one descendant of the postmaster, held by a pidfd so that
// signals never reach another process that reused its PID.
type process struct {
	pid, fd int
}

// killTree kills root and every process descended from it with SIGKILL,
// and waits (up to killWait) until they have exited. Signalling the
// postmaster's process group would not do: PostgreSQL makes each of its
// children the leader of a session of its own (setsid), and a child that
// survives its postmaster (a backend of an open session) can still commit.
// So the tree is frozen first, from the root down (SIGSTOP: a stopped
// process forks nothing and a parent killed first would hand its children
// to the manager, hiding them), then killed. Only descendants of root are
// signalled, never the manager itself (PID 1 in the pod), whose child root
// is. It returns the PIDs still alive after killWait.
func killTree(root int) []int {
	_ = syscall.Kill(root, syscall.SIGSTOP)
	procs := stopDescendants(root)
	_ = syscall.Kill(root, syscall.SIGKILL)
	for _, p := range procs {
		_ = unix.PidfdSendSignal(p.fd, unix.SIGKILL, nil, 0)
	}
	alive := waitExited(procs, time.Now().Add(killWait))
	for _, p := range procs {
		_ = unix.Close(p.fd)
	}
	return alive
}

// stopDescendants stops every descendant of root with SIGSTOP and returns
// them. It scans /proc again until a scan finds none it had not stopped:
// a process not yet stopped may fork meanwhile, but once every process
// found is stopped, nothing in the tree can fork any more.
func stopDescendants(root int) []process {
	found := map[int]bool{root: true}
	var procs []process
	for {
		parents := parentPids()
		added := false
		for _, pid := range descendants(root, parents) {
			if found[pid] {
				continue
			}
			found[pid] = true
			fd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				continue // it exited
			}
			// The PID may have been reused between the scan and the
			// pidfd: it is ours only if its parent still is.
			if ppid, ok := parentPid(pid); !ok || ppid != parents[pid] {
				_ = unix.Close(fd)
				continue
			}
			_ = unix.PidfdSendSignal(fd, unix.SIGSTOP, nil, 0)
			procs = append(procs, process{pid: pid, fd: fd})
			added = true
		}
		if !added {
			return procs
		}
	}
}

// waitExited waits until every process has exited (a pidfd polls readable
// then) or deadline passes, and returns the PIDs still alive.
func waitExited(procs []process, deadline time.Time) []int {
	pending := procs
	for len(pending) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		fds := make([]unix.PollFd, len(pending))
		for i, p := range pending {
			fds[i] = unix.PollFd{Fd: int32(p.fd), Events: unix.POLLIN} //nolint:gosec // a file descriptor
		}
		if _, err := unix.Poll(fds, int(left.Milliseconds())+1); err != nil && !errors.Is(err, unix.EINTR) {
			break
		}
		var still []process
		for i, p := range pending {
			if fds[i].Revents == 0 {
				still = append(still, p)
			}
		}
		pending = still
	}
	alive := make([]int, 0, len(pending))
	for _, p := range pending {
		alive = append(alive, p.pid)
	}
	return alive
}

// descendants lists the processes below root in parents (PID to parent
// PID), parents before their children.
func descendants(root int, parents map[int]int) []int {
	children := map[int][]int{}
	for pid, ppid := range parents {
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, child := range children[pid] {
			if child > 1 && child != os.Getpid() { // never the manager
				out = append(out, child)
				queue = append(queue, child)
			}
		}
	}
	return out
}

// parentPids maps every running process to its parent, from /proc.
func parentPids() map[int]int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	parents := make(map[int]int, len(stats))
	for _, path := range stats {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil {
			continue
		}
		if _, ppid, ok := readStat(path); ok {
			parents[pid] = ppid
		}
	}
	return parents
}

func parentPid(pid int) (int, bool) {
	_, ppid, ok := readStat("/proc/" + strconv.Itoa(pid) + "/stat")
	return ppid, ok
}

// readStat reads a process's state and parent from /proc/<pid>/stat. The
// command name may contain spaces and parentheses; the fields after the
// last ')' are "state ppid ...".
func readStat(path string) (state string, ppid int, ok bool) {
	data, err := os.ReadFile(path) //nolint:gosec // a /proc/<pid>/stat path
	if err != nil {
		return "", 0, false // the process went away
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return "", 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	return fields[0], ppid, err == nil
}
