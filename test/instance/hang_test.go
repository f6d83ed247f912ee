//go:build integration

package instance

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

// TestHungPrimaryFences: a primary whose postgres processes are all stopped
// (SIGSTOP, as a hung host would leave them) stops renewing its Lease and
// fences itself; its replica is promoted once the Lease expired. Its
// processes were killed by the fence: woken up (SIGCONT), nothing of the
// old primary takes writes, not even a session opened before.
func TestHungPrimaryFences(t *testing.T) {
	lease := newTestLease(t, "hung")
	// A Lease long enough that the replica is promoted well before the
	// fenced primary tries to take it again (two durations after its last
	// renewal).
	args := lease.argsLasting(t, lease.addr(t), 8*time.Second)
	primary := startNode(t, "hung-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: args})
	primary.waitReady(instanceapi.RolePrimary)
	lease.waitHolder(t, "hung-1")
	primary.exec("CREATE TABLE t (id int PRIMARY KEY)")
	primary.exec("INSERT INTO t VALUES (1)")
	replica := startNode(t, "hung-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port, extraArgs: args})
	replica.waitReady(instanceapi.RoleReplica)
	replica.waitIDs(1)
	session, err := primary.tryConnect(t.Context(), "postgres", superuserPassword, "app")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = session.Close(context.Background()) }()

	thaw := freeze(t, primary.postmasterPid(), true)
	primary.waitFor("fenced: postgres does not answer", func(st instanceapi.Status) error {
		if err := isFenced(st); err != nil {
			return err
		}
		if !strings.Contains(st.LastError, "postgres did not answer") {
			return errors.New("last error " + st.LastError)
		}
		return nil
	})
	primary.waitLog("Not renewing the primary Lease: postgres does not answer")
	// Promotion takes the Lease, which the replica does only once it
	// stayed unrenewed for its duration.
	testenv.EventuallyEvery(t, waitTimeout, 200*time.Millisecond, func(ctx context.Context) error {
		_, err := replica.call(ctx, http.MethodPost, instanceapi.PathPromote, nil, nil)
		return err
	})
	lease.waitHolder(t, "hung-2")
	replica.waitReady(instanceapi.RolePrimary)

	thaw()
	if _, err := session.Exec(t.Context(), "INSERT INTO t VALUES (2)"); err == nil {
		t.Error("a session of the fenced primary committed after SIGCONT")
	}
	if conn, err := primary.tryConnect(t.Context(), "postgres", superuserPassword, "app"); err == nil {
		_ = conn.Close(context.Background())
		t.Error("the fenced primary accepts connections after SIGCONT")
	}
	if ps := primary.postgresProcesses(); len(ps) > 0 {
		t.Errorf("postgres processes of the fenced primary remain: %v", ps)
	}
	primary.waitFor("fenced, seeing hung-2 hold the Lease", func(st instanceapi.Status) error {
		if err := isFenced(st); err != nil {
			return err
		}
		if !strings.Contains(st.LastError, "(hung-2)") {
			return errors.New("last error " + st.LastError)
		}
		return nil
	})
}

// TestPrimaryAnswersAgainBeforeTheFence: renewals stop while postgres does
// not answer and resume when it answers again, before the fence.
func TestPrimaryAnswersAgainBeforeTheFence(t *testing.T) {
	lease := newTestLease(t, "answers-again")
	// The fence comes a minute after the last renewal: far longer than the
	// test takes to wake postgres up.
	primary := startNode(t, "again-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: lease.argsLasting(t, lease.addr(t), time.Minute)})
	primary.waitReady(instanceapi.RolePrimary)
	lease.waitHolder(t, "again-1")

	thaw := freeze(t, primary.postmasterPid(), true)
	primary.waitLog("Not renewing the primary Lease: postgres does not answer")
	skipped := lease.get(t)
	thaw()
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		if renewed := lease.get(t); renewed.ResourceVersion == skipped.ResourceVersion {
			return errors.New("not renewed since postgres answers again")
		}
		return nil
	})
	primary.exec("CREATE TABLE t (id int PRIMARY KEY)")
	if strings.Contains(primary.logs(), "Fencing this primary") {
		t.Errorf("the primary fenced itself although postgres answered again long before the fence")
	}
	if holder := lease.holder(t); holder != "again-1" {
		t.Errorf("the Lease is held by %q", holder)
	}
}

// TestFenceKillsOpenSessions: a Lease fence ends the open sessions of a
// primary whose postmaster is stopped (it cannot act on an immediate
// shutdown, nor pass it on to its backends, which run on): the postmaster
// and every process it started are killed, and a transaction left open
// cannot commit.
func TestFenceKillsOpenSessions(t *testing.T) {
	lease := newTestLease(t, "fence-kills")
	primary := startNode(t, "kills-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: lease.args(t, lease.addr(t))})
	primary.waitReady(instanceapi.RolePrimary)
	lease.waitHolder(t, "kills-1")
	primary.exec("CREATE TABLE t (id int PRIMARY KEY)")
	session, err := primary.tryConnect(t.Context(), "postgres", superuserPassword, "app")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = session.Close(context.Background()) }()
	for _, sql := range []string{"BEGIN", "INSERT INTO t VALUES (1)"} {
		if _, err := session.Exec(t.Context(), sql); err != nil {
			t.Fatal(err)
		}
	}

	freeze(t, primary.postmasterPid(), false)
	primary.waitLog("Not renewing the primary Lease: postgres does not answer")
	// Another holder keeps the fenced primary from starting postgres
	// again, so that what follows sees the fence, not a restart.
	defer holdLease(t, lease, "successor")()
	primary.waitFor("fenced", isFenced)
	if _, err := session.Exec(t.Context(), "COMMIT"); err == nil {
		t.Error("a transaction open on the primary committed after the fence")
	}
	if ps := primary.postgresProcesses(); len(ps) > 0 {
		t.Errorf("postgres processes remain after the fence: %v", ps)
	}
	primary.waitLog("Killing postgres and every process it started")
}

// freeze stops the process root (a postmaster) with SIGSTOP and, with
// children, every process below it, found by their parents in /proc:
// PostgreSQL's children each lead a process group of their own. thaw (also
// run at cleanup, before the node's manager is stopped) sends SIGCONT to
// each.
func freeze(t *testing.T, root int, children bool) (thaw func()) {
	t.Helper()
	stopped := map[int]bool{}
	stop := func(pid int) {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("stopping %d: %v", pid, err)
		}
		stopped[pid] = true
	}
	stop(root)
	for children {
		added := false
		for _, pid := range processesBelow(root) {
			if !stopped[pid] {
				stop(pid)
				added = true
			}
		}
		children = added // once a pass stops nothing new, nothing can fork
	}
	thaw = func() {
		for pid := range stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	return thaw
}

// processesBelow lists the descendants of root, from /proc.
func processesBelow(root int) []int {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		s := string(data)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		pid, err1 := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		ppid, err2 := strconv.Atoi(fields[1])
		if err1 == nil && err2 == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var below []int
	for queue := []int{root}; len(queue) > 0; queue = queue[1:] {
		below = append(below, children[queue[0]]...)
		queue = append(queue, children[queue[0]]...)
	}
	return below
}
