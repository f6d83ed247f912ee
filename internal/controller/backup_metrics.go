package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// Metrics of base backups, served with controller-runtime's on the
// operator's metrics endpoint. The gauges are Unix times, absent for
// clusters without them.
var (
	backupsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tusk_backups_total",
		Help: "Base backups that ended since the operator started, by cluster and result (completed, failed).",
	}, []string{"namespace", "cluster", "result"})
	lastCompletedBackup = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tusk_backup_last_completed_timestamp_seconds",
		Help: "When the last base backup of the cluster that this operator saw complete completed (Unix time).",
	}, []string{"namespace", "cluster"})
	metricFirstRecoverabilityPoint = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tusk_backup_first_recoverability_point_seconds",
		Help: "The earliest time the cluster can be recovered to from its object store (Unix time), as retention last saw it.",
	}, []string{"namespace", "cluster"})
	metricLastScheduleTime = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tusk_backup_last_schedule_time_seconds",
		Help: "The scheduled time of the last backup the cluster's schedule created (Unix time).",
	}, []string{"namespace", "cluster"})
)

func init() {
	metrics.Registry.MustRegister(backupsEnded, lastCompletedBackup, metricFirstRecoverabilityPoint, metricLastScheduleTime)
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

// setBackupMetrics exports c's status.backup.
func setBackupMetrics(c *tuskv1alpha1.PostgresCluster) {
	var st tuskv1alpha1.BackupStatus
	if c.Status.Backup != nil {
		st = *c.Status.Backup
	}
	for gauge, t := range map[*prometheus.GaugeVec]*metav1.Time{
		metricFirstRecoverabilityPoint: st.FirstRecoverabilityPoint,
		metricLastScheduleTime:         st.LastScheduleTime,
	} {
		if t == nil {
			gauge.DeleteLabelValues(c.Namespace, c.Name)
			continue
		}
		gauge.WithLabelValues(c.Namespace, c.Name).Set(float64(t.Unix()))
	}
}

// forgetBackupMetrics drops a deleted cluster's gauges.
func forgetBackupMetrics(key types.NamespacedName) {
	metricFirstRecoverabilityPoint.DeleteLabelValues(key.Namespace, key.Name)
	metricLastScheduleTime.DeleteLabelValues(key.Namespace, key.Name)
}
