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
	var promoteMs, rssMiB float64
	for range b.N {
		b.StopTimer()
		primary := startNode(b, "bench-1", nodeOptions{role: instanceapi.RolePrimary})
		primary.waitReady(instanceapi.RolePrimary)
		replica := startNode(b, "bench-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
		replica.waitReady(instanceapi.RoleReplica)
		rssMiB += residentMiB(b, replica.cmd.Process.Pid)
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
}

// residentMiB reads a process's resident set size from /proc.
func residentMiB(b testing.TB, pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	b.Fatal("no VmRSS in /proc/pid/status")
	return 0
}
