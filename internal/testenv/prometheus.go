package testenv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PrometheusBinDirEnv names the directory holding prometheus and promtool;
// `make integration` sets it from hack/install-prometheus.sh.
const PrometheusBinDirEnv = "TUSK_PROMETHEUS_BINDIR"

// RequirePromtool returns the path of promtool, or stops the test without
// it (missing).
func RequirePromtool(t testing.TB) string {
	t.Helper()
	path := filepath.Join(os.Getenv(PrometheusBinDirEnv), "promtool")
	if _, err := os.Stat(path); os.Getenv(PrometheusBinDirEnv) == "" || err != nil { //nolint:gosec // G703: the test environment's own setting
		missing(t, errors.New(PrometheusBinDirEnv+" does not name a directory with promtool: run hack/install-prometheus.sh and export it"))
	}
	return path
}

// CheckMetrics runs `promtool check metrics` on a scrape (the text
// exposition format): it fails the test on what promtool reports, such as
// a counter without _total or a unit that is not a base unit.
func CheckMetrics(t testing.TB, scrape string) {
	t.Helper()
	cmd := exec.Command(RequirePromtool(t), "check", "metrics") //nolint:gosec // promtool from the test environment
	cmd.Stdin = strings.NewReader(scrape)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// PrometheusOperatorCRDsEnv names the directory of the Prometheus
// Operator's CRDs; `make integration` sets it from
// hack/install-prometheus-operator-crds.sh.
const PrometheusOperatorCRDsEnv = "TUSK_PROMETHEUS_OPERATOR_CRDS"

// RequirePrometheusOperatorCRDs returns the directory of the Prometheus
// Operator's CRDs, or stops the test without it (missing).
func RequirePrometheusOperatorCRDs(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(PrometheusOperatorCRDsEnv)
	if dir == "" {
		missing(t, errors.New(PrometheusOperatorCRDsEnv+" is not set: run hack/install-prometheus-operator-crds.sh and export it"))
	}
	return dir
}
