package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/pki"
)

// metricsOf serves fixed metrics, to compare them as Prometheus would
// scrape them.
type metricsOf []prometheus.Metric

func (m metricsOf) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(m, ch) }
func (m metricsOf) Collect(ch chan<- prometheus.Metric) {
	for _, x := range m {
		ch <- x
	}
}

func TestClusterMetrics(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return ptr.To(metav1.NewTime(now.Add(d))) }
	c := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}
	c.Spec.Instances = 3
	c.Status = tuskv1alpha1.PostgresClusterStatus{
		Phase: tuskv1alpha1.ClusterPhaseDegraded, CurrentPrimary: "orders-1", ReadyInstances: 2,
		Conditions: []metav1.Condition{{Type: tuskv1alpha1.ConditionReady, Status: metav1.ConditionFalse}},
		Instances: []tuskv1alpha1.InstanceStatus{
			{Name: "orders-1", Ready: true, LSN: "0/5000060"},
			{Name: "orders-2", Ready: true, LagBytes: ptr.To[int64](4096)},
			{Name: "orders-3", LagBytes: ptr.To[int64](0)},
		},
		SynchronousQuorum: &tuskv1alpha1.QuorumStatus{Number: 2, Standbys: []string{"orders-2", "orders-3"}},
		// Segment 5 is written, 4 and 3 are complete and wait.
		Archive: &tuskv1alpha1.ArchiveStatus{LastArchivedWAL: "000000010000000000000002", LastArchivedTime: at(-90 * time.Second)},
		Backup:  &tuskv1alpha1.BackupStatus{FirstRecoverabilityPoint: at(-48 * time.Hour)},
	}
	backup := &tuskv1alpha1.PostgresBackup{Status: tuskv1alpha1.PostgresBackupStatus{
		Phase: tuskv1alpha1.BackupPhaseCompleted, CompletedAt: at(-time.Hour), SizeBytes: 123456}}
	certs := map[string]time.Time{"server": now.Add(90 * 24 * time.Hour)}

	want := `
# HELP tusk_backup_first_recoverability_point_timestamp_seconds The earliest time the cluster can be recovered to from its object store (Unix time), as retention last saw it.
# TYPE tusk_backup_first_recoverability_point_timestamp_seconds gauge
tusk_backup_first_recoverability_point_timestamp_seconds{cluster="orders",namespace="shop"} 1.7954352e+09
# HELP tusk_backup_last_completed_size_bytes Size of the cluster's last completed base backup.
# TYPE tusk_backup_last_completed_size_bytes gauge
tusk_backup_last_completed_size_bytes{cluster="orders",namespace="shop"} 123456
# HELP tusk_backup_last_completed_timestamp_seconds When the cluster's last completed base backup completed (Unix time).
# TYPE tusk_backup_last_completed_timestamp_seconds gauge
tusk_backup_last_completed_timestamp_seconds{cluster="orders",namespace="shop"} 1.7956044e+09
# HELP tusk_cluster_archive_failing 1 while WAL archiving fails (status.archive.failing), else 0; absent without archiving.
# TYPE tusk_cluster_archive_failing gauge
tusk_cluster_archive_failing{cluster="orders",namespace="shop"} 0
# HELP tusk_cluster_archive_lag_seconds While completed segments wait to be archived: time since the last one was archived; else 0.
# TYPE tusk_cluster_archive_lag_seconds gauge
tusk_cluster_archive_lag_seconds{cluster="orders",namespace="shop"} 90
# HELP tusk_cluster_archive_lag_segments Completed WAL segments of the primary not yet archived.
# TYPE tusk_cluster_archive_lag_segments gauge
tusk_cluster_archive_lag_segments{cluster="orders",namespace="shop"} 2
# HELP tusk_cluster_archive_last_archived_timestamp_seconds When the last WAL file was archived (Unix time).
# TYPE tusk_cluster_archive_last_archived_timestamp_seconds gauge
tusk_cluster_archive_last_archived_timestamp_seconds{cluster="orders",namespace="shop"} 1.79560791e+09
# HELP tusk_cluster_certificate_expiry_timestamp_seconds When each certificate Tusk keeps for the cluster expires (Unix time): the CA, the server's, the replication client's.
# TYPE tusk_cluster_certificate_expiry_timestamp_seconds gauge
tusk_cluster_certificate_expiry_timestamp_seconds{certificate="server",cluster="orders",namespace="shop"} 1.803384e+09
# HELP tusk_cluster_instance_lag_bytes How far each replica's replay is behind the primary, as the operator last saw it.
# TYPE tusk_cluster_instance_lag_bytes gauge
tusk_cluster_instance_lag_bytes{cluster="orders",instance="orders-2",namespace="shop"} 4096
tusk_cluster_instance_lag_bytes{cluster="orders",instance="orders-3",namespace="shop"} 0
# HELP tusk_cluster_instances Instances the cluster's spec asks for.
# TYPE tusk_cluster_instances gauge
tusk_cluster_instances{cluster="orders",namespace="shop"} 3
# HELP tusk_cluster_instances_ready Instances that are ready (status.readyInstances).
# TYPE tusk_cluster_instances_ready gauge
tusk_cluster_instances_ready{cluster="orders",namespace="shop"} 2
# HELP tusk_cluster_phase 1 for the cluster's phase (status.phase), 0 for the others.
# TYPE tusk_cluster_phase gauge
tusk_cluster_phase{cluster="orders",namespace="shop",phase="Creating"} 0
tusk_cluster_phase{cluster="orders",namespace="shop",phase="Degraded"} 1
tusk_cluster_phase{cluster="orders",namespace="shop",phase="Failed"} 0
tusk_cluster_phase{cluster="orders",namespace="shop",phase="FailingOver"} 0
tusk_cluster_phase{cluster="orders",namespace="shop",phase="Healthy"} 0
tusk_cluster_phase{cluster="orders",namespace="shop",phase="Pending"} 0
tusk_cluster_phase{cluster="orders",namespace="shop",phase="Scaling"} 0
tusk_cluster_phase{cluster="orders",namespace="shop",phase="SwitchingOver"} 0
tusk_cluster_phase{cluster="orders",namespace="shop",phase="Updating"} 0
# HELP tusk_cluster_primary_info 1 for the instance that is the cluster's primary (status.currentPrimary).
# TYPE tusk_cluster_primary_info gauge
tusk_cluster_primary_info{cluster="orders",instance="orders-1",namespace="shop"} 1
# HELP tusk_cluster_ready 1 while the cluster's Ready condition is True, else 0.
# TYPE tusk_cluster_ready gauge
tusk_cluster_ready{cluster="orders",namespace="shop"} 0
# HELP tusk_cluster_synchronous_standbys_ready Standbys named in the synchronous quorum that are ready; below tusk_cluster_synchronous_standbys_required, commits wait.
# TYPE tusk_cluster_synchronous_standbys_ready gauge
tusk_cluster_synchronous_standbys_ready{cluster="orders",namespace="shop"} 1
# HELP tusk_cluster_synchronous_standbys_required How many standbys confirm each commit (synchronous replication); absent without it.
# TYPE tusk_cluster_synchronous_standbys_required gauge
tusk_cluster_synchronous_standbys_required{cluster="orders",namespace="shop"} 2
`
	got := metricsOf(clusterMetrics(c, backup, certs, now))
	if err := testutil.CollectAndCompare(got, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// A cluster just created has no primary, archive, backup or certificate
// yet: only what its spec and phase say, and no series for the rest.
func TestClusterMetricsOfANewCluster(t *testing.T) {
	c := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "new"}}
	c.Spec.Instances = 1
	names := map[string]int{}
	for _, m := range clusterMetrics(c, nil, nil, time.Now()) {
		names[descName(m.Desc())]++
	}
	want := map[string]int{"tusk_cluster_instances": 1, "tusk_cluster_instances_ready": 1, "tusk_cluster_ready": 1, "tusk_cluster_phase": len(clusterPhases)}
	if len(names) != len(want) {
		t.Errorf("series of a new cluster: %v, want %v", names, want)
	}
	for n, count := range want {
		if names[n] != count {
			t.Errorf("%d series of %s, want %d", names[n], n, count)
		}
	}
}

func descName(d *prometheus.Desc) string {
	s := d.String()
	_, rest, _ := strings.Cut(s, `fqName: "`)
	name, _, _ := strings.Cut(rest, `"`)
	return name
}

func TestLastCompletedBackups(t *testing.T) {
	now := time.Now()
	backup := func(ns, cluster string, phase tuskv1alpha1.BackupPhase, ago time.Duration) tuskv1alpha1.PostgresBackup {
		b := tuskv1alpha1.PostgresBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster + ago.String()}}
		b.Spec.Cluster.Name = cluster
		b.Status.Phase = phase
		b.Status.CompletedAt = ptr.To(metav1.NewTime(now.Add(-ago)))
		return b
	}
	last := lastCompletedBackups([]tuskv1alpha1.PostgresBackup{
		backup("a", "db", tuskv1alpha1.BackupPhaseCompleted, 3*time.Hour),
		backup("a", "db", tuskv1alpha1.BackupPhaseCompleted, time.Hour),
		backup("a", "db", tuskv1alpha1.BackupPhaseFailed, time.Minute),
		backup("b", "db", tuskv1alpha1.BackupPhaseCompleted, 2*time.Hour), // another namespace's cluster of that name
	})
	if b := last[client.ObjectKey{Namespace: "a", Name: "db"}]; b == nil || b.Name != "db1h0m0s" {
		t.Errorf("last completed backup of a/db: %v, want the one an hour ago (not the failed one)", b)
	}
	if b := last[client.ObjectKey{Namespace: "b", Name: "db"}]; b == nil || b.Name != "db2h0m0s" {
		t.Errorf("last completed backup of b/db: %v", b)
	}
}

func TestClusterCertificates(t *testing.T) {
	ca, err := pki.NewCA("test", 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := pki.ParseCertificate(ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	c := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "db"}}
	secrets := map[client.ObjectKey]*corev1.Secret{}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "db-ca"}, Data: map[string][]byte{"ca.crt": ca.CertPEM}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "db-server"}, Data: map[string][]byte{"tls.crt": []byte("junk")}},  // unreadable: no series
		{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "db-replication"}, Data: map[string][]byte{"tls.crt": ca.CertPEM}}, // another namespace's cluster
	} {
		secrets[client.ObjectKeyFromObject(s)] = s
	}
	got := clusterCertificates(c, secrets)
	if len(got) != 1 || !got["ca"].Equal(caCert.NotAfter) {
		t.Errorf("certificates %v, want only a/db's CA at %v", got, caCert.NotAfter)
	}
}

// TestSQLObjectMetric: one series per declarative SQL object, 1 only while
// its Applied condition is True.
func TestSQLObjectMetric(t *testing.T) {
	applied := &tuskv1alpha1.PostgresRole{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app-user"},
		Spec: tuskv1alpha1.PostgresRoleSpec{Cluster: corev1.LocalObjectReference{Name: "orders"}, Name: "app_user"}}
	applied.Status.Conditions = []metav1.Condition{{Type: tuskv1alpha1.ConditionApplied, Status: metav1.ConditionTrue}}
	refused := &tuskv1alpha1.PostgresDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-db"},
		Spec: tuskv1alpha1.PostgresDatabaseSpec{Cluster: corev1.LocalObjectReference{Name: "orders"}, Name: "orders"}}
	refused.Status.Conditions = []metav1.Condition{{Type: tuskv1alpha1.ConditionApplied, Status: metav1.ConditionFalse}}
	fresh := &tuskv1alpha1.PostgresSubscription{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "feed"},
		Spec: tuskv1alpha1.PostgresSubscriptionSpec{Cluster: corev1.LocalObjectReference{Name: "reports"}, Name: "feed"}}
	want := `
# HELP tusk_sql_object_applied 1 while a declarative SQL object (PostgresRole, PostgresDatabase, PostgresPublication, PostgresSubscription) is applied: its Applied condition is True; else 0.
# TYPE tusk_sql_object_applied gauge
tusk_sql_object_applied{cluster="orders",kind="PostgresDatabase",namespace="shop",object="orders-db"} 0
tusk_sql_object_applied{cluster="orders",kind="PostgresRole",namespace="shop",object="app-user"} 1
tusk_sql_object_applied{cluster="reports",kind="PostgresSubscription",namespace="shop",object="feed"} 0
`
	got := metricsOf([]prometheus.Metric{
		sqlObjectMetric(roleKind(), applied), sqlObjectMetric(databaseKind(), refused), sqlObjectMetric(subscriptionKind(), fresh),
	})
	if err := testutil.CollectAndCompare(got, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
