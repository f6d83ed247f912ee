//go:build integration

package instance

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"tusk.dev/tusk/internal/instance"
	"tusk.dev/tusk/internal/instanceapi"
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
