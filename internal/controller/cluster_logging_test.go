package controller

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

func TestDesiredLoggingInMilliseconds(t *testing.T) {
	if got := desiredLogging(nil); got != nil {
		t.Fatalf("no logging block: %+v, want nil (the configuration's hash stays as before)", got)
	}
	on := true
	got := desiredLogging(&tuskv1alpha1.LoggingSpec{
		SlowStatementThreshold: &metav1.Duration{Duration: 1500 * time.Millisecond},
		LockWaits:              &on,
		LockWaitThreshold:      &metav1.Duration{Duration: time.Second},
	})
	data, _ := json.Marshal(got)
	if want := `{"slowStatementThresholdMillis":1500,"lockWaits":true,"lockWaitThresholdMillis":1000}`; string(data) != want {
		t.Fatalf("desiredLogging = %s, want %s", data, want)
	}
	if got := desiredLogging(&tuskv1alpha1.LoggingSpec{}); got.SlowStatementThresholdMillis != nil || got.LockWaits != nil || got.LockWaitThresholdMillis != nil {
		t.Fatalf("an empty block sets %+v, want nothing", got)
	}
}

func TestDesiredConfigCarriesTheLogging(t *testing.T) {
	c := clusterWithPrimary(1, 1)
	on := true
	c.Spec.PostgreSQL.Logging = &tuskv1alpha1.LoggingSpec{LockWaits: &on}
	cfg := desiredConfig(c, testView(c, inst{serial: 1, ready: true}))
	if cfg.Logging == nil || cfg.Logging.LockWaits == nil || !*cfg.Logging.LockWaits {
		t.Fatalf("desiredConfig's Logging = %+v, want lockWaits on", cfg.Logging)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}
