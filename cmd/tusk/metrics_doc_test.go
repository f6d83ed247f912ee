package main

import (
	"flag"
	"os"
	"testing"

	"tusk.dev/tusk/internal/controller"
	"tusk.dev/tusk/internal/instance"
	"tusk.dev/tusk/internal/metricsdoc"
	"tusk.dev/tusk/internal/poolermanager"
	"tusk.dev/tusk/internal/probe"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/metrics.md from the metrics catalogues")

const metricsDoc = "../../docs/metrics.md"

const metricsDocIntro = `
Every metric Tusk serves, rendered from the definitions the code exports
them with (` + "`go test ./cmd/tusk -update`" + ` rewrites this page; a test fails
when it differs). Names follow Prometheus' conventions: units in the name,
` + "`_total`" + ` for counters, ` + "`_timestamp_seconds`" + ` for Unix times, and labels
of low cardinality (a cluster, an instance, a database, a state).

Besides these, the operator serves controller-runtime's
(` + "`controller_runtime_reconcile_total`" + `, ` + "`controller_runtime_reconcile_errors_total`" + `,
` + "`controller_runtime_reconcile_time_seconds`" + ` per controller, ` + "`workqueue_*`" + `,
` + "`rest_client_*`" + `), and all of them serve the Go runtime's (` + "`go_*`" + `, ` + "`process_*`" + `).
How to scrape them and alert on them: [monitoring.md](monitoring.md).
`

// TestMetricsDocMatchesTheCode: docs/metrics.md is what the catalogues
// render, so a metric added, renamed or re-described in the code and not
// in the page fails here.
func TestMetricsDocMatchesTheCode(t *testing.T) {
	got := metricsdoc.Markdown("Metrics", metricsDocIntro, map[string]*metricsdoc.Catalogue{
		"Operator":         controller.MetricsCatalogue,
		"Instance manager": instance.MetricsCatalogue,
		"SLI probe":        probe.MetricsCatalogue,
		"Pooler manager":   poolermanager.MetricsCatalogue,
	})
	if *updateDocs {
		if err := os.WriteFile(metricsDoc, []byte(got), 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("%s is not what the metrics catalogues render: run go test ./cmd/tusk -update and review the diff", metricsDoc)
	}
}
