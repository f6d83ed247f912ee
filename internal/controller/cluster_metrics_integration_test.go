//go:build integration

package controller

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"tusk.dev/tusk/internal/testenv"
)

// TestClusterCollectorReadsTheCache: the operator's cluster metrics come
// from its cache (the operator's own cache options) when scraped: a new
// cluster shows its spec, its phase and the certificates the reconciler
// issued for it, and a deleted one leaves no series.
func TestClusterCollectorReadsTheCache(t *testing.T) {
	ns := newNamespace(t)
	c := newCluster(ns)
	create(t, c)
	collector := ClusterCollector{Reader: startCache(t, CacheOptions(nil, operatorNamespace))}

	var series map[string][]*dto.Metric
	testenv.Eventually(t, 30*time.Second, func(context.Context) error {
		series = scrapeCluster(t, collector, ns, c.Name)
		if len(series["tusk_cluster_certificate_expiry_timestamp_seconds"]) < 3 {
			return fmt.Errorf("certificate expiries %v, want the CA's, the server's and the replication client's", series["tusk_cluster_certificate_expiry_timestamp_seconds"])
		}
		return nil
	})
	if got := value(series["tusk_cluster_instances"]); got != 3 {
		t.Errorf("tusk_cluster_instances = %v, want 3", got)
	}
	if got := len(series["tusk_cluster_phase"]); got != len(clusterPhases) {
		t.Errorf("%d tusk_cluster_phase series, want one per phase (%d)", got, len(clusterPhases))
	}
	soon, later := time.Now(), time.Now().Add(20*365*24*time.Hour)
	for _, m := range series["tusk_cluster_certificate_expiry_timestamp_seconds"] {
		if at := time.Unix(int64(m.GetGauge().GetValue()), 0); at.Before(soon) || at.After(later) {
			t.Errorf("certificate %v expires at %v", m.GetLabel(), at)
		}
	}

	checkOperatorScrape(t, collector)

	if err := env.Client.Delete(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func(context.Context) error {
		if left := scrapeCluster(t, collector, ns, c.Name); len(left) > 0 {
			return fmt.Errorf("a deleted cluster still has series: %v", left)
		}
		return nil
	})
}

// checkOperatorScrape renders what the operator's endpoint serves
// (controller-runtime's registry, Tusk's counters on it, and the cluster
// collector) as Prometheus scrapes it, and has promtool check it.
func checkOperatorScrape(t *testing.T, collector prometheus.Collector) {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(collector); err != nil {
		t.Fatal(err)
	}
	families, err := prometheus.Gatherers{ctrlmetrics.Registry, reg}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(buf.String(), "tusk_cluster_instances{") {
		t.Fatalf("the scrape lacks the cluster metrics:\n%s", buf.String())
	}
	testenv.CheckMetrics(t, buf.String())
}

// scrapeCluster collects the cluster's series by metric name.
func scrapeCluster(t *testing.T, c prometheus.Collector, ns, name string) map[string][]*dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*dto.Metric{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if labelValue(m, "namespace") == ns && labelValue(m, "cluster") == name {
				out[f.GetName()] = append(out[f.GetName()], m)
			}
		}
	}
	return out
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(ms []*dto.Metric) float64 {
	if len(ms) != 1 {
		return -1
	}
	return ms[0].GetGauge().GetValue()
}
