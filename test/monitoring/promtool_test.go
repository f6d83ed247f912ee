package monitoring

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"tusk.dev/tusk/internal/controller"
	"tusk.dev/tusk/internal/instance"
	"tusk.dev/tusk/internal/metricsdoc"
	"tusk.dev/tusk/internal/poolermanager"
	"tusk.dev/tusk/internal/probe"
	"tusk.dev/tusk/internal/testenv"
)

// TestRulesPassPromtool: promtool accepts the rule file, and its unit
// tests (tusk-rules_test.yaml) pass: each alert fires on the series that
// mean it, with its labels and text, and none fires for a healthy cluster.
func TestRulesPassPromtool(t *testing.T) {
	promtool := testenv.RequirePromtool(t)
	for _, args := range [][]string{
		{"check", "rules", "tusk-rules.yaml"},
		{"test", "rules", "tusk-rules_test.yaml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = monitoringPath("prometheus")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Record      string            `json:"record"`
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

type ruleTests struct {
	Tests []struct {
		InputSeries []struct {
			Series string `json:"series"`
		} `json:"input_series"`
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// servedSeries returns the names of the series Tusk serves: the metrics
// of docs/metrics.md (a histogram as its _bucket, _sum and _count series)
// and Prometheus' up.
func servedSeries() map[string]bool {
	served := map[string]bool{"up": true}
	for _, c := range []*metricsdoc.Catalogue{controller.MetricsCatalogue, instance.MetricsCatalogue, probe.MetricsCatalogue, poolermanager.MetricsCatalogue} {
		for _, m := range c.Metrics() {
			if m.Kind == metricsdoc.Histogram {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					served[m.Name+suffix] = true
				}
				continue
			}
			served[m.Name] = true
		}
	}
	return served
}

// TestEveryAlertIsTestedAndHasARunbook: each alert fires in at least one
// promtool test, its runbook annotation points to a section of
// docs/runbooks.md, and the rules read and the tests feed only metrics
// Tusk serves (the catalogue of docs/metrics.md, and Prometheus' up) or
// series the rules record (named tusk:...): an expression on a misspelt or
// removed metric could then never fire.
func TestEveryAlertIsTestedAndHasARunbook(t *testing.T) {
	var rules ruleFile
	readYAML(t, monitoringPath("prometheus", "tusk-rules.yaml"), &rules)
	var tests ruleTests
	readYAML(t, monitoringPath("prometheus", "tusk-rules_test.yaml"), &tests)
	runbooks, err := os.ReadFile(testenv.RepoRoot() + "/docs/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}

	fired := map[string]bool{}
	served := servedSeries()
	seriesName := regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	for _, tc := range tests.Tests {
		for _, in := range tc.InputSeries {
			if name := seriesName.FindString(in.Series); !served[name] {
				t.Errorf("the rule tests feed %q, which Tusk does not serve", name)
			}
		}
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fired[a.Alertname] = true
			}
		}
	}
	recorded := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	// Tusk's metric names and recorded series, wherever an expression names
	// them; label values (tusk-operator) do not match.
	tuskName := regexp.MustCompile(`\btusk[_:][a-zA-Z0-9_:]*`)
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, name := range tuskName.FindAllString(r.Expr, -1) {
				if !served[name] && !recorded[name] {
					t.Errorf("%s%s reads %q, which Tusk does not serve and no rule records", r.Alert, r.Record, name)
				}
			}
			if r.Record != "" {
				if !strings.HasPrefix(r.Record, "tusk:") {
					t.Errorf("recording rule %s is not named tusk:<what>:<how>", r.Record)
				}
				continue
			}
			alerts = append(alerts, r.Alert)
			if !fired[r.Alert] {
				t.Errorf("%s fires in no test of tusk-rules_test.yaml", r.Alert)
			}
			want := "docs/runbooks.md#" + strings.ToLower(r.Alert)
			if r.Annotations["runbook"] != want {
				t.Errorf("%s's runbook annotation is %q, want %q", r.Alert, r.Annotations["runbook"], want)
			}
			if !strings.Contains(string(runbooks), "\n## "+r.Alert+"\n") {
				t.Errorf("docs/runbooks.md has no section %q", r.Alert)
			}
		}
	}
	for name := range fired {
		if !slices.Contains(alerts, name) {
			t.Errorf("the rule tests expect %s, which no rule defines", name)
		}
	}
}
