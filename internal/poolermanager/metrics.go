package poolermanager

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tusk.dev/tusk/internal/metricsdoc"
)

// MetricsCatalogue is every metric the pooler manager serves besides the
// Go runtime's and the process's: docs/metrics.md is rendered from it.
var MetricsCatalogue = metricsdoc.New("each pooler pod's port 8000, `/metrics` (HTTPS, no client certificate needed)")

var poolerDescs []*prometheus.Desc

func define(kind metricsdoc.Kind, name, help string, labels ...string) *prometheus.Desc {
	d := MetricsCatalogue.Desc(kind, name, help, labels...)
	poolerDescs = append(poolerDescs, d)
	return d
}

var (
	descUp            = define(metricsdoc.Gauge, "tusk_pooler_up", "Whether PgBouncer's admin console answers (1) or not (0).")
	descPaused        = define(metricsdoc.Gauge, "tusk_pooler_paused", "1 while PgBouncer is paused for a switchover.")
	descRestarts      = define(metricsdoc.Counter, "tusk_pooler_pgbouncer_restarts_total", "Unexpected PgBouncer exits the pooler manager restarted it after.")
	descPauses        = define(metricsdoc.Counter, "tusk_pooler_pauses_total", "Pause requests by result: paused, timed_out (running transactions outlasted the request's wait; PgBouncer resumed), abandoned (a resume came before it took hold), failed.", "result")
	descResumes       = define(metricsdoc.Counter, "tusk_pooler_resumes_total", "Pauses ended, by what ended them: request, deadline (the request's resumeAfter passed with no resume), shutdown.", "by")
	descLastPause     = define(metricsdoc.Gauge, "tusk_pooler_last_pause_seconds", "How long the last pause that ended held clients.")
	descLastPauseWait = define(metricsdoc.Gauge, "tusk_pooler_last_pause_wait_seconds", "How long the last pause request waited for running transactions (to take hold or to time out).")
	descClients       = define(metricsdoc.Gauge, "tusk_pooler_clients", "Client connections per pool, by state: active (linked to a server or idle), waiting (for a server connection).", "database", "user", "state")
	descServers       = define(metricsdoc.Gauge, "tusk_pooler_server_connections", "Server connections per pool, by state: active (linked to a client), idle (ready for one).", "database", "user", "state")
	descMaxWait       = define(metricsdoc.Gauge, "tusk_pooler_client_max_wait_seconds", "How long the oldest waiting client of each pool has waited.", "database", "user")
	descTransactions  = define(metricsdoc.Counter, "tusk_pooler_transactions_total", "Transactions PgBouncer pooled per database (SHOW STATS total_xact_count).", "database")
	descQueries       = define(metricsdoc.Counter, "tusk_pooler_queries_total", "Queries PgBouncer pooled per database (SHOW STATS total_query_count).", "database")
	descWaitTime      = define(metricsdoc.Counter, "tusk_pooler_client_wait_seconds_total", "Time clients waited for a server connection per database (SHOW STATS total_wait_time).", "database")

	// pauseDurations is registered with the registry: a histogram of how
	// long pauses held clients.
	pauseDurations = MetricsCatalogue.HistogramVec("tusk_pooler_pause_duration_seconds",
		"How long each pause held clients, from taking hold to its end.",
		[]float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60})
)

// metricsMaxAge is how old PgBouncer's figures may be when a scrape gets
// them: a flood of scrapes costs one admin session per interval.
const metricsMaxAge = 2 * time.Second

type metrics struct {
	m            *Manager
	certificates certificateFiles
	registry     *prometheus.Registry
	durations    prometheus.Observer
	restarts     atomic.Int64

	mu            sync.Mutex
	pauses        map[string]float64
	resumes       map[string]float64
	lastPause     float64
	lastPauseWait float64

	scrape   sync.Mutex
	sampled  time.Time
	samples  []prometheus.Metric
	sampleUp float64
}

func newMetrics(m *Manager) *metrics {
	reg := prometheus.NewRegistry()
	mt := &metrics{m: m, registry: reg, durations: pauseDurations.WithLabelValues(),
		certificates: certificateFiles{server: m.opts.TLSCert, auth: m.opts.AuthCert},
		pauses:       map[string]float64{}, resumes: map[string]float64{}}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), mt, pauseDurations)
	return mt
}

func (mt *metrics) handler() http.Handler {
	return promhttp.HandlerFor(mt.registry, promhttp.HandlerOpts{})
}

func (mt *metrics) pauseEnded(result string, waited time.Duration) {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	mt.pauses[result]++
	mt.lastPauseWait = waited.Seconds()
}

func (mt *metrics) resumed(by string, lasted time.Duration) {
	mt.mu.Lock()
	mt.resumes[by]++
	mt.lastPause = lasted.Seconds()
	mt.mu.Unlock()
	mt.durations.Observe(lasted.Seconds())
}

func (mt *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range poolerDescs {
		ch <- d
	}
}

func (mt *metrics) Collect(ch chan<- prometheus.Metric) {
	paused, _ := mt.m.pause.state()
	ch <- gauge(descPaused, boolValue(paused))
	ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(mt.restarts.Load()))
	mt.mu.Lock()
	for result, n := range mt.pauses {
		ch <- prometheus.MustNewConstMetric(descPauses, prometheus.CounterValue, n, result)
	}
	for by, n := range mt.resumes {
		ch <- prometheus.MustNewConstMetric(descResumes, prometheus.CounterValue, n, by)
	}
	ch <- gauge(descLastPause, mt.lastPause)
	ch <- gauge(descLastPauseWait, mt.lastPauseWait)
	mt.mu.Unlock()
	for _, s := range mt.certificates.samples() {
		ch <- s
	}
	up, samples := mt.pgbouncerSamples()
	ch <- gauge(descUp, up)
	for _, s := range samples {
		ch <- s
	}
}

// pgbouncerSamples are PgBouncer's figures, asked at most once per
// metricsMaxAge.
func (mt *metrics) pgbouncerSamples() (float64, []prometheus.Metric) {
	mt.scrape.Lock()
	defer mt.scrape.Unlock()
	if time.Since(mt.sampled) < metricsMaxAge {
		return mt.sampleUp, mt.samples
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	samples, err := mt.sample(ctx)
	mt.sampled, mt.samples, mt.sampleUp = time.Now(), samples, boolValue(err == nil)
	return mt.sampleUp, mt.samples
}

func (mt *metrics) sample(ctx context.Context) ([]prometheus.Metric, error) {
	conn, err := mt.m.admin.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	pools, err := run(ctx, conn, "SHOW POOLS")
	if err != nil {
		return nil, err
	}
	stats, err := run(ctx, conn, "SHOW STATS")
	if err != nil {
		return nil, err
	}
	return append(poolSamples(pools), statsSamples(stats)...), nil
}

func poolSamples(pools rows) []prometheus.Metric {
	var out []prometheus.Metric
	for _, p := range pools {
		db, user := p["database"], p["user"]
		if db == "pgbouncer" {
			continue
		}
		maxWait := float64(number(p["maxwait"])) + float64(number(p["maxwait_us"]))/1e6
		out = append(out,
			gauge(descClients, float64(number(p["cl_active"])), db, user, "active"),
			gauge(descClients, float64(number(p["cl_waiting"])), db, user, "waiting"),
			gauge(descServers, float64(number(p["sv_active"])), db, user, "active"),
			gauge(descServers, float64(number(p["sv_idle"])), db, user, "idle"),
			gauge(descMaxWait, maxWait, db, user))
	}
	return out
}

func statsSamples(stats rows) []prometheus.Metric {
	var out []prometheus.Metric
	for _, s := range stats {
		db := s["database"]
		if db == "pgbouncer" {
			continue
		}
		waitUs, _ := strconv.ParseFloat(s["total_wait_time"], 64)
		out = append(out,
			counter(descTransactions, float64(number(s["total_xact_count"])), db),
			counter(descQueries, float64(number(s["total_query_count"])), db),
			counter(descWaitTime, waitUs/1e6, db))
	}
	return out
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
