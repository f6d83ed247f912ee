//go:build e2e

package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

const backupTimeout = 5 * time.Minute

// TestBackupAndPointInTimeRecovery is issue 7's story on the local
// cluster, with the S3 server in a pod: write, back up, write, note a
// time, write; restore to the time into a new cluster and find exactly the
// rows before it; delete the source cluster and restore the end of its
// archive into another, from the object store alone.
func TestBackupAndPointInTimeRecovery(t *testing.T) {
	ns := newNamespace(t)
	s3 := startS3(t, ns)
	const source = "orders"
	pgc := newCluster(ns, source, 2)
	pgc.Spec.Backup = &tuskv1alpha1.BackupSpec{ObjectStore: s3.ObjectStore("")}
	createCluster(t, pgc, "")
	waitHealthy(t, ns, source, 2, clusterCreateTimeout)
	startSQLClient(t, ns, source)

	psql(t, ns, source+"-rw", "CREATE TABLE lifecycle (id int PRIMARY KEY)")
	insertRows(t, ns, source, 1, 100)
	backup := takeBackup(t, ns, source, "orders-first")
	if backup.Status.Instance == mustGetCluster(t, ns, source).Status.CurrentPrimary {
		t.Errorf("backup taken from the primary %s; a healthy replica was there (target prefer-replica)", backup.Status.Instance)
	}
	insertRows(t, ns, source, 101, 200)
	target := timeAfterLastCommit(t, ns, source)
	insertRows(t, ns, source, 201, 300)
	// Close the segment holding the last rows (pg_switch_wal is the
	// superuser's), so that the archive has them without waiting for
	// archive_timeout.
	primary := mustGetCluster(t, ns, source).Status.CurrentPrimary
	waitArchived(t, ns, source, instanceSQL(t, ns, source, primary, "SELECT pg_walfile_name(pg_switch_wal())"))

	t.Run("to a time, from the PostgresBackup", func(t *testing.T) {
		restored := newCluster(ns, "orders-at-time", 1)
		restored.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{Recovery: &tuskv1alpha1.RecoverySpec{
			Backup: &corev1.LocalObjectReference{Name: backup.Name},
			Target: &tuskv1alpha1.RecoveryTarget{Time: &metav1.Time{Time: target}},
		}}
		createCluster(t, restored, "")
		waitHealthy(t, ns, restored.Name, 1, clusterCreateTimeout)
		assertRows(t, ns, restored.Name, 200)
	})

	deleteCluster(t, ns, source)
	t.Run("to the end of the archive, from the location of a deleted cluster", func(t *testing.T) {
		restored := newCluster(ns, "orders-latest", 2)
		restored.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{Recovery: &tuskv1alpha1.RecoverySpec{
			Source: ptrTo(s3.ObjectStore(source)),
		}}
		// It archives to a location of its own (its name), never the source's.
		restored.Spec.Backup = &tuskv1alpha1.BackupSpec{ObjectStore: s3.ObjectStore("")}
		createCluster(t, restored, "")
		waitHealthy(t, ns, restored.Name, 2, clusterCreateTimeout)
		assertRows(t, ns, restored.Name, 300)
		eventuallyEvery(t, 3*time.Minute, 2*time.Second, "the restored cluster archiving to its own location",
			func(context.Context) (bool, error) {
				return len(s3.listKeys(t, restored.Name+"/wal/")) > 0, nil
			})
	})
}

// timeAfterLastCommit returns a whole second (recovery targets are RFC 3339
// times) after every commit so far, and waits until the server's clock has
// passed it, so that every later commit is after it.
func timeAfterLastCommit(t *testing.T, ns, cluster string) time.Time {
	t.Helper()
	now := serverTime(t, ns, cluster)
	target := now.Truncate(time.Second).Add(time.Second)
	eventuallyEvery(t, 10*time.Second, 200*time.Millisecond, "the server's clock to pass "+target.String(),
		func(context.Context) (bool, error) { return serverTime(t, ns, cluster).After(target), nil })
	return target
}

func serverTime(t *testing.T, ns, cluster string) time.Time {
	t.Helper()
	out := psql(t, ns, cluster+"-rw", "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
	at, err := time.Parse(time.RFC3339Nano, out)
	if err != nil {
		t.Fatalf("parsing the server's time %q: %v", out, err)
	}
	return at
}

// takeBackup creates a PostgresBackup of cluster and waits for it to
// complete, checking what its status says.
func takeBackup(t *testing.T, ns, cluster, name string) *tuskv1alpha1.PostgresBackup {
	t.Helper()
	b := &tuskv1alpha1.PostgresBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: cluster}},
	}
	if err := kube.Create(context.Background(), b); err != nil {
		t.Fatalf("creating PostgresBackup %s: %v", name, err)
	}
	eventuallyEvery(t, backupTimeout, time.Second, "PostgresBackup "+name+" Completed", func(ctx context.Context) (bool, error) {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return false, err
		}
		if b.Status.Phase == tuskv1alpha1.BackupPhaseFailed {
			t.Fatalf("backup %s failed: %s", name, b.Status.Error)
		}
		return b.Status.Phase == tuskv1alpha1.BackupPhaseCompleted, nil
	})
	st := b.Status
	if st.BeginLSN == "" || st.EndLSN == "" || st.Timeline < 1 || st.SizeBytes <= 0 || st.StartedAt == nil ||
		st.CompletedAt == nil || st.Instance == "" || st.ObjectStore == nil || !strings.Contains(st.Location, name) {
		t.Fatalf("completed backup %s has an incomplete status: %+v", name, st)
	}
	return b
}

// waitArchived waits until the cluster reports segment (or a later one)
// archived.
func waitArchived(t *testing.T, ns, cluster, segment string) {
	t.Helper()
	eventuallyEvery(t, 3*time.Minute, time.Second, "WAL segment "+segment+" archived", func(ctx context.Context) (bool, error) {
		pgc, err := getCluster(ctx, ns, cluster)
		if err != nil || pgc.Status.Archive == nil {
			return false, err
		}
		return pgc.Status.Archive.LastArchivedWAL >= segment, nil
	})
}

// assertRows checks that the cluster holds exactly rows 1..n, read by its
// application user through its -rw Service: the restored data and the new
// cluster's credentials both work.
func assertRows(t *testing.T, ns, cluster string, n int) {
	t.Helper()
	client := "sql-" + cluster
	createPod(t, ns, appClientPod(client, cluster, "sleep", "infinity"))
	waitPodReady(t, ns, client, 2*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), sqlTimeout)
	defer cancel()
	out, err := kubectl(ctx, "exec", "-n", ns, client, "--", "psql", serviceConninfo(ns, cluster+"-rw"),
		"-XAtq", "-v", "ON_ERROR_STOP=1", "-c", "SELECT count(*), coalesce(min(id), 0), coalesce(max(id), 0) FROM lifecycle")
	if err != nil {
		t.Fatalf("reading the rows of %s: %v\n%s", cluster, err, out)
	}
	want := strings.Join([]string{strconv.Itoa(n), "1", strconv.Itoa(n)}, "|")
	if got := strings.TrimSpace(out); got != want {
		t.Fatalf("%s holds count|min|max %s, want %s", cluster, got, want)
	}
}
