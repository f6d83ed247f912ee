package controller

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

func TestBackupMetrics(t *testing.T) {
	c := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "metrics-test"}}
	frp := time.Date(2026, 11, 16, 3, 10, 0, 0, time.UTC)
	c.Status.Backup = &tuskv1alpha1.BackupStatus{FirstRecoverabilityPoint: ptr.To(metav1.NewTime(frp))}
	setBackupMetrics(c)
	if got := testutil.ToFloat64(metricFirstRecoverabilityPoint.WithLabelValues("ns", "metrics-test")); got != float64(frp.Unix()) {
		t.Errorf("first recoverability point gauge %v, want %v", got, frp.Unix())
	}
	// DeleteLabelValues says whether the series existed; other tests of
	// the package leave series of their own clusters in these gauges.
	if metricLastScheduleTime.DeleteLabelValues("ns", "metrics-test") {
		t.Error("a last schedule time series without a scheduled backup, want none")
	}
	forgetBackupMetrics(types.NamespacedName{Namespace: "ns", Name: "metrics-test"})
	if metricFirstRecoverabilityPoint.DeleteLabelValues("ns", "metrics-test") {
		t.Error("a first recoverability point series after the cluster is gone, want none")
	}
}
