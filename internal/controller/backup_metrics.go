package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// Gauges of a cluster's backups on the operator's /metrics, as Unix
// times; absent for clusters without them.
var (
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
	metrics.Registry.MustRegister(metricFirstRecoverabilityPoint, metricLastScheduleTime)
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
