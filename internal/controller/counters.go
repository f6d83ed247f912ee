package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// Counters of what the operator did since it started; what the last
// backup or primary change left is read from the objects
// (ClusterCollector).
var (
	backupsEnded = MetricsCatalogue.CounterVec("tusk_backups_total",
		"Base backups that ended since the operator started, by cluster and result (completed, failed).",
		"namespace", "cluster", "result")
	primaryChanges = MetricsCatalogue.CounterVec("tusk_cluster_primary_changes_total",
		"Primaries this operator replaced since it started, by cluster and kind (failover: the primary failed; switchover: planned, a rollout's or kubectl tusk promote's).",
		"namespace", "cluster", "kind")
)

func init() {
	metrics.Registry.MustRegister(backupsEnded, primaryChanges)
}

// observePrimaryChange counts a failover or a switchover that completed.
func observePrimaryChange(c *tuskv1alpha1.PostgresCluster, kind string) {
	primaryChanges.WithLabelValues(c.Namespace, c.Name, kind).Inc()
}

// forgetClusterCounters drops a deleted cluster's counters, so they leave
// no series behind it.
func forgetClusterCounters(key types.NamespacedName) {
	for _, vec := range []*prometheus.CounterVec{backupsEnded, primaryChanges} {
		vec.DeletePartialMatch(prometheus.Labels{"namespace": key.Namespace, "cluster": key.Name})
	}
}

// observeBackupEnd counts a backup that just ended.
func observeBackupEnd(b *tuskv1alpha1.PostgresBackup) {
	result := "failed"
	if b.Status.Phase == tuskv1alpha1.BackupPhaseCompleted {
		result = "completed"
	}
	backupsEnded.WithLabelValues(b.Namespace, b.Spec.Cluster.Name, result).Inc()
}
