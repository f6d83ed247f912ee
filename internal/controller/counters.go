package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	primaryChangeSeconds = MetricsCatalogue.GaugeVec("tusk_cluster_last_primary_change_duration_seconds",
		"How long the cluster's last failover or switchover took, by kind: from when this operator first saw the primary fail, "+
			"or started the switchover, to the new primary recorded. An operator that restarted half-way counts from its start. "+
			"The write gap users felt is the SLI probe's (tusk_probe_requests_total).",
		"namespace", "cluster", "kind")
)

func init() {
	metrics.Registry.MustRegister(backupsEnded, primaryChanges, primaryChangeSeconds)
}

// observePrimaryChange counts a failover or a switchover that completed,
// and how long it took.
func observePrimaryChange(c *tuskv1alpha1.PostgresCluster, kind string, took time.Duration) {
	primaryChanges.WithLabelValues(c.Namespace, c.Name, kind).Inc()
	primaryChangeSeconds.WithLabelValues(c.Namespace, c.Name, kind).Set(took.Seconds())
}

// forgetClusterCounters drops a deleted cluster's counters, so they leave
// no series behind it.
func forgetClusterCounters(key types.NamespacedName) {
	labels := prometheus.Labels{"namespace": key.Namespace, "cluster": key.Name}
	for _, vec := range []*prometheus.MetricVec{backupsEnded.MetricVec, primaryChanges.MetricVec, primaryChangeSeconds.MetricVec} {
		vec.DeletePartialMatch(labels)
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

// observePrimaryChange counts a failover or a switchover that completed
// in c, timed from when it started (changingPrimary).
func (r *ClusterReconciler) observePrimaryChange(c *tuskv1alpha1.PostgresCluster, kind string) {
	key := client.ObjectKeyFromObject(c).String()
	observePrimaryChange(c, kind, r.changingPrimary.heldFor(key, time.Now()))
	r.changingPrimary.forget(key)
}
