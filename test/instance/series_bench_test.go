//go:build integration

package instance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"tusk.dev/tusk/internal/instance"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

// extraDatabases is how many databases BenchmarkMetricsSeries adds to
// find what each database costs.
const extraDatabases = 10

// BenchmarkMetricsSeries counts the series each instance manager's
// /metrics serves (what Prometheus stores per scrape target): on the
// primary of a three-instance cluster and on a replica, all of them and
// Tusk's own (tusk_*), and what each further database adds (its size is
// the one metric per database). Series are the sample lines of the text
// exposition: a histogram's buckets count one each, as Prometheus stores
// them.
func BenchmarkMetricsSeries(b *testing.B) {
	primary := startNode(b, "series-1", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)
	replica := startNode(b, "series-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
	replica.waitReady(instanceapi.RoleReplica)
	third := startNode(b, "series-3", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
	third.waitReady(instanceapi.RoleReplica)
	primary.waitFor("both replicas streaming", func(st instanceapi.Status) error {
		if len(st.Replicas) != 2 {
			return fmt.Errorf("replicas %+v", st.Replicas)
		}
		return nil
	})
	var onPrimary, onReplica seriesCount
	b.ResetTimer()
	for range b.N {
		onPrimary = countSeries(b, primary.metrics())
		onReplica = countSeries(b, replica.metrics())
	}
	b.StopTimer()
	for i := range extraDatabases {
		primary.exec(fmt.Sprintf("CREATE DATABASE series_%d", i))
	}
	// PostgreSQL's own figures are cached for a few seconds
	// (sqlMetricsMaxAge): wait for a scrape that has the new databases.
	var more seriesCount
	testenv.EventuallyEvery(b, time.Minute, time.Second, func(context.Context) error {
		text := primary.metrics()
		if more = countSeries(b, text); !strings.Contains(text, fmt.Sprintf(`database="series_%d"`, extraDatabases-1)) {
			return errors.New("the scrape does not have the new databases yet")
		}
		return nil
	})
	perDatabase := float64(more.tusk-onPrimary.tusk) / extraDatabases
	if onPrimary.tusk == 0 || onReplica.tusk == 0 || perDatabase < 1 {
		b.Fatalf("implausible counts: primary %+v, replica %+v, per database %v", onPrimary, onReplica, perDatabase)
	}
	b.ReportMetric(float64(onPrimary.all), "series-primary")
	b.ReportMetric(float64(onPrimary.tusk), "tusk-series-primary")
	b.ReportMetric(float64(onReplica.all), "series-replica")
	b.ReportMetric(float64(onReplica.tusk), "tusk-series-replica")
	b.ReportMetric(perDatabase, "series-per-database")
}

// seriesCount is how many series a scrape holds: all, and Tusk's own.
type seriesCount struct{ all, tusk int }

func countSeries(b *testing.B, text string) seriesCount {
	b.Helper()
	testenv.CheckCatalogued(b, text, instance.MetricsCatalogue, false)
	var n seriesCount
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n.all++
		if strings.HasPrefix(line, "tusk_") {
			n.tusk++
		}
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return n
}
