//go:build integration

package operator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/controller"
	"tusk.dev/tusk/internal/testenv"
)

const seriesClusters = 100

// BenchmarkClusterMetricsSeries counts the series the operator's
// endpoint serves for 100 three-instance clusters. The operator runs
// first, so each cluster has the certificates it issues; then, with the
// operator stopped, each cluster is given the fullest status a cluster
// has (a primary, two lagging replicas in a synchronous quorum, WAL
// archiving, a schedule, retention, a completed backup) and the cluster
// collector is scraped. It reports the series per cluster (the same for
// every cluster: it fails otherwise) and the operator's own, which do not
// grow with clusters. Tusk's two counters add at most four series per
// cluster (backups by result, primary changes by kind) once they count.
func BenchmarkClusterMetricsSeries(b *testing.B) {
	env, err := testenv.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	const ns = "series"
	createNamespace(b, env.Client, ns)
	for i := range seriesClusters {
		create(b, env.Client, cluster(ns, clusterName(i)))
	}
	runOperatorUntilCertificates(b, env)
	for i := range seriesClusters {
		giveFullStatus(b, env.Client, ns, clusterName(i))
	}
	collector := controller.ClusterCollector{Reader: env.Client}
	var perCluster map[string]int
	b.ResetTimer()
	for range b.N {
		perCluster = seriesByCluster(b, collector)
	}
	b.StopTimer()
	if len(perCluster) != seriesClusters {
		b.Fatalf("series for %d clusters, want %d", len(perCluster), seriesClusters)
	}
	first := perCluster[clusterName(0)]
	for name, n := range perCluster {
		if n != first {
			b.Fatalf("cluster %s has %d series, cluster %s %d: a full status should give each the same", name, n, clusterName(0), first)
		}
	}
	own := operatorSeries(b)
	b.ReportMetric(float64(first), "series-per-cluster")
	b.ReportMetric(float64(first*seriesClusters), "cluster-series-total")
	b.ReportMetric(float64(own), "operator-own-series")
	b.Logf("figure: %d series per three-instance cluster (%d for %d clusters), %d the operator's own", first, first*seriesClusters, seriesClusters, own)
}

func clusterName(i int) string { return fmt.Sprintf("c%03d", i) }

// runOperatorUntilCertificates runs the operator in this process until
// the cluster collector reports every cluster's certificates, then stops
// it.
func runOperatorUntilCertificates(b *testing.B, env *testenv.Env) {
	b.Helper()
	stop := startOperator(b, env)
	defer stop()
	collector := controller.ClusterCollector{Reader: env.Client}
	testenv.Eventually(b, 5*time.Minute, func(context.Context) error {
		certs := map[string]int{}
		for _, m := range gatherCluster(b, collector)["tusk_cluster_certificate_expiry_timestamp_seconds"] {
			certs[label(m, "cluster")]++
		}
		for i := range seriesClusters {
			if n := certs[clusterName(i)]; n < 3 {
				return fmt.Errorf("cluster %s has %d certificate expiries, want 3 (the CA, the server, the replication client)", clusterName(i), n)
			}
		}
		return nil
	})
}

// giveFullStatus writes the status of a healthy three-instance cluster
// with every optional part set.
func giveFullStatus(b *testing.B, c client.Client, ns, name string) {
	b.Helper()
	ctx := context.Background()
	cl := &tuskv1alpha1.PostgresCluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cl); err != nil {
		b.Fatal(err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	lag := ptr.To[int64](8192)
	primary, r2, r3 := name+"-1", name+"-2", name+"-3"
	cl.Status.Phase = tuskv1alpha1.ClusterPhaseHealthy
	cl.Status.CurrentPrimary, cl.Status.TargetPrimary = primary, primary
	cl.Status.ReadyInstances = 3
	cl.Status.Instances = []tuskv1alpha1.InstanceStatus{
		{Name: primary, Role: tuskv1alpha1.RolePrimary, Ready: true, LSN: "0/5000060", Timeline: 1},
		{Name: r2, Role: tuskv1alpha1.RoleReplica, Ready: true, LSN: "0/5000000", LagBytes: lag, Timeline: 1},
		{Name: r3, Role: tuskv1alpha1.RoleReplica, Ready: true, LSN: "0/5000000", LagBytes: lag, Timeline: 1},
	}
	meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "ClusterReady", Message: "bench"})
	cl.Status.SynchronousQuorum = &tuskv1alpha1.QuorumStatus{Number: 1, Standbys: []string{r2, r3}}
	cl.Status.Archive = &tuskv1alpha1.ArchiveStatus{LastArchivedWAL: "000000010000000000000003", LastArchivedTime: &now}
	cl.Status.Backup = &tuskv1alpha1.BackupStatus{LastScheduleTime: &now, FirstRecoverabilityPoint: &now}
	if err := c.Status().Update(ctx, cl); err != nil {
		b.Fatalf("writing %s's status: %v", name, err)
	}
	backup := &tuskv1alpha1.PostgresBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-backup"},
		Spec:       tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: name}},
	}
	create(b, c, backup)
	backup.Status = tuskv1alpha1.PostgresBackupStatus{Phase: tuskv1alpha1.BackupPhaseCompleted, StartedAt: &now, CompletedAt: &now, SizeBytes: 1 << 30}
	if err := c.Status().Update(ctx, backup); err != nil {
		b.Fatalf("writing %s's status: %v", backup.Name, err)
	}
}

// seriesByCluster scrapes the collector and counts each cluster's series.
func seriesByCluster(b *testing.B, collector prometheus.Collector) map[string]int {
	b.Helper()
	out := map[string]int{}
	for _, ms := range gatherCluster(b, collector) {
		for _, m := range ms {
			out[label(m, "cluster")]++
		}
	}
	return out
}

func gatherCluster(b *testing.B, collector prometheus.Collector) map[string][]*dto.Metric {
	b.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(collector); err != nil {
		b.Fatal(err)
	}
	return gather(b, reg)
}

// operatorSeries counts the series of controller-runtime's registry: the
// operator's own (reconciles, work queues, clients) and Go's, each
// histogram bucket one, as Prometheus stores them.
func operatorSeries(b *testing.B) int {
	b.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetHistogram() != nil:
				n += len(m.GetHistogram().GetBucket()) + 3 // +Inf, _sum, _count
			case m.GetSummary() != nil:
				n += len(m.GetSummary().GetQuantile()) + 2
			default:
				n++
			}
		}
	}
	return n
}

func gather(b *testing.B, g prometheus.Gatherer) map[string][]*dto.Metric {
	b.Helper()
	families, err := g.Gather()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string][]*dto.Metric{}
	for _, f := range families {
		out[f.GetName()] = append(out[f.GetName()], f.GetMetric()...)
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
