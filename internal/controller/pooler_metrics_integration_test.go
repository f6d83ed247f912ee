//go:build integration

package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"tusk.dev/tusk/internal/testenv"
)

// TestPoolerMetricsComeFromTheCache: the operator's scrape holds each
// pooler's pods wanted (spec.instances, as the API server defaulted it)
// and ready, labelled with the pooler and the cluster it pools for, read
// from the operator's cache; a deleted pooler leaves no series.
func TestPoolerMetricsComeFromTheCache(t *testing.T) {
	ns := newNamespace(t)
	p := newPooler(ns, "pg-rw", "pg")
	create(t, p)
	collector := ClusterCollector{Reader: startCache(t, CacheOptions(nil, operatorNamespace))}

	testenv.Eventually(t, 30*time.Second, func(context.Context) error {
		series := scrapeCluster(t, collector, ns, "pg")
		wanted, ready := series["tusk_pooler_instances"], series["tusk_pooler_instances_ready"]
		if value(wanted) != 2 || len(ready) != 1 {
			return fmt.Errorf("tusk_pooler_instances %v, tusk_pooler_instances_ready %v; want 2 (the default) and one series", wanted, ready)
		}
		for _, m := range []*dto.Metric{wanted[0], ready[0]} {
			if labelValue(m, "pooler") != "pg-rw" {
				return fmt.Errorf("a pooler series is labelled %v", m.GetLabel())
			}
		}
		return nil
	})

	if err := env.Client.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func(context.Context) error {
		if left := scrapeCluster(t, collector, ns, "pg"); len(left) > 0 {
			return fmt.Errorf("series left after the pooler's deletion: %v", left)
		}
		return nil
	})
}
