// Package probe measures a cluster the way its users feel it: every few
// seconds it opens a new connection through the -rw Service and writes a
// row, and one through the -ro Service and reads it, over TLS that verifies
// the server, as the low-privilege role tusk_probe (a client certificate,
// no password). It exports what it saw as Prometheus metrics, from which
// the shipped rules compute an availability SLI and alert on the burn of
// its error budget (docs/monitoring.md).
package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/metricsdoc"
)

// The targets: what the probe does through each Service.
const (
	TargetWrite = "rw"
	TargetRead  = "ro"
)

// Results of an attempt, the values of the result label.
const (
	ResultSuccess = "success"
	ResultFailure = "failure"
)

// MetricsCatalogue is every metric the probe serves.
var MetricsCatalogue = metricsdoc.New("each probe pod's port 8000, `/metrics` (HTTP), when `spec.monitoring.probe` is set")

var (
	requests = MetricsCatalogue.CounterVec("tusk_probe_requests_total",
		"Probe attempts by target (rw: a write through the -rw Service; ro: a read through -ro) and result: "+
			"success, or failure (no connection, a refused login, an error, or no answer within the timeout).",
		"target", "result")
	durations = MetricsCatalogue.HistogramVec("tusk_probe_request_duration_seconds",
		"How long successful probe attempts took, connection and TLS handshake included, by target.",
		[]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}, "target")
	objective = MetricsCatalogue.GaugeVec("tusk_probe_objective_ratio",
		"The cluster's availability objective (spec.monitoring.probe.objective as a ratio): the share of probe attempts "+
			"that should succeed. The burn-rate alerts compare failures with 1 minus it.")
)

// Target is one Service the probe reaches and what it does there.
type Target struct {
	// Name is TargetWrite or TargetRead.
	Name string
	// Host is the Service's DNS name, which the server certificate names,
	// and Port PostgreSQL's port there.
	Host string
	Port int
}

// Options configure a probe.
type Options struct {
	Targets []Target
	// Database is the database holding the probe's table.
	Database string
	// CertDir holds tls.crt and tls.key (the client certificate) and
	// ca.crt (the CA the servers' certificates must chain to).
	CertDir string
	// Interval is the time between two attempts on a target; each attempt
	// must end within Timeout.
	Interval, Timeout time.Duration
	// Objective is the availability objective, a ratio below 1.
	Objective float64
	Log       logr.Logger
}

// Validate says what is wrong with o, in the terms of the command's flags.
func (o Options) Validate() error {
	var errs []error
	if len(o.Targets) == 0 {
		errs = append(errs, errors.New("no target: give --rw-host, --ro-host or both"))
	}
	if o.Interval <= 0 || o.Timeout <= 0 || o.Timeout > o.Interval {
		errs = append(errs, fmt.Errorf("the timeout (%s) must be positive and at most the interval (%s)", o.Timeout, o.Interval))
	}
	if o.Objective <= 0 || o.Objective >= 1 {
		errs = append(errs, fmt.Errorf("the objective %v is not a ratio between 0 and 1", o.Objective))
	}
	if o.CertDir == "" {
		errs = append(errs, errors.New("no certificate directory"))
	}
	return errors.Join(errs...)
}

// Registry returns a registry with the probe's metrics and the Go
// runtime's, the result labels of every target set to zero so that the
// first failure is a change Prometheus sees.
func Registry(o Options) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(requests, durations, objective, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, t := range o.Targets {
		requests.WithLabelValues(t.Name, ResultSuccess)
		requests.WithLabelValues(t.Name, ResultFailure)
	}
	objective.WithLabelValues().Set(o.Objective)
	return reg
}

// Run probes every target until ctx ends, each on its own clock so that a
// target that hangs does not hold the other's attempts back.
func Run(ctx context.Context, o Options) {
	done := make(chan struct{}, len(o.Targets))
	for _, t := range o.Targets {
		go func() {
			defer func() { done <- struct{}{} }()
			probeEvery(ctx, o, t)
		}()
	}
	for range o.Targets {
		<-done
	}
}

func probeEvery(ctx context.Context, o Options, t Target) {
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	failing := false
	for {
		err := Attempt(ctx, o, t)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			o.Log.Error(err, "Probe attempt failed", "target", t.Name, "host", t.Host)
		case failing:
			o.Log.Info("Probe attempts succeed again", "target", t.Name, "host", t.Host)
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Attempt makes one attempt on t and counts it: a new connection, as an
// ordinary client makes, and the target's statement, within o.Timeout.
// An attempt cut short because ctx ended (the probe stopping) is no
// outcome of the cluster's, and is not counted.
func Attempt(ctx context.Context, o Options, t Target) error {
	bounded, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	start := time.Now()
	err := attempt(bounded, o, t)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil && bounded.Err() != nil && !errors.Is(err, context.DeadlineExceeded):
		err = fmt.Errorf("no answer within %s: %w", o.Timeout, err)
	}
	if err != nil {
		requests.WithLabelValues(t.Name, ResultFailure).Inc()
		return err
	}
	durations.WithLabelValues(t.Name).Observe(time.Since(start).Seconds())
	requests.WithLabelValues(t.Name, ResultSuccess).Inc()
	return nil
}

// Statements each target runs: the write goes through the primary and
// waits for its synchronous standbys as an application's commit does; the
// read needs a replica that answers.
var statements = map[string]string{
	TargetWrite: "INSERT INTO " + instanceapi.ProbeTable + " (id, written_at) VALUES (1, now()) ON CONFLICT (id) DO UPDATE SET written_at = excluded.written_at",
	TargetRead:  "SELECT written_at FROM " + instanceapi.ProbeTable,
}

func attempt(ctx context.Context, o Options, t Target) error {
	stmt, ok := statements[t.Name]
	if !ok {
		return fmt.Errorf("unknown target %q", t.Name)
	}
	cfg, err := pgx.ParseConfig(ConnString(o, t))
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_, err = conn.Exec(ctx, stmt)
	return err
}

// ConnString is the libpq connection string of an attempt on t: verified
// TLS and the client certificate, nothing else secret.
func ConnString(o Options, t Target) string {
	kv := []string{
		"host=" + t.Host,
		fmt.Sprintf("port=%d", t.Port),
		"dbname=" + o.Database,
		"user=" + instanceapi.ProbeRole,
		"application_name=tusk-probe",
		"sslmode=verify-full",
		"sslrootcert=" + o.CertDir + "/ca.crt",
		"sslcert=" + o.CertDir + "/tls.crt",
		"sslkey=" + o.CertDir + "/tls.key",
	}
	return strings.Join(kv, " ")
}

// Serve serves the registry's metrics at /metrics and a liveness answer at
// /healthz on addr until ctx ends.
func Serve(ctx context.Context, addr string, reg *prometheus.Registry) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
