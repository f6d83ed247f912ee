package instance

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tusk.dev/tusk/internal/instanceapi"
)

// metrics exports PostgreSQL's state and the manager's own to Prometheus.
// PostgreSQL is queried at scrape time on the monitoring session
// (metricsSession), so the queries hold no superuser rights.
type metrics struct {
	m        *Manager
	registry *prometheus.Registry

	// PostgreSQL's figures are asked at most once per sqlMetricsMaxAge,
	// by one scrape at a time; the others get the same figures. A flood
	// of scrapes costs no more sessions than one.
	mu        sync.Mutex
	sqlAt     time.Time
	sqlValues []prometheus.Metric
	sqlErr    error
}

// sqlMetricsMaxAge is how old the figures PostgreSQL gave may be when a
// scrape gets them (Prometheus scrapes every 15 s or more).
const sqlMetricsMaxAge = 5 * time.Second

func newMetrics(m *Manager) *metrics {
	reg := prometheus.NewRegistry()
	mt := &metrics{m: m, registry: reg}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), mt)
	return mt
}

func (mt *metrics) handler() http.Handler {
	return promhttp.HandlerFor(mt.registry, promhttp.HandlerOpts{})
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("tusk_"+name, help, labels, nil)
}

var (
	descUp          = desc("pg_up", "Whether PostgreSQL accepts connections (1) or not (0).")
	descRestarts    = desc("instance_postgres_restarts_total", "Unexpected postgres exits the instance manager recovered from.")
	descRole        = desc("pg_role", "The instance's role: 1 for the role it has.", "role")
	descTimeline    = desc("pg_timeline", "The current PostgreSQL timeline.")
	descLagBytes    = desc("pg_replication_lag_bytes", "On a replica: WAL received but not yet replayed, in bytes.")
	descLagSeconds  = desc("pg_replication_lag_seconds", "On a replica: age of the last replayed transaction while replay is behind.")
	descReplicaLag  = desc("pg_replica_lag_bytes", "On a primary: how far each connected standby's replay is behind.", "replica", "sync_state")
	descConnections = desc("pg_connections", "Client backends by state.", "state")
	descXIDAge      = desc("pg_xid_age", "Age of the oldest unfrozen transaction ID of any database (wraparound is at 2^31).")
	descDBSize      = desc("pg_database_size_bytes", "Size of each database.", "database")
	descWALBytes    = desc("pg_wal_written_bytes_total", "WAL written since the cluster was created (primary), from the current LSN.")
	descArchived    = desc("pg_wal_archived_total", "WAL files archived successfully.")
	descArchiveFail = desc("pg_wal_archive_failed_total", "Failed attempts to archive WAL files.")
	descArchiveAge  = desc("pg_wal_last_archived_age_seconds", "Time since the last WAL file was archived.")
	descArchiving   = desc("pg_wal_archive_failing", "On a primary that archives WAL: 1 while the last attempt failed (a failure newer than the last success), else 0.")
	descAhead       = desc("instance_wal_archived_ahead_total", "WAL segments the instance manager archived before PostgreSQL's archive_command asked for them.")
	descAheadFailed = desc("instance_wal_archive_ahead_failed_total", "Failed attempts of the instance manager to archive a WAL segment ahead (archive_command then archives it itself).")
)

// Describe implements prometheus.Collector.
func (mt *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descRestarts, descRole, descTimeline, descLagBytes, descLagSeconds,
		descReplicaLag, descConnections, descXIDAge, descDBSize, descWALBytes, descArchived, descArchiveFail, descArchiveAge, descArchiving, descAhead, descAheadFailed} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (mt *metrics) Collect(ch chan<- prometheus.Metric) {
	st := mt.m.snapshot()
	ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(st.restarts))
	if w := mt.m.walWatcher; w != nil {
		ch <- prometheus.MustNewConstMetric(descAhead, prometheus.CounterValue, float64(w.archived.Load()))
		ch <- prometheus.MustNewConstMetric(descAheadFailed, prometheus.CounterValue, float64(w.failed.Load()))
	}
	up := 0.0
	if err := mt.collectPostgres(context.Background(), ch); err == nil {
		up = 1
	} else {
		mt.m.log.V(1).Info("Collecting PostgreSQL metrics", "error", err.Error())
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up)
}

func (mt *metrics) collectPostgres(ctx context.Context, ch chan<- prometheus.Metric) error {
	st := mt.m.ObservedStatus(ctx)
	if st.Role == instanceapi.RoleUnknown {
		return errors.New(cmp.Or(st.LastError, "postgres does not run"))
	}
	for _, role := range []string{"primary", "replica"} {
		ch <- gauge(descRole, boolFloat(string(st.Role) == role), role)
	}
	ch <- gauge(descTimeline, float64(st.Timeline))
	ch <- gauge(descLagBytes, float64(st.ReplayLagBytes))
	ch <- gauge(descLagSeconds, st.ReplayLagSeconds)
	for _, r := range st.Replicas {
		ch <- gauge(descReplicaLag, float64(r.LagBytes), r.Name, r.SyncState)
	}
	if st.Archive != nil {
		ch <- gauge(descArchiving, boolFloat(st.Archive.Failing))
	}
	values, err := mt.sqlMetrics(ctx)
	for _, v := range values {
		ch <- v
	}
	return err
}

// sqlMetrics are the figures PostgreSQL gives, from the last time it was
// asked when that was less than sqlMetricsMaxAge ago.
func (mt *metrics) sqlMetrics(ctx context.Context) ([]prometheus.Metric, error) {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	if !mt.sqlAt.IsZero() && time.Since(mt.sqlAt) < sqlMetricsMaxAge {
		return mt.sqlValues, mt.sqlErr
	}
	// Not the scraper's cancellation: one that hangs up must not leave a
	// failed answer for the others.
	mt.sqlValues, mt.sqlErr = mt.askPostgres(context.WithoutCancel(ctx))
	mt.sqlAt = time.Now()
	return mt.sqlValues, mt.sqlErr
}

// askPostgres queries PostgreSQL's figures on the metrics session.
func (mt *metrics) askPostgres(ctx context.Context) ([]prometheus.Metric, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var values []prometheus.Metric
	err := mt.m.metricsSession.observe(ctx, mt.m, func(ctx context.Context, conn *pgx.Conn) error {
		values = values[:0] // a retry on a new session starts again
		for _, collect := range []func(context.Context, *pgx.Conn, *[]prometheus.Metric) error{
			collectConnections, collectDatabases, collectWAL,
		} {
			if err := collect(ctx, conn, &values); err != nil {
				return err
			}
		}
		return nil
	})
	return values, err
}

func collectConnections(ctx context.Context, conn *pgx.Conn, out *[]prometheus.Metric) error {
	rows, err := conn.Query(ctx, `SELECT coalesce(state, 'unknown'), count(*) FROM pg_stat_activity
		WHERE backend_type = 'client backend' GROUP BY 1`)
	if err != nil {
		return err
	}
	var state string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		*out = append(*out, gauge(descConnections, float64(n), state))
		return nil
	})
	return err
}

func collectDatabases(ctx context.Context, conn *pgx.Conn, out *[]prometheus.Metric) error {
	rows, err := conn.Query(ctx, `SELECT datname, pg_database_size(oid), age(datfrozenxid) FROM pg_database WHERE datallowconn`)
	if err != nil {
		return err
	}
	var name string
	var size, age, maxAge int64
	_, err = pgx.ForEachRow(rows, []any{&name, &size, &age}, func() error {
		*out = append(*out, gauge(descDBSize, float64(size), name))
		maxAge = max(maxAge, age)
		return nil
	})
	*out = append(*out, gauge(descXIDAge, float64(maxAge)))
	return err
}

func collectWAL(ctx context.Context, conn *pgx.Conn, out *[]prometheus.Metric) error {
	var written *float64
	var archived, failed int64
	var lastAge *float64
	err := conn.QueryRow(ctx, `SELECT CASE WHEN pg_is_in_recovery() THEN NULL
		ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8 END,
		archived_count, failed_count, extract(epoch FROM now() - last_archived_time)::float8
		FROM pg_stat_archiver`).Scan(&written, &archived, &failed, &lastAge)
	if err != nil {
		return err
	}
	if written != nil {
		*out = append(*out, prometheus.MustNewConstMetric(descWALBytes, prometheus.CounterValue, *written))
	}
	*out = append(*out, prometheus.MustNewConstMetric(descArchived, prometheus.CounterValue, float64(archived)))
	*out = append(*out, prometheus.MustNewConstMetric(descArchiveFail, prometheus.CounterValue, float64(failed)))
	if lastAge != nil {
		*out = append(*out, gauge(descArchiveAge, *lastAge))
	}
	return nil
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
