// Package monitoring tests what config/monitoring ships: the alert rules,
// the scrape configurations and the dashboard.
package monitoring

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"tusk.dev/tusk/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite config/monitoring/prometheusrule.yaml from the plain rule file")

func monitoringPath(parts ...string) string {
	return filepath.Join(append([]string{testenv.RepoRoot(), "config", "monitoring"}, parts...)...)
}

// prometheusRuleHeader says where the PrometheusRule comes from.
const prometheusRuleHeader = `# Generated from prometheus/tusk-rules.yaml by go test ./test/monitoring -update:
# edit that file, not this one.
`

// TestPrometheusRuleHoldsThePlainRules: the PrometheusRule (for the
// Prometheus Operator) holds exactly the groups of the plain rule file, so
// users of either get the same alerts.
func TestPrometheusRuleHoldsThePlainRules(t *testing.T) {
	plain, err := os.ReadFile(monitoringPath("prometheus", "tusk-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(plain, &rules); err != nil {
		t.Fatalf("tusk-rules.yaml: %v", err)
	}
	if len(rules.Groups) == 0 {
		t.Fatal("tusk-rules.yaml has no group")
	}
	wrapped, err := yaml.Marshal(map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PrometheusRule",
		"metadata":   map[string]any{"name": "tusk", "labels": map[string]string{"app.kubernetes.io/name": "tusk"}},
		"spec":       rules,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte(prometheusRuleHeader), wrapped...)
	path := monitoringPath("prometheusrule.yaml")
	if *update {
		if err := os.WriteFile(path, want, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s does not hold the groups of tusk-rules.yaml: run go test ./test/monitoring -update", path)
	}
}
