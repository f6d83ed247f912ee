//go:build integration

package instance

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instance"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

// BenchmarkPromote measures what failover waits for on an instance: from
// the promote call to the first committed write on the new primary (the
// time the manager reports), for a caught-up replica. It also reports the
// instance manager's resident memory on the replica it promotes.
func BenchmarkPromote(b *testing.B) {
	var promoteMs, rssMiB, anonMiB float64
	for range b.N {
		b.StopTimer()
		primary := startNode(b, "bench-1", nodeOptions{role: instanceapi.RolePrimary})
		primary.waitReady(instanceapi.RolePrimary)
		replica := startNode(b, "bench-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
		replica.waitReady(instanceapi.RoleReplica)
		rss, anon := residentMiB(b, replica.cmd.Process.Pid)
		rssMiB += rss
		anonMiB += anon
		primary.stop()
		b.StartTimer()
		var res instance.PromoteResult
		replica.command(http.MethodPost, instanceapi.PathPromote, nil, &res)
		b.StopTimer()
		promoteMs += float64(res.Duration.Microseconds()) / 1000
		replica.stop()
	}
	b.ReportMetric(promoteMs/float64(b.N), "ms-to-first-write")
	b.ReportMetric(rssMiB/float64(b.N), "manager-RSS-MiB")
	b.ReportMetric(anonMiB/float64(b.N), "manager-anon-MiB")
}

// residentMiB reads a process's resident set size from /proc: all of it,
// and the anonymous part (heap and stacks, without the pages of the
// executable file, which the page cache shares and can drop).
func residentMiB(b testing.TB, pid int) (rss, anon float64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "RssAnon:":
			anon = kb / 1024
		}
	}
	if rss == 0 {
		b.Fatal("no VmRSS in /proc/pid/status")
	}
	return rss, anon
}

// BenchmarkRestartAfterCrash measures what the kill-postmaster fault waits
// for on an instance: from SIGKILL to the primary's postmaster, with idle
// client sessions open (their backends outlive it for a moment), to the
// first write committed by a new session. Run it with -benchtime 1x (and
// -count for more runs): crashes in a row back off longer on purpose.
func BenchmarkRestartAfterCrash(b *testing.B) {
	n := startNode(b, "crash-1", nodeOptions{role: instanceapi.RolePrimary})
	n.waitReady(instanceapi.RolePrimary)
	benchmarkRestartAfterCrash(b, n)
}

// BenchmarkRestartAfterCrashSynchronous is BenchmarkRestartAfterCrash with
// a synchronous standby (ANY 1), as the HA clusters run: the first commit
// after the restart also waits for the standby to stream again.
func BenchmarkRestartAfterCrashSynchronous(b *testing.B) {
	n := startNode(b, "crashsync-1", nodeOptions{role: instanceapi.RolePrimary,
		config: &instanceapi.Config{SynchronousStandbyNames: "ANY 1 (crashsync_2)"}})
	n.waitReady(instanceapi.RolePrimary)
	r := startNode(b, "crashsync_2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: n.port})
	r.waitReady(instanceapi.RoleReplica)
	benchmarkRestartAfterCrash(b, n)
}

func benchmarkRestartAfterCrash(b *testing.B, n *node) {
	n.exec("CREATE TABLE t (id int)")
	var total time.Duration
	for i := range b.N {
		b.StopTimer()
		n.waitReady(instanceapi.RolePrimary)
		sessions := openSessions(b, n, 8)
		b.StartTimer()
		start := time.Now()
		if err := syscall.Kill(n.postmasterPid(), syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		testenv.Eventually(b, waitTimeout, func(ctx context.Context) error { return n.tryWrite(ctx, i) })
		total += time.Since(start)
		b.StopTimer()
		closeSessions(sessions)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-first-write")
}

// openSessions opens n idle sessions to the node, as a pooled client holds.
func openSessions(b testing.TB, n *node, count int) []*pgx.Conn {
	var conns []*pgx.Conn
	for range count {
		conn, err := n.tryConnect(context.Background(), "postgres", superuserPassword, "app")
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, conn)
	}
	return conns
}

func closeSessions(conns []*pgx.Conn) {
	for _, c := range conns {
		_ = c.Close(context.Background())
	}
}

// tryWrite commits one row in a new session.
func (n *node) tryWrite(ctx context.Context, id int) error {
	conn, err := n.tryConnect(ctx, "postgres", superuserPassword, "app")
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, "INSERT INTO t VALUES ($1)", id)
	return err
}
