package controller

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// The metrics of each pooler the operator serves, read from its spec and
// status when Prometheus scrapes (the pooler pods serve PgBouncer's own):
// they count pods that never started or were never scheduled, which no
// scrape of the pods sees.
var (
	descPoolerInstances      = defineCluster("tusk_pooler_instances", "PgBouncer pods the pooler's spec asks for (labelled with the cluster it pools for).", "pooler")
	descPoolerInstancesReady = defineCluster("tusk_pooler_instances_ready", "PgBouncer pods of the pooler that are ready (status.readyInstances).", "pooler")
)

// poolerMetrics are every pooler's metrics; none when the poolers cannot
// be listed.
func (c ClusterCollector) poolerMetrics(ctx context.Context) []prometheus.Metric {
	var poolers tuskv1alpha1.PostgresPoolerList
	if err := c.Reader.List(ctx, &poolers); err != nil {
		log.FromContext(ctx).Error(err, "Listing PostgresPoolers for the pooler metrics")
		return nil
	}
	var out []prometheus.Metric
	for i := range poolers.Items {
		out = append(out, poolerMetrics(&poolers.Items[i])...)
	}
	return out
}

func poolerMetrics(p *tuskv1alpha1.PostgresPooler) []prometheus.Metric {
	ns, cluster := p.Namespace, p.Spec.Cluster.Name
	return []prometheus.Metric{
		clusterGauge(descPoolerInstances, float64(p.Spec.Instances), ns, cluster, p.Name),
		clusterGauge(descPoolerInstancesReady, float64(p.Status.ReadyInstances), ns, cluster, p.Name),
	}
}
