package controller

import (
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// backupsEnded counts the base backups that ended since the operator
// started; what the last one left is read from the PostgresBackups
// (ClusterCollector).
var backupsEnded = MetricsCatalogue.CounterVec("tusk_backups_total",
	"Base backups that ended since the operator started, by cluster and result (completed, failed).",
	"namespace", "cluster", "result")

func init() {
	metrics.Registry.MustRegister(backupsEnded)
}

// observeBackupEnd counts a backup that just ended.
func observeBackupEnd(b *tuskv1alpha1.PostgresBackup) {
	result := "failed"
	if b.Status.Phase == tuskv1alpha1.BackupPhaseCompleted {
		result = "completed"
	}
	backupsEnded.WithLabelValues(b.Namespace, b.Spec.Cluster.Name, result).Inc()
}
