package instance

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/metricsdoc"
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

// MetricsCatalogue is every metric the instance manager serves besides
// the Go runtime's (go_*) and the process's (process_*): docs/metrics.md is
// rendered from it.
var MetricsCatalogue = metricsdoc.New("each instance's port 8000, `/metrics` (HTTPS when the cluster has TLS, as the instance API)")

// instanceDescs are the descriptors of MetricsCatalogue, for Describe.
var instanceDescs []*prometheus.Desc

func define(kind metricsdoc.Kind, name, help string, labels ...string) *prometheus.Desc {
	d := MetricsCatalogue.Desc(kind, name, help, labels...)
	instanceDescs = append(instanceDescs, d)
	return d
}

var (
	descUp          = define(metricsdoc.Gauge, "tusk_pg_up", "Whether PostgreSQL accepts connections (1) or not (0).")
	descRestarts    = define(metricsdoc.Counter, "tusk_instance_postgres_restarts_total", "Unexpected postgres exits the instance manager recovered from.")
	descFenced      = define(metricsdoc.Gauge, "tusk_instance_fenced", "1 while postgres is kept stopped: by=\"lease\" when a primary could not renew its Lease, by=\"hand\" when fenced on request (kubectl tusk fence).", "by")
	descRenewals    = define(metricsdoc.Counter, "tusk_instance_lease_renewals_total", "Renewals of the primary Lease by this instance, by result (succeeded, failed).", "result")
	descVolumeSize  = define(metricsdoc.Gauge, "tusk_instance_volume_size_bytes", "Size of the file system holding the volume (data: the data directory and pg_wal).", "volume")
	descVolumeFree  = define(metricsdoc.Gauge, "tusk_instance_volume_available_bytes", "Space left to postgres on the file system holding the volume.", "volume")
	descDataDir     = define(metricsdoc.Gauge, "tusk_pg_data_directory_bytes", "Size of the data directory, pg_wal included (measured at most every 30 s).")
	descRole        = define(metricsdoc.Gauge, "tusk_pg_role", "The instance's role: 1 for the role it has.", "role")
	descTimeline    = define(metricsdoc.Gauge, "tusk_pg_timeline", "The current PostgreSQL timeline.")
	descLagBytes    = define(metricsdoc.Gauge, "tusk_pg_replication_lag_bytes", "On a replica: WAL received but not yet replayed, in bytes.")
	descLagSeconds  = define(metricsdoc.Gauge, "tusk_pg_replication_lag_seconds", "On a replica: age of the last replayed transaction while replay is behind.")
	descReplicaLag  = define(metricsdoc.Gauge, "tusk_pg_replica_lag_bytes", "On a primary: how far each connected standby's replay is behind, in bytes.", "replica", "sync_state")
	descReplicaTime = define(metricsdoc.Gauge, "tusk_pg_replica_lag_seconds", "On a primary: how long each connected standby took to replay recent WAL (pg_stat_replication.replay_lag; 0 when idle).", "replica", "sync_state")
	descConnections = define(metricsdoc.Gauge, "tusk_pg_connections", "Client backends by state.", "state")
	descMaxConns    = define(metricsdoc.Gauge, "tusk_pg_max_connections", "The max_connections setting, for tusk_pg_connections to be compared with.")
	descXIDAge      = define(metricsdoc.Gauge, "tusk_pg_xid_age", "Age of the oldest unfrozen transaction ID of any database (wraparound is at 2^31).")
	descDBSize      = define(metricsdoc.Gauge, "tusk_pg_database_size_bytes", "Size of each database.", "database")
	descDeadlocks   = define(metricsdoc.Counter, "tusk_pg_deadlocks_total", "Deadlocks detected in any database since the statistics were reset.")
	descCheckpoints = define(metricsdoc.Counter, "tusk_pg_checkpoints_total", "Checkpoints performed, by kind (timed: checkpoint_timeout; requested: WAL volume, CHECKPOINT, shutdown).", "kind")
	descWALBytes    = define(metricsdoc.Counter, "tusk_pg_wal_written_bytes_total", "WAL written since the cluster was created (primary), from the current LSN.")
	descWALDir      = define(metricsdoc.Gauge, "tusk_pg_wal_directory_bytes", "Size of the WAL segments in pg_wal.")
	descArchived    = define(metricsdoc.Counter, "tusk_pg_wal_archived_total", "WAL files archived successfully.")
	descArchiveFail = define(metricsdoc.Counter, "tusk_pg_wal_archive_failed_total", "Failed attempts to archive WAL files.")
	descArchiveAge  = define(metricsdoc.Gauge, "tusk_pg_wal_last_archived_age_seconds", "Time since the last WAL file was archived.")
	descArchivedAt  = define(metricsdoc.Gauge, "tusk_pg_wal_last_archived_timestamp_seconds", "When the last WAL file was archived (Unix time); absent before the first.")
	descFailedAt    = define(metricsdoc.Gauge, "tusk_pg_wal_last_archive_failure_timestamp_seconds", "When the last attempt to archive a WAL file failed (Unix time); absent before the first failure.")
	descArchiving   = define(metricsdoc.Gauge, "tusk_pg_wal_archive_failing", "On a primary that archives WAL: 1 while the last attempt failed (a failure newer than the last success), else 0.")
	descAhead       = define(metricsdoc.Counter, "tusk_instance_wal_archived_ahead_total", "WAL segments the instance manager archived before PostgreSQL's archive_command asked for them.")
	descAheadFailed = define(metricsdoc.Counter, "tusk_instance_wal_archive_ahead_failed_total", "Failed attempts of the instance manager to archive a WAL segment ahead (archive_command then archives it itself).")
)

// Describe implements prometheus.Collector.
func (mt *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range instanceDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (mt *metrics) Collect(ch chan<- prometheus.Metric) {
	st := mt.m.snapshot()
	ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(st.restarts))
	ch <- gauge(descFenced, boolFloat(st.life.LeaseFenced()), "lease")
	ch <- gauge(descFenced, boolFloat(st.life.FencedByHand()), "hand")
	if k := mt.m.lease; k != nil {
		ch <- prometheus.MustNewConstMetric(descRenewals, prometheus.CounterValue, float64(k.renewed.Load()), "succeeded")
		ch <- prometheus.MustNewConstMetric(descRenewals, prometheus.CounterValue, float64(k.renewFailed.Load()), "failed")
	}
	if w := mt.m.walWatcher; w != nil {
		ch <- prometheus.MustNewConstMetric(descAhead, prometheus.CounterValue, float64(w.archived.Load()))
		ch <- prometheus.MustNewConstMetric(descAheadFailed, prometheus.CounterValue, float64(w.failed.Load()))
	}
	mt.collectVolume(ch)
	up := 0.0
	if err := mt.collectPostgres(context.Background(), ch); err == nil {
		up = 1
	} else {
		mt.m.log.V(1).Info("Collecting PostgreSQL metrics", "error", err.Error())
	}
	ch <- gauge(descUp, up)
}

// collectVolume reports the data volume's file system, which the kubelet
// sees too but under names that do not say which instance it is.
func (mt *metrics) collectVolume(ch chan<- prometheus.Metric) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(mt.m.opts.DataDir, &fs); err == nil {
		block := float64(fs.Bsize)
		ch <- gauge(descVolumeSize, float64(fs.Blocks)*block, "data")
		ch <- gauge(descVolumeFree, float64(fs.Bavail)*block, "data")
	}
	ch <- gauge(descDataDir, float64(mt.m.dataDirSize()))
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
		ch <- gauge(descReplicaTime, r.ReplayLagSeconds, r.Name, r.SyncState)
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
			collectConnections, collectDatabases, collectWAL, collectCheckpoints(mt.m.opts.MajorVersion),
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
	if _, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		*out = append(*out, gauge(descConnections, float64(n), state))
		return nil
	}); err != nil {
		return err
	}
	var limit int64
	if err := conn.QueryRow(ctx, `SELECT current_setting('max_connections')::bigint`).Scan(&limit); err != nil {
		return err
	}
	*out = append(*out, gauge(descMaxConns, float64(limit)))
	return nil
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
	if err != nil {
		return err
	}
	var deadlocks int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(deadlocks), 0)::bigint FROM pg_stat_database`).Scan(&deadlocks); err != nil {
		return err
	}
	*out = append(*out, prometheus.MustNewConstMetric(descDeadlocks, prometheus.CounterValue, float64(deadlocks)))
	return nil
}

// collectCheckpoints reads the checkpoint counts, which PostgreSQL 17 moved
// from pg_stat_bgwriter to pg_stat_checkpointer.
func collectCheckpoints(major int) func(context.Context, *pgx.Conn, *[]prometheus.Metric) error {
	query := `SELECT checkpoints_timed, checkpoints_req FROM pg_stat_bgwriter`
	if major >= 17 {
		query = `SELECT num_timed, num_requested FROM pg_stat_checkpointer`
	}
	return func(ctx context.Context, conn *pgx.Conn, out *[]prometheus.Metric) error {
		var timed, requested int64
		if err := conn.QueryRow(ctx, query).Scan(&timed, &requested); err != nil {
			return err
		}
		*out = append(*out,
			prometheus.MustNewConstMetric(descCheckpoints, prometheus.CounterValue, float64(timed), "timed"),
			prometheus.MustNewConstMetric(descCheckpoints, prometheus.CounterValue, float64(requested), "requested"))
		return nil
	}
}

func collectWAL(ctx context.Context, conn *pgx.Conn, out *[]prometheus.Metric) error {
	var written, lastAge, archivedAt, failedAt *float64
	var archived, failed, walDir int64
	err := conn.QueryRow(ctx, `SELECT CASE WHEN pg_is_in_recovery() THEN NULL
		ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8 END,
		archived_count, failed_count, extract(epoch FROM now() - last_archived_time)::float8,
		extract(epoch FROM last_archived_time)::float8, extract(epoch FROM last_failed_time)::float8,
		(SELECT coalesce(sum(size), 0) FROM pg_ls_waldir())::bigint
		FROM pg_stat_archiver`).Scan(&written, &archived, &failed, &lastAge, &archivedAt, &failedAt, &walDir)
	if err != nil {
		return err
	}
	if written != nil {
		*out = append(*out, prometheus.MustNewConstMetric(descWALBytes, prometheus.CounterValue, *written))
	}
	*out = append(*out,
		prometheus.MustNewConstMetric(descArchived, prometheus.CounterValue, float64(archived)),
		prometheus.MustNewConstMetric(descArchiveFail, prometheus.CounterValue, float64(failed)),
		gauge(descWALDir, float64(walDir)))
	for d, v := range map[*prometheus.Desc]*float64{descArchiveAge: lastAge, descArchivedAt: archivedAt, descFailedAt: failedAt} {
		if v != nil {
			*out = append(*out, gauge(d, *v))
		}
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
