package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// Metrics of base backups, served with controller-runtime's on the
// operator's metrics endpoint.
var (
	backupsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tusk_backups_total",
		Help: "Base backups that ended since the operator started, by cluster and result (completed, failed).",
	}, []string{"namespace", "cluster", "result"})
	lastCompletedBackup = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tusk_backup_last_completed_timestamp_seconds",
		Help: "When the last base backup of the cluster that this operator saw complete completed (Unix time).",
	}, []string{"namespace", "cluster"})
)

func init() {
	metrics.Registry.MustRegister(backupsEnded, lastCompletedBackup)
}

// observeBackupEnd counts a backup that just ended.
func observeBackupEnd(b *tuskv1alpha1.PostgresBackup) {
	result := "failed"
	if b.Status.Phase == tuskv1alpha1.BackupPhaseCompleted {
		result = "completed"
		if t := b.Status.CompletedAt; t != nil {
			lastCompletedBackup.WithLabelValues(b.Namespace, b.Spec.Cluster.Name).Set(float64(t.Unix()))
		}
	}
	backupsEnded.WithLabelValues(b.Namespace, b.Spec.Cluster.Name, result).Inc()
}
