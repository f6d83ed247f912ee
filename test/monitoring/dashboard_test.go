package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"tusk.dev/tusk/internal/testenv"
)

// The Grafana dashboard (config/monitoring/grafana/tusk-cluster.json) is
// rendered from the panels below: `go test ./test/monitoring -update`
// rewrites it, and the tests fail when it differs, when a query does not
// parse with Prometheus' own parser (promtool), or when a query reads a
// metric Tusk does not serve and no rule records.

// panel is one graph or figure of the dashboard.
type panel struct {
	title, kind, unit, help string
	// queries are PromQL with Grafana's variables $namespace, $cluster and
	// $__rate_interval; legends are their legend formats.
	queries, legends []string
	// width in Grafana's 24 columns; a row of panels wraps at 24.
	width int
}

// section is a collapsible row of panels.
type section struct {
	title  string
	panels []panel
}

const sel = `namespace="$namespace", cluster="$cluster"`

var dashboard = []section{
	{"Overview", []panel{
		{title: "Ready", kind: "stat", help: "The cluster's Ready condition (1: ready).",
			queries: []string{`max(tusk_cluster_ready{` + sel + `})`}, width: 4},
		{title: "Instances ready / desired", kind: "stat",
			queries: []string{`max(tusk_cluster_instances_ready{` + sel + `})`, `max(tusk_cluster_instances{` + sel + `})`},
			legends: []string{"ready", "desired"}, width: 5},
		{title: "Primary", kind: "stat", help: "The instance the operator records as the primary.",
			queries: []string{`max by (instance) (tusk_cluster_primary_info{` + sel + `})`}, legends: []string{"{{instance}}"}, width: 5},
		{title: "Phase", kind: "stat",
			queries: []string{`max by (phase) (tusk_cluster_phase{` + sel + `}) == 1`}, legends: []string{"{{phase}}"}, width: 5},
		{title: "Primary changes (24h)", kind: "stat",
			queries: []string{`sum by (kind) (increase(tusk_cluster_primary_changes_total{` + sel + `}[24h]))`}, legends: []string{"{{kind}}"}, width: 5},
	}},
	{"SLI probe", []panel{
		{title: "Availability (30 days, from the 3-day ratio)", kind: "stat", unit: "percentunit",
			help:    "Share of probe attempts that succeeded: writes through -rw, reads through -ro.",
			queries: []string{`1 - tusk:probe_failures:ratio_rate3d{` + sel + `}`}, legends: []string{"{{target}}"}, width: 6},
		{title: "Failed attempts", kind: "timeseries", unit: "percentunit",
			queries: []string{`tusk:probe_failures:ratio_rate5m{` + sel + `}`, `max(tusk:probe_error_budget:ratio{` + sel + `})`},
			legends: []string{"{{target}} failed (5m)", "error budget"}, width: 9},
		{title: "Attempt latency (p50, p99)", kind: "timeseries", unit: "s",
			queries: []string{
				`histogram_quantile(0.5, sum by (target, le) (rate(tusk_probe_request_duration_seconds_bucket{` + sel + `}[$__rate_interval])))`,
				`histogram_quantile(0.99, sum by (target, le) (rate(tusk_probe_request_duration_seconds_bucket{` + sel + `}[$__rate_interval])))`,
			},
			legends: []string{"{{target}} p50", "{{target}} p99"}, width: 9},
	}},
	{"Replication", []panel{
		{title: "Replay lag", kind: "timeseries", unit: "s",
			queries: []string{`max by (replica) (tusk_pg_replica_lag_seconds{` + sel + `})`}, legends: []string{"{{replica}}"}, width: 8},
		{title: "Lag behind the primary", kind: "timeseries", unit: "bytes",
			queries: []string{`max by (instance) (tusk_cluster_instance_lag_bytes{` + sel + `})`}, legends: []string{"{{instance}}"}, width: 8},
		{title: "Synchronous standbys ready / required", kind: "timeseries",
			queries: []string{`max(tusk_cluster_synchronous_standbys_ready{` + sel + `})`, `max(tusk_cluster_synchronous_standbys_required{` + sel + `})`},
			legends: []string{"ready", "required"}, width: 8},
	}},
	{"WAL and archive", []panel{
		{title: "Archive lag", kind: "timeseries", unit: "s", help: "How far the last archived segment is behind.",
			queries: []string{`max(tusk_cluster_archive_lag_seconds{` + sel + `})`}, legends: []string{"behind"}, width: 6},
		{title: "Archive failing", kind: "timeseries",
			queries: []string{`max(tusk_cluster_archive_failing{` + sel + `})`}, legends: []string{"failing"}, width: 6},
		{title: "WAL written", kind: "timeseries", unit: "Bps",
			queries: []string{`sum by (instance) (rate(tusk_pg_wal_written_bytes_total{` + sel + `}[$__rate_interval]))`}, legends: []string{"{{instance}}"}, width: 6},
		{title: "pg_wal size", kind: "timeseries", unit: "bytes",
			queries: []string{`max by (instance) (tusk_pg_wal_directory_bytes{` + sel + `})`}, legends: []string{"{{instance}}"}, width: 6},
	}},
	{"Backups", []panel{
		{title: "Last base backup", kind: "stat", unit: "s", help: "Time since the last base backup completed.",
			queries: []string{`time() - max(tusk_backup_last_completed_timestamp_seconds{` + sel + `})`}, width: 6},
		{title: "Last base backup size", kind: "stat", unit: "bytes",
			queries: []string{`max(tusk_backup_last_completed_size_bytes{` + sel + `})`}, width: 6},
		{title: "Recoverable window", kind: "stat", unit: "s", help: "How far back point-in-time recovery reaches.",
			queries: []string{`time() - max(tusk_backup_first_recoverability_point_timestamp_seconds{` + sel + `})`}, width: 6},
		{title: "Backups (24h)", kind: "stat",
			queries: []string{`sum by (result) (increase(tusk_backups_total{` + sel + `}[24h]))`}, legends: []string{"{{result}}"}, width: 6},
	}},
	{"Instances", []panel{
		{title: "Connections by state", kind: "timeseries",
			queries: []string{`sum by (instance, state) (tusk_pg_connections{` + sel + `})`, `max(tusk_pg_max_connections{` + sel + `})`},
			legends: []string{"{{instance}} {{state}}", "max_connections"}, width: 8},
		{title: "Transaction ID age", kind: "timeseries", help: "Wraparound comes at about 2 billion.",
			queries: []string{`max by (instance) (tusk_pg_xid_age{` + sel + `})`}, legends: []string{"{{instance}}"}, width: 8},
		{title: "Data volume used", kind: "timeseries", unit: "percentunit",
			queries: []string{`1 - max by (instance) (tusk_instance_volume_available_bytes{` + sel + `, volume="data"}) / max by (instance) (tusk_instance_volume_size_bytes{` + sel + `, volume="data"})`},
			legends: []string{"{{instance}}"}, width: 8},
		{title: "Database sizes", kind: "timeseries", unit: "bytes",
			queries: []string{`max by (database) (tusk_pg_database_size_bytes{` + sel + `})`}, legends: []string{"{{database}}"}, width: 8},
		{title: "Deadlocks and checkpoints", kind: "timeseries", unit: "ops",
			queries: []string{
				`sum(rate(tusk_pg_deadlocks_total{` + sel + `}[$__rate_interval]))`,
				`sum by (kind) (rate(tusk_pg_checkpoints_total{` + sel + `}[$__rate_interval]))`,
			},
			legends: []string{"deadlocks", "checkpoints {{kind}}"}, width: 8},
		{title: "Restarts and fencing", kind: "timeseries",
			queries: []string{
				`sum by (instance) (increase(tusk_instance_postgres_restarts_total{` + sel + `}[$__rate_interval]))`,
				`max by (instance, by) (tusk_instance_fenced{` + sel + `})`,
			},
			legends: []string{"{{instance}} restarts", "{{instance}} fenced by {{by}}"}, width: 8},
	}},
	{"Poolers", []panel{
		{title: "Pooler pods ready / wanted", kind: "stat", help: "The cluster's PostgresPoolers, as the operator sees them.",
			queries: []string{`max by (pooler) (tusk_pooler_instances_ready{` + sel + `})`, `max by (pooler) (tusk_pooler_instances{` + sel + `})`},
			legends: []string{"{{pooler}} ready", "{{pooler}} wanted"}, width: 6},
		{title: "Clients by pool", kind: "timeseries", help: "SHOW POOLS cl_active and cl_waiting, summed over each pooler's pods.",
			queries: []string{`sum by (pooler, database, user, state) (tusk_pooler_clients{` + sel + `})`},
			legends: []string{"{{pooler}} {{database}}/{{user}} {{state}}"}, width: 9},
		{title: "Server connections by pool", kind: "timeseries", help: "SHOW POOLS sv_active and sv_idle, summed over each pooler's pods.",
			queries: []string{`sum by (pooler, database, user, state) (tusk_pooler_server_connections{` + sel + `})`},
			legends: []string{"{{pooler}} {{database}}/{{user}} {{state}}"}, width: 9},
		{title: "Longest client wait", kind: "timeseries", unit: "s", help: "How long the oldest client waiting for a server connection has waited (SHOW POOLS maxwait), worst pod.",
			queries: []string{`max by (pooler, database, user) (tusk_pooler_client_max_wait_seconds{` + sel + `})`},
			legends: []string{"{{pooler}} {{database}}/{{user}}"}, width: 6},
		{title: "Transactions and queries", kind: "timeseries", unit: "ops",
			queries: []string{
				`sum by (pooler, database) (rate(tusk_pooler_transactions_total{` + sel + `}[$__rate_interval]))`,
				`sum by (pooler, database) (rate(tusk_pooler_queries_total{` + sel + `}[$__rate_interval]))`,
			},
			legends: []string{"{{pooler}} {{database}} transactions", "{{pooler}} {{database}} queries"}, width: 6},
		{title: "Pauses and PgBouncer restarts", kind: "timeseries", help: "Switchover pauses by result, pods paused now, and PgBouncer's unexpected exits.",
			queries: []string{
				`sum by (pooler, result) (increase(tusk_pooler_pauses_total{` + sel + `}[$__rate_interval]))`,
				`sum by (pooler) (tusk_pooler_paused{` + sel + `})`,
				`sum by (pooler) (increase(tusk_pooler_pgbouncer_restarts_total{` + sel + `}[$__rate_interval]))`,
			},
			legends: []string{"{{pooler}} pauses {{result}}", "{{pooler}} pods paused", "{{pooler}} restarts"}, width: 6},
		{title: "Last pause held clients", kind: "timeseries", unit: "s", help: "How long each pod's last pause held clients, and waited for transactions in flight to take hold.",
			queries: []string{
				`max by (pooler, instance) (tusk_pooler_last_pause_seconds{` + sel + `})`,
				`max by (pooler, instance) (tusk_pooler_last_pause_wait_seconds{` + sel + `})`,
			},
			legends: []string{"{{instance}} held", "{{instance}} waited"}, width: 6},
	}},
}

// grafanaDashboard renders the sections as Grafana's dashboard JSON model.
func grafanaDashboard() map[string]any {
	var panels []any
	id, y := 1, 0
	for _, s := range dashboard {
		panels = append(panels, map[string]any{"type": "row", "title": s.title, "id": id, "collapsed": false,
			"gridPos": map[string]int{"h": 1, "w": 24, "x": 0, "y": y}})
		id, y = id+1, y+1
		x := 0
		for _, p := range s.panels {
			if x+p.width > 24 {
				x, y = 0, y+8
			}
			panels = append(panels, grafanaPanel(p, id, x, y))
			id, x = id+1, x+p.width
		}
		y += 8
	}
	variable := func(name, label, query string) map[string]any {
		return map[string]any{"name": name, "label": label, "type": "query", "query": query, "refresh": 2,
			"datasource": map[string]string{"type": "prometheus", "uid": "${datasource}"}}
	}
	return map[string]any{
		"title":         "Tusk / PostgreSQL cluster",
		"uid":           "tusk-cluster",
		"description":   "One Tusk PostgresCluster: generated by go test ./test/monitoring -update from test/monitoring/dashboard_test.go.",
		"tags":          []string{"tusk", "postgresql"},
		"schemaVersion": 39,
		"editable":      true,
		"time":          map[string]string{"from": "now-6h", "to": "now"},
		"refresh":       "30s",
		"panels":        panels,
		"templating": map[string]any{"list": []any{
			map[string]any{"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus"},
			variable("namespace", "Namespace", "label_values(tusk_cluster_instances, namespace)"),
			variable("cluster", "Cluster", `label_values(tusk_cluster_instances{namespace="$namespace"}, cluster)`),
		}},
	}
}

func grafanaPanel(p panel, id, x, y int) map[string]any {
	targets := make([]any, len(p.queries))
	for i, q := range p.queries {
		legend := "__auto"
		if i < len(p.legends) {
			legend = p.legends[i]
		}
		targets[i] = map[string]any{"expr": q, "legendFormat": legend, "refId": string(rune('A' + i)),
			"datasource": map[string]string{"type": "prometheus", "uid": "${datasource}"}}
	}
	out := map[string]any{
		"id": id, "type": p.kind, "title": p.title, "targets": targets,
		"datasource":  map[string]string{"type": "prometheus", "uid": "${datasource}"},
		"gridPos":     map[string]int{"h": 8, "w": p.width, "x": x, "y": y},
		"fieldConfig": map[string]any{"defaults": map[string]any{"unit": cmpOr(p.unit, "short")}, "overrides": []any{}},
	}
	if p.help != "" {
		out["description"] = p.help
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func dashboardPath() string { return monitoringPath("grafana", "tusk-cluster.json") }

// TestDashboardIsGenerated: the committed dashboard is what the panels
// render (-update rewrites it).
func TestDashboardIsGenerated(t *testing.T) {
	got, err := json.MarshalIndent(grafanaDashboard(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.WriteFile(dashboardPath(), got, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(dashboardPath())
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s is not what dashboard_test.go renders: run go test ./test/monitoring -update and review the diff", dashboardPath())
	}
}

// grafanaVariables are what Grafana puts in place of the dashboard's
// variables before it sends a query.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$namespace", "ns", "$cluster", "pg")

// TestDashboardQueriesParse runs every query of the committed dashboard,
// its variables filled in as Grafana does, through Prometheus' PromQL
// parser (as recording rules that `promtool check rules` parses), and
// checks each reads only metrics Tusk serves or series the rules record.
func TestDashboardQueriesParse(t *testing.T) {
	promtool := testenv.RequirePromtool(t)
	queries := committedQueries(t)
	if len(queries) < 20 {
		t.Fatalf("the dashboard has %d queries; the panels were not read", len(queries))
	}
	var rules ruleFile
	readYAML(t, monitoringPath("prometheus", "tusk-rules.yaml"), &rules)
	known := servedSeries()
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				known[r.Record] = true
			}
		}
	}
	tuskName := regexp.MustCompile(`\btusk[_:][a-zA-Z0-9_:]*`)
	var recorded []map[string]string
	for i, q := range queries {
		expr := grafanaVariables.Replace(q)
		for _, name := range tuskName.FindAllString(expr, -1) {
			if !known[name] {
				t.Errorf("the dashboard reads %q, which Tusk does not serve and no rule records: %s", name, q)
			}
		}
		recorded = append(recorded, map[string]string{"record": fmt.Sprintf("dashboard:query%d", i), "expr": expr})
	}
	data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": recorded}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool does not parse the dashboard's queries: %v\n%s", err, out)
	}
}

// committedQueries reads every query of the committed dashboard file.
func committedQueries(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(dashboardPath())
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	var queries []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			queries = append(queries, tg.Expr)
		}
	}
	return queries
}
