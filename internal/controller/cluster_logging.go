package controller

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// desiredLogging is spec.postgresql.logging as the instance API carries
// it; nil when the spec has none.
func desiredLogging(l *tuskv1alpha1.LoggingSpec) *instanceapi.Logging {
	if l == nil {
		return nil
	}
	millis := func(d *metav1.Duration) *int64 {
		if d == nil {
			return nil
		}
		ms := d.Milliseconds()
		return &ms
	}
	return &instanceapi.Logging{
		SlowStatementThresholdMillis: millis(l.SlowStatementThreshold),
		LockWaits:                    l.LockWaits,
		LockWaitThresholdMillis:      millis(l.LockWaitThreshold),
	}
}
