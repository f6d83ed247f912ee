//go:build integration

package pooler

import (
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"tusk.dev/tusk/internal/poolermanager"
)

// checkScrapeIsTheCatalogue parses a scrape of a pooler manager that has
// paused, resumed and pooled clients, as Prometheus would, and checks that
// it serves every metric of the catalogue docs/metrics.md is rendered
// from (the names the alert rules and the dashboard read) with the
// catalogue's type, and no tusk_ family the catalogue lacks.
func checkScrapeIsTheCatalogue(t testing.TB, text string) {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the scrape does not parse: %v", err)
	}
	kinds := map[string]string{}
	for _, m := range poolermanager.MetricsCatalogue.Metrics() {
		kinds[m.Name] = string(m.Kind)
		f, ok := families[m.Name]
		if !ok {
			t.Errorf("%s is in the catalogue but not served", m.Name)
			continue
		}
		if got := strings.ToLower(f.GetType().String()); got != string(m.Kind) {
			t.Errorf("%s is served as a %s, the catalogue says %s", m.Name, got, m.Kind)
		}
	}
	for name := range families {
		if _, ok := kinds[name]; strings.HasPrefix(name, "tusk_") && !ok {
			t.Errorf("%s is served but not in the catalogue (docs/metrics.md)", name)
		}
	}
}
