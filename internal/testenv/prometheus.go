package testenv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"tusk.dev/tusk/internal/metricsdoc"
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

// CheckCatalogued parses a scrape as Prometheus would and checks that
// every tusk_ family it serves is in catalogue (the list docs/metrics.md
// is rendered from) with the catalogue's type; with everyListed, also
// that it serves every metric the catalogue lists (the names alert rules
// and dashboards read).
func CheckCatalogued(t testing.TB, scrape string, catalogue *metricsdoc.Catalogue, everyListed bool) {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(scrape))
	if err != nil {
		t.Fatalf("the scrape does not parse: %v", err)
	}
	kinds := map[string]string{}
	for _, m := range catalogue.Metrics() {
		kinds[m.Name] = string(m.Kind)
		if _, served := families[m.Name]; everyListed && !served {
			t.Errorf("%s is in the catalogue but not served", m.Name)
		}
	}
	for name, f := range families {
		if !strings.HasPrefix(name, "tusk_") {
			continue
		}
		if kind, ok := kinds[name]; !ok {
			t.Errorf("%s is served but not in the catalogue (docs/metrics.md)", name)
		} else if got := strings.ToLower(f.GetType().String()); got != kind {
			t.Errorf("%s is served as a %s, the catalogue says %s", name, got, kind)
		}
	}
}
