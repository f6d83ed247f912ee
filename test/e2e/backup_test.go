//go:build e2e

package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	parallel(t)
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

	t.Run("scheduled backups and retention", func(t *testing.T) { testScheduledBackup(t, s3, ns, source, backup.Name) })

	t.Run("clone of the running cluster", func(t *testing.T) {
		clone := newCluster(ns, "orders-clone", 1)
		clone.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{Clone: &tuskv1alpha1.CloneSpec{Cluster: source}}
		createCluster(t, clone, "")
		waitHealthy(t, ns, clone.Name, 1, clusterCreateTimeout)
		assertRows(t, ns, clone.Name, 300)
		// The clone is a cluster of its own: it takes writes the source
		// never sees.
		appSQL(t, ns, clone.Name, "INSERT INTO lifecycle VALUES (301)")
		assertRows(t, ns, clone.Name, 301)
		assertRows(t, ns, source, 300)
	})

	deleteCluster(t, ns, source)
	t.Run("to the end of the archive, from the location of a deleted cluster", func(t *testing.T) {
		restored := newCluster(ns, "orders-latest", 2)
		restored.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{Recovery: &tuskv1alpha1.RecoverySpec{
			Source: ptrTo(s3.ObjectStore(ns + "/" + source)), // the source's default path
		}}
		// It archives to a location of its own (<namespace>/<its name>), never the source's.
		restored.Spec.Backup = &tuskv1alpha1.BackupSpec{ObjectStore: s3.ObjectStore("")}
		createCluster(t, restored, "")
		waitHealthy(t, ns, restored.Name, 2, clusterCreateTimeout)
		assertRows(t, ns, restored.Name, 300)
		eventuallyEvery(t, 3*time.Minute, 2*time.Second, "the restored cluster archiving to its own location",
			func(context.Context) (bool, error) {
				return len(s3.listKeys(t, ns+"/"+restored.Name+"/wal/")) > 0, nil
			})
	})
}

// testScheduledBackup turns on a schedule of every minute with a
// retention of 7 days, waits for the schedule's backup to complete and for
// retention to report the first recoverability point, has retention prune
// the older backup earlier (testRetentionPrunes), then turns the schedule
// off.
func testScheduledBackup(t *testing.T, s3 *s3Server, ns, cluster, earlier string) {
	// A backup from a replica begins at the replica's last restartpoint,
	// which follows the primary's checkpoints: without one since the
	// earlier backup, both would begin in the same segment, and there
	// would be no WAL for retention to prune.
	primary := mustGetCluster(t, ns, cluster).Status.CurrentPrimary
	instanceSQL(t, ns, cluster, primary, "CHECKPOINT")
	waitArchived(t, ns, cluster, instanceSQL(t, ns, cluster, primary, "SELECT pg_walfile_name(pg_switch_wal())"))
	patchClusterSpec(t, ns, cluster, map[string]any{"backup": map[string]any{"schedule": "* * * * *", "retention": "7d"}})
	defer patchClusterSpec(t, ns, cluster, map[string]any{"backup": map[string]any{"schedule": nil}})
	var name string
	eventuallyEvery(t, 2*time.Minute, time.Second, "a backup created by the schedule", func(ctx context.Context) (bool, error) {
		pgc, err := getCluster(ctx, ns, cluster)
		if err != nil || pgc.Status.Backup == nil {
			return false, err
		}
		name = pgc.Status.Backup.LastScheduledBackup
		return name != "", nil
	})
	if !strings.HasPrefix(name, cluster+"-") {
		t.Errorf("scheduled backup %q is not named after its cluster", name)
	}
	b := waitBackupCompleted(t, ns, name)
	if b.Spec.Cluster.Name != cluster || b.Labels["tusk.dev/cluster"] != cluster {
		t.Errorf("scheduled backup %s is not of cluster %s: spec %+v, labels %v", name, cluster, b.Spec, b.Labels)
	}
	eventuallyEvery(t, 2*time.Minute, time.Second, "retention reporting the first recoverability point", func(ctx context.Context) (bool, error) {
		pgc, err := getCluster(ctx, ns, cluster)
		if err != nil || pgc.Status.Backup == nil {
			return false, err
		}
		frp := pgc.Status.Backup.FirstRecoverabilityPoint
		return frp != nil && pgc.Status.Backup.NextScheduleTime != nil, nil
	})
	testRetentionPrunes(t, s3, ns, cluster, earlier, name)
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
// complete.
func takeBackup(t *testing.T, ns, cluster, name string) *tuskv1alpha1.PostgresBackup {
	t.Helper()
	b := &tuskv1alpha1.PostgresBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: cluster}},
	}
	if err := kube.Create(context.Background(), b); err != nil {
		t.Fatalf("creating PostgresBackup %s: %v", name, err)
	}
	return waitBackupCompleted(t, ns, name)
}

// waitBackupCompleted waits for PostgresBackup name to complete, checking
// what its status says.
func waitBackupCompleted(t *testing.T, ns, name string) *tuskv1alpha1.PostgresBackup {
	t.Helper()
	b := &tuskv1alpha1.PostgresBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
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
	out := appSQL(t, ns, cluster, "SELECT count(*), coalesce(min(id), 0), coalesce(max(id), 0) FROM lifecycle")
	want := strings.Join([]string{strconv.Itoa(n), "1", strconv.Itoa(n)}, "|")
	if got := strings.TrimSpace(out); got != want {
		t.Fatalf("%s holds count|min|max %s, want %s", cluster, got, want)
	}
}

// appSQL runs sql as the cluster's application user through its -rw
// Service, from a pod of its own holding that user's credentials.
func appSQL(t *testing.T, ns, cluster, sql string) string {
	t.Helper()
	client := "sql-" + cluster
	if _, err := clientset.CoreV1().Pods(ns).Get(context.Background(), client, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		createPod(t, ns, appClientPod(client, cluster, "sleep", "infinity"))
	}
	waitPodReady(t, ns, client, 2*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), sqlTimeout)
	defer cancel()
	out, err := kubectl(ctx, "exec", "-n", ns, client, "--", "psql", serviceConninfo(ns, cluster+"-rw"),
		"-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql)
	if err != nil {
		t.Fatalf("running %q on %s: %v\n%s", sql, cluster, err, out)
	}
	return out
}
