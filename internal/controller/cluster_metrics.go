package controller

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/metricsdoc"
	"tusk.dev/tusk/internal/pki"
	"tusk.dev/tusk/internal/postgres"
)

// MetricsCatalogue is every metric the operator serves besides
// controller-runtime's (controller_runtime_*, workqueue_*, rest_client_*)
// and the Go runtime's: docs/metrics.md is rendered from it.
var MetricsCatalogue = metricsdoc.New("the operator's metrics port (`--metrics-bind-address`, `:8443`, HTTPS with `--metrics-secure`), `/metrics`")

// clusterDescs are the descriptors of the metrics clusterCollector
// serves, for Describe.
var clusterDescs []*prometheus.Desc

// defineCluster defines a gauge about a cluster: every cluster metric is
// one, read from the cluster's objects.
func defineCluster(name, help string, labels ...string) *prometheus.Desc {
	d := MetricsCatalogue.Desc(metricsdoc.Gauge, name, help, append([]string{"namespace", "cluster"}, labels...)...)
	clusterDescs = append(clusterDescs, d)
	return d
}

// The metrics of each cluster, read from its status (and its backups'
// and certificates') when Prometheus scrapes: they tell what the status
// tells, and a deleted cluster leaves no series behind.
var (
	descInstances      = defineCluster("tusk_cluster_instances", "Instances the cluster's spec asks for.")
	descInstancesReady = defineCluster("tusk_cluster_instances_ready", "Instances that are ready (status.readyInstances).")
	descPrimary        = defineCluster("tusk_cluster_primary_info", "1 for the instance that is the cluster's primary (status.currentPrimary).", "instance")
	descPhase          = defineCluster("tusk_cluster_phase", "1 for the cluster's phase (status.phase), 0 for the others.", "phase")
	descReady          = defineCluster("tusk_cluster_ready", "1 while the cluster's Ready condition is True, else 0.")
	descInstanceLag    = defineCluster("tusk_cluster_instance_lag_bytes", "How far each replica's replay is behind the primary, as the operator last saw it.", "instance")
	descQuorumRequired = defineCluster("tusk_cluster_synchronous_standbys_required", "How many standbys confirm each commit (synchronous replication); absent without it.")
	descQuorumReady    = defineCluster("tusk_cluster_synchronous_standbys_ready", "Standbys named in the synchronous quorum that are ready; below tusk_cluster_synchronous_standbys_required, commits wait.")
	descArchiveFailing = defineCluster("tusk_cluster_archive_failing", "1 while WAL archiving fails (status.archive.failing), else 0; absent without archiving.")
	descArchivedAt     = defineCluster("tusk_cluster_archive_last_archived_timestamp_seconds", "When the last WAL file was archived (Unix time).")
	descArchiveLagSegs = defineCluster("tusk_cluster_archive_lag_segments", "Completed WAL segments of the primary not yet archived.")
	descArchiveLagSecs = defineCluster("tusk_cluster_archive_lag_seconds", "While completed segments wait to be archived: time since the last one was archived; else 0.")
	descBackupAt       = defineCluster("tusk_backup_last_completed_timestamp_seconds", "When the cluster's last completed base backup completed (Unix time).")
	descBackupSize     = defineCluster("tusk_backup_last_completed_size_bytes", "Size of the cluster's last completed base backup.")
	descRecoverable    = defineCluster("tusk_backup_first_recoverability_point_timestamp_seconds", "The earliest time the cluster can be recovered to from its object store (Unix time), as retention last saw it.")
	descScheduledAt    = defineCluster("tusk_backup_last_schedule_timestamp_seconds", "The scheduled time of the last backup the cluster's schedule created (Unix time).")
	descCertExpiry     = defineCluster("tusk_cluster_certificate_expiry_timestamp_seconds", "When each certificate Tusk keeps for the cluster expires (Unix time): the CA, the server's, the replication client's.", "certificate")
	descSQLApplied     = defineCluster("tusk_sql_object_applied", "1 while a declarative SQL object (PostgresRole, PostgresDatabase, PostgresPublication, PostgresSubscription) is applied: its Applied condition is True; else 0.", "kind", "object")
)

// clusterPhases are the values tusk_cluster_phase reports, one series each.
var clusterPhases = []tuskv1alpha1.ClusterPhase{
	tuskv1alpha1.ClusterPhasePending, tuskv1alpha1.ClusterPhaseCreating, tuskv1alpha1.ClusterPhaseHealthy,
	tuskv1alpha1.ClusterPhaseDegraded, tuskv1alpha1.ClusterPhaseScaling, tuskv1alpha1.ClusterPhaseUpdating,
	tuskv1alpha1.ClusterPhaseSwitchingOver, tuskv1alpha1.ClusterPhaseFailingOver, tuskv1alpha1.ClusterPhaseFailed,
}

// ClusterCollector serves every cluster's metrics from the operator's
// cache at scrape time.
type ClusterCollector struct {
	Reader client.Reader
}

// Describe implements prometheus.Collector.
func (c ClusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range clusterDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c ClusterCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var clusters tuskv1alpha1.PostgresClusterList
	var backups tuskv1alpha1.PostgresBackupList
	var secrets corev1.SecretList
	for _, list := range []client.ObjectList{&clusters, &backups} {
		if err := c.Reader.List(ctx, list); err != nil {
			log.FromContext(ctx).Error(err, "Listing for the cluster metrics")
			return
		}
	}
	if err := c.Reader.List(ctx, &secrets, client.HasLabels{LabelCluster}); err != nil {
		log.FromContext(ctx).Error(err, "Listing Secrets for the certificate metrics")
	}
	last := lastCompletedBackups(backups.Items)
	byName := make(map[client.ObjectKey]*corev1.Secret, len(secrets.Items))
	for i := range secrets.Items {
		byName[client.ObjectKeyFromObject(&secrets.Items[i])] = &secrets.Items[i]
	}
	now := time.Now()
	for _, m := range c.sqlObjectMetrics(ctx) {
		ch <- m
	}
	for _, m := range c.poolerMetrics(ctx) {
		ch <- m
	}
	for i := range clusters.Items {
		cl := &clusters.Items[i]
		certs := clusterCertificates(cl, byName)
		for _, m := range clusterMetrics(cl, last[client.ObjectKeyFromObject(cl)], certs, now) {
			ch <- m
		}
	}
}

// clusterMetrics are one cluster's metrics: its status, its last
// completed backup (nil for none) and its certificates' expiries.
func clusterMetrics(c *tuskv1alpha1.PostgresCluster, lastBackup *tuskv1alpha1.PostgresBackup, certs map[string]time.Time, now time.Time) []prometheus.Metric {
	st := &c.Status
	ns, name := c.Namespace, c.Name
	out := []prometheus.Metric{
		clusterGauge(descInstances, float64(c.Spec.Instances), ns, name),
		clusterGauge(descInstancesReady, float64(st.ReadyInstances), ns, name),
		clusterGauge(descReady, boolFloat(meta.IsStatusConditionTrue(st.Conditions, tuskv1alpha1.ConditionReady)), ns, name),
	}
	if st.CurrentPrimary != "" {
		out = append(out, clusterGauge(descPrimary, 1, ns, name, st.CurrentPrimary))
	}
	for _, p := range clusterPhases {
		out = append(out, clusterGauge(descPhase, boolFloat(st.Phase == p), ns, name, string(p)))
	}
	for _, in := range st.Instances {
		if in.LagBytes != nil {
			out = append(out, clusterGauge(descInstanceLag, float64(*in.LagBytes), ns, name, in.Name))
		}
	}
	out = append(out, quorumMetrics(c)...)
	out = append(out, archiveMetrics(c, now)...)
	out = append(out, backupMetrics(c, lastBackup)...)
	for cert, at := range certs {
		out = append(out, clusterGauge(descCertExpiry, unixSeconds(at), ns, name, cert))
	}
	return out
}

func quorumMetrics(c *tuskv1alpha1.PostgresCluster) []prometheus.Metric {
	q := c.Status.SynchronousQuorum
	if q == nil {
		return nil
	}
	ready := 0
	for _, in := range c.Status.Instances {
		if in.Ready && slices.Contains(q.Standbys, in.Name) {
			ready++
		}
	}
	return []prometheus.Metric{
		clusterGauge(descQuorumRequired, float64(q.Number), c.Namespace, c.Name),
		clusterGauge(descQuorumReady, float64(ready), c.Namespace, c.Name),
	}
}

// archiveMetrics compare the last archived WAL file with the primary's
// current position: segments completed since are waiting to be archived.
func archiveMetrics(c *tuskv1alpha1.PostgresCluster, now time.Time) []prometheus.Metric {
	a := c.Status.Archive
	if a == nil {
		return nil
	}
	ns, name := c.Namespace, c.Name
	out := []prometheus.Metric{clusterGauge(descArchiveFailing, boolFloat(a.Failing), ns, name)}
	if a.LastArchivedTime != nil {
		out = append(out, clusterGauge(descArchivedAt, unixSeconds(a.LastArchivedTime.Time), ns, name))
	}
	archived, ok := walFileSegment(a.LastArchivedWAL)
	current, ok2 := primaryLSNSegment(c)
	if !ok || !ok2 {
		return out
	}
	// The segment the primary writes is not complete: it is not behind.
	var behind uint64
	if current > archived+1 {
		behind = current - archived - 1
	}
	out = append(out, clusterGauge(descArchiveLagSegs, float64(behind), ns, name))
	lag := 0.0
	if behind > 0 && a.LastArchivedTime != nil {
		lag = max(now.Sub(a.LastArchivedTime.Time).Seconds(), 0)
	}
	return append(out, clusterGauge(descArchiveLagSecs, lag, ns, name))
}

func backupMetrics(c *tuskv1alpha1.PostgresCluster, last *tuskv1alpha1.PostgresBackup) []prometheus.Metric {
	ns, name := c.Namespace, c.Name
	var out []prometheus.Metric
	if last != nil {
		out = append(out,
			clusterGauge(descBackupAt, unixSeconds(last.Status.CompletedAt.Time), ns, name),
			clusterGauge(descBackupSize, float64(last.Status.SizeBytes), ns, name))
	}
	if b := c.Status.Backup; b != nil {
		for d, t := range map[*prometheus.Desc]*metav1.Time{descRecoverable: b.FirstRecoverabilityPoint, descScheduledAt: b.LastScheduleTime} {
			if t != nil {
				out = append(out, clusterGauge(d, unixSeconds(t.Time), ns, name))
			}
		}
	}
	return out
}

// lastCompletedBackups is each cluster's most recently completed backup.
func lastCompletedBackups(backups []tuskv1alpha1.PostgresBackup) map[client.ObjectKey]*tuskv1alpha1.PostgresBackup {
	last := map[client.ObjectKey]*tuskv1alpha1.PostgresBackup{}
	for i := range backups {
		b := &backups[i]
		if b.Status.Phase != tuskv1alpha1.BackupPhaseCompleted || b.Status.CompletedAt == nil {
			continue
		}
		key := client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.Cluster.Name}
		if prev := last[key]; prev == nil || prev.Status.CompletedAt.Before(b.Status.CompletedAt) {
			last[key] = b
		}
	}
	return last
}

// clusterCertificates reads when the certificates Tusk keeps for c expire,
// by the name the metric gives them, from secrets (by namespace and name).
// A certificate that is missing or unreadable has no series.
func clusterCertificates(c *tuskv1alpha1.PostgresCluster, secrets map[client.ObjectKey]*corev1.Secret) map[string]time.Time {
	out := map[string]time.Time{}
	for _, cert := range []struct{ name, secret, key string }{
		{"ca", caSecretName(c), keyCACert},
		{"client-ca", caSecretName(c), keyClientCACert},
		{"server", serverSecretName(c), corev1.TLSCertKey},
		{"replication", replicationSecretName(c), corev1.TLSCertKey},
	} {
		s := secrets[client.ObjectKey{Namespace: c.Namespace, Name: cert.secret}]
		if s == nil {
			continue
		}
		if parsed, err := pki.ParseCertificate(s.Data[cert.key]); err == nil {
			out[cert.name] = parsed.NotAfter
		}
	}
	return out
}

// walFileSegment is the segment number of a WAL file name (a ".partial"
// one's too), for the default segment size (Tusk's initdb does not change
// it). A timeline history file has none.
func walFileSegment(name string) (uint64, bool) {
	seg, err := postgres.ParseWALFileName(strings.TrimSuffix(name, postgres.PartialSuffix), postgres.DefaultWALSegmentSize)
	return seg.Number, err == nil
}

// primaryLSNSegment is the segment the primary writes, from the LSN its
// instance status reports.
func primaryLSNSegment(c *tuskv1alpha1.PostgresCluster) (uint64, bool) {
	for _, in := range c.Status.Instances {
		if in.Name != c.Status.CurrentPrimary || in.LSN == "" {
			continue
		}
		lsn, err := postgres.ParseLSN(in.LSN)
		return uint64(lsn) / postgres.DefaultWALSegmentSize, err == nil
	}
	return 0, false
}

func clusterGauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixMilli()) / 1000 }

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// sqlObjectMetrics are the declarative SQL objects' tusk_sql_object_applied
// series, one per object.
func (c ClusterCollector) sqlObjectMetrics(ctx context.Context) []prometheus.Metric {
	var metrics []prometheus.Metric
	for _, kind := range sqlKinds() {
		list := kind.newList()
		if err := c.Reader.List(ctx, list); err != nil {
			log.FromContext(ctx).Error(err, "Listing for the SQL object metrics", "kind", kind.name)
			continue
		}
		_ = meta.EachListItem(list, func(item runtimeObject) error {
			metrics = append(metrics, sqlObjectMetric(kind, item.(client.Object)))
			return nil
		})
	}
	return metrics
}

func sqlObjectMetric(kind sqlKind, o client.Object) prometheus.Metric {
	applied := meta.IsStatusConditionTrue(kind.status(o).Conditions, tuskv1alpha1.ConditionApplied)
	return clusterGauge(descSQLApplied, boolFloat(applied), o.GetNamespace(), kind.cluster(o), kind.name, o.GetName())
}
