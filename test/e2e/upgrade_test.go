//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// upgradeTimeout bounds one major upgrade of a small cluster here: the
// replicas stop, the primary's pod is replaced and runs pg_upgrade, the
// replicas are copied again.
const upgradeTimeout = 10 * time.Minute

// longTier skips a test that make e2e-long runs, too long for CI's budget.
func longTier(t *testing.T) {
	t.Helper()
	if os.Getenv("TUSK_E2E_LONG") != "1" {
		t.Skip("in the long tier: make e2e-long runs it")
	}
}

// waitUpgrade waits until the cluster's upgrade attempt other than
// previous ends in want, and returns the cluster then. An attempt that
// ends otherwise fails the test with its message.
func waitUpgrade(t *testing.T, ns, name, previous string, want tuskv1alpha1.MajorUpgradePhase) *tuskv1alpha1.PostgresCluster {
	t.Helper()
	var pgc *tuskv1alpha1.PostgresCluster
	eventuallyEvery(t, upgradeTimeout, time.Second, fmt.Sprintf("the upgrade of %s to end %s", name, want), func(ctx context.Context) (bool, error) {
		var err error
		if pgc, err = getCluster(ctx, ns, name); err != nil {
			return false, err
		}
		u := pgc.Status.MajorUpgrade
		if u == nil || u.Attempt == previous {
			return false, fmt.Errorf("no new upgrade attempt yet")
		}
		switch u.Phase {
		case want:
			return true, nil
		case tuskv1alpha1.MajorUpgradeSucceeded, tuskv1alpha1.MajorUpgradeFailed:
			t.Fatalf("the upgrade ended %s, want %s: %s", u.Phase, want, u.Message)
		}
		return false, fmt.Errorf("%s: %s", u.Phase, u.Message)
	})
	u := pgc.Status.MajorUpgrade
	t.Logf("upgrade %s, PostgreSQL %d to %d, %s after %.0fs: %s", u.Attempt, u.FromMajor, u.ToMajor, u.Phase,
		u.FinishedAt.Sub(u.StartedAt.Time).Seconds(), u.Message)
	return pgc
}

// checkMajor checks that the cluster serves major through -rw, says so in
// status, and that every pod runs image.
func checkMajor(t *testing.T, ns, name string, major int, image string) {
	t.Helper()
	if got := psql(t, ns, name+"-rw", "SELECT current_setting('server_version_num')::int / 10000"); got != strconv.Itoa(major) {
		t.Fatalf("%s-rw serves PostgreSQL %s, want %d", name, got, major)
	}
	if got := mustGetCluster(t, ns, name).Status.PostgresMajor; got != int32(major) {
		t.Errorf("status.postgresMajor is %d, want %d", got, major)
	}
	for _, p := range mustClusterPods(t, ns, name) {
		if got := containerImage(&p); got != image {
			t.Errorf("pod %s runs %s, want %s", p.Name, got, image)
		}
	}
}

// checkUpgradeCondition checks the MajorUpgrade condition's reason and
// that its message says what it should.
func checkUpgradeCondition(t *testing.T, pgc *tuskv1alpha1.PostgresCluster, reason, says string) {
	t.Helper()
	cond := meta.FindStatusCondition(pgc.Status.Conditions, tuskv1alpha1.ConditionMajorUpgrade)
	if cond == nil || cond.Reason != reason || !strings.Contains(cond.Message, says) {
		t.Errorf("condition MajorUpgrade is %+v, want reason %s saying %q", cond, reason, says)
	}
}

// upgradeCluster creates pgc, waits until it is healthy, and fills its
// lifecycle table with ids from..to through -rw.
func upgradeCluster(t *testing.T, pgc *tuskv1alpha1.PostgresCluster, from, to int) {
	t.Helper()
	ns, name := pgc.Namespace, pgc.Name
	createCluster(t, pgc, "")
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, int(pgc.Spec.Instances), time.Minute)
	startSQLClient(t, ns, name)
	psql(t, ns, name+"-rw", "CREATE TABLE lifecycle (id int PRIMARY KEY)")
	insertRows(t, ns, name, from, to)
}

// TestMajorUpgrade: a two-instance cluster on PostgreSQL 15 with data, an
// extension and a shared_preload_libraries entry that PostgreSQL 17 lacks
// (adminpack) is asked for 17 while a prepared transaction is open: the
// pre-check on the serving primary refuses before anything stops (no pod
// replaced), with a condition that says why. Once the transaction is
// committed, the retry stops the cluster, but pg_upgrade --check refuses an
// aclitem column in the upgrade's pod: rolled back, Ready on 15 with every
// row. Without it, the next retry passes the pre-checks and pg_upgrade,
// but the new server's first start fails on adminpack: rolled back again.
// Without adminpack, the next retry upgrades: 17 serves every row and the
// extension, and the replica is a fresh copy streaming on 17.
func TestMajorUpgrade(t *testing.T) {
	serial(t, measuresWriteGap)
	ns := newNamespace(t)
	const name = "upg"
	pgc := newCluster(ns, name, 2)
	pgc.Spec.PostgreSQL.Parameters = map[string]tuskv1alpha1.ParameterValue{"max_prepared_transactions": "2", "shared_preload_libraries": "adminpack"}
	upgradeCluster(t, pgc, 1, 1000)
	primary := mustGetCluster(t, ns, name).Status.CurrentPrimary
	instanceSQL(t, ns, name, primary, "CREATE EXTENSION pgcrypto")
	instanceSQL(t, ns, name, primary, "BEGIN; INSERT INTO lifecycle VALUES (0); PREPARE TRANSACTION 'open'")
	before, err := snapshotPods(context.Background(), ns, name)
	if err != nil {
		t.Fatal(err)
	}

	patchClusterSpec(t, ns, name, map[string]any{"image": "tusk/postgres:17"})
	refused := waitUpgrade(t, ns, name, "", tuskv1alpha1.MajorUpgradeFailed)
	checkUpgradeCondition(t, refused, tuskv1alpha1.ReasonMajorUpgradeFailed, "refused before anything stopped: prepared transactions are open: open")
	if after, err := snapshotPods(context.Background(), ns, name); err != nil || !maps.Equal(before, after) {
		t.Errorf("pods before the refused upgrade %v, after %v (%v): want none replaced or restarted", before, after, err)
	}
	checkMajor(t, ns, name, 15, testImage)

	// pg_upgrade --check refuses in the upgrade's pod: aclitem's storage
	// changed in 16.
	instanceSQL(t, ns, name, primary, "COMMIT PREPARED 'open'")
	instanceSQL(t, ns, name, primary, "CREATE TABLE grants (a aclitem)")
	annotateCluster(t, ns, name, tuskv1alpha1.AnnotationRetryUpgrade, refused.Status.MajorUpgrade.Attempt)
	checked := waitUpgrade(t, ns, name, refused.Status.MajorUpgrade.Attempt, tuskv1alpha1.MajorUpgradeFailed)
	checkUpgradeCondition(t, checked, tuskv1alpha1.ReasonMajorUpgradeFailed, `"aclitem" data type in user tables`)
	waitHealthy(t, ns, name, 2, 3*time.Minute)
	checkMajor(t, ns, name, 15, testImage)
	waitRowsEverywhere(t, ns, name, 1001)

	primary = mustGetCluster(t, ns, name).Status.CurrentPrimary
	instanceSQL(t, ns, name, primary, "DROP TABLE grants")
	annotateCluster(t, ns, name, tuskv1alpha1.AnnotationRetryUpgrade, checked.Status.MajorUpgrade.Attempt)
	failed := waitUpgrade(t, ns, name, checked.Status.MajorUpgrade.Attempt, tuskv1alpha1.MajorUpgradeFailed)
	checkUpgradeCondition(t, failed, tuskv1alpha1.ReasonMajorUpgradeFailed, "the first start of the new server")
	checkUpgradeCondition(t, failed, tuskv1alpha1.ReasonMajorUpgradeFailed, "adminpack")
	waitHealthy(t, ns, name, 2, 3*time.Minute)
	checkMajor(t, ns, name, 15, testImage)
	waitRowsEverywhere(t, ns, name, 1001)

	patchClusterSpec(t, ns, name, map[string]any{"postgresql": map[string]any{"parameters": map[string]any{"shared_preload_libraries": nil}}})
	waitHealthy(t, ns, name, 2, 3*time.Minute)
	// The tuned writer and the ordinary client write through -rw across
	// the upgrade that succeeds: what it costs them, and that it loses
	// nothing they saw acknowledged.
	w := startWorkload(t, ns, name)
	startedAt := time.Now()
	annotateCluster(t, ns, name, tuskv1alpha1.AnnotationRetryUpgrade, failed.Status.MajorUpgrade.Attempt)
	done := waitUpgrade(t, ns, name, failed.Status.MajorUpgrade.Attempt, tuskv1alpha1.MajorUpgradeSucceeded)
	checkUpgradeCondition(t, done, tuskv1alpha1.ReasonMajorUpgradeSucceeded, "Upgraded to PostgreSQL 17")
	waitHealthy(t, ns, name, 2, 3*time.Minute)
	endedAt := time.Now()
	w.WaitAcks(t, 100, time.Minute)
	for _, c := range w.writers() {
		c.Stop(t)
	}
	recs, ordinaryRecs := w.Ledger(t), w.ordinary.Ledger(t)
	for _, c := range w.writers() {
		assertNoWriteLost(t, c.Check(t))
	}
	t.Logf("in-place upgrade's write gap: tuned writer %s, ordinary client %s",
		writeGapAround(recs, startedAt, endedAt), writeGapAround(ordinaryRecs, startedAt, endedAt))
	checkMajor(t, ns, name, 17, "tusk/postgres:17")
	checkUpgradedData(t, ns, name, 1001)
	// The manager analyzes after the upgrade (pg_upgrade carries no
	// statistics before 18): a manual ANALYZE, which autovacuum's are not.
	upgraded := mustGetCluster(t, ns, name).Status.CurrentPrimary
	eventually(t, 2*time.Minute, "the upgraded primary to have analyzed lifecycle", func(ctx context.Context) (bool, error) {
		got, err := tryInstanceSQL(ctx, ns, name, upgraded, "SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'lifecycle'")
		return err == nil && got == "t", nil
	})
}

// checkUpgradedData checks after an upgrade that the rows (ids 0..rows-1)
// and the extension are there, and that a new write reaches every instance.
func checkUpgradedData(t *testing.T, ns, name string, rows int) {
	t.Helper()
	if got := psql(t, ns, name+"-rw", "SELECT count(*) || ' ' || sum(id) FROM lifecycle"); got != fmt.Sprintf("%d %d", rows, rows*(rows-1)/2) {
		t.Fatalf("lifecycle holds %s after the upgrade, want %d rows", got, rows)
	}
	if got := psql(t, ns, name+"-rw", "SELECT count(*) FROM pg_extension WHERE extname = 'pgcrypto'"); got != "1" {
		t.Errorf("pgcrypto is not there after the upgrade (%s)", got)
	}
	insertRows(t, ns, name, rows, rows+99)
	waitRowsEverywhere(t, ns, name, rows+100)
}

func annotateCluster(t *testing.T, ns, name, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := kubectl(ctx, "annotate", "-n", ns, "pgc/"+name, "--overwrite", key+"="+value); err != nil {
		t.Fatalf("kubectl annotate pgc/%s %s=%s: %v\n%s", name, key, value, err, out)
	}
}

// TestMajorUpgradeChain (long tier): a three-instance cluster goes from 15
// to 17 and on to 18 by two changes of spec.image, every row and the
// extension carried, its replicas copied again on each major.
func TestMajorUpgradeChain(t *testing.T) {
	parallel(t)
	longTier(t)
	ns := newNamespace(t)
	const name = "chain"
	upgradeCluster(t, newCluster(ns, name, 3), 0, 9999)
	instanceSQL(t, ns, name, mustGetCluster(t, ns, name).Status.CurrentPrimary, "CREATE EXTENSION pgcrypto")
	rows, previous := 10000, ""
	for _, major := range []int{17, 18} {
		image := fmt.Sprintf("tusk/postgres:%d", major)
		patchClusterSpec(t, ns, name, map[string]any{"image": image})
		previous = waitUpgrade(t, ns, name, previous, tuskv1alpha1.MajorUpgradeSucceeded).Status.MajorUpgrade.Attempt
		waitHealthy(t, ns, name, 3, 3*time.Minute)
		checkMajor(t, ns, name, major, image)
		checkUpgradedData(t, ns, name, rows)
		rows += 100
	}
}

// TestMajorUpgradeWithBackups (long tier): with spec.backup, the upgrade
// takes a backup first; the upgraded system archives into a subdirectory
// of its own (the location's claim holds, archiving never fails) and takes
// backups there; the backup from before restores into a new PostgreSQL 15
// cluster with exactly the rows it had.
func TestMajorUpgradeWithBackups(t *testing.T) {
	parallel(t)
	longTier(t)
	ns := newNamespace(t)
	s3 := startS3(t, ns)
	const name = "bk"
	pgc := newCluster(ns, name, 2)
	pgc.Spec.Backup = &tuskv1alpha1.BackupSpec{ObjectStore: s3.ObjectStore("")}
	upgradeCluster(t, pgc, 1, 100)

	patchClusterSpec(t, ns, name, map[string]any{"image": "tusk/postgres:17"})
	done := waitUpgrade(t, ns, name, "", tuskv1alpha1.MajorUpgradeSucceeded)
	u := done.Status.MajorUpgrade
	before := waitBackupCompleted(t, ns, u.Backup)
	if want := "pg" + u.Attempt; done.Status.ArchiveSubdirectory != want {
		t.Errorf("status.archiveSubdirectory is %q, want %q", done.Status.ArchiveSubdirectory, want)
	}
	if strings.Contains(before.Status.Location, done.Status.ArchiveSubdirectory) {
		t.Errorf("the backup from before the upgrade is in the new system's location %s", before.Status.Location)
	}
	waitHealthy(t, ns, name, 2, 3*time.Minute)
	checkMajor(t, ns, name, 17, "tusk/postgres:17")

	insertRows(t, ns, name, 101, 200)
	primary := mustGetCluster(t, ns, name).Status.CurrentPrimary
	waitArchived(t, ns, name, instanceSQL(t, ns, name, primary, "SELECT pg_walfile_name(pg_switch_wal())"))
	if keys := s3.listKeys(t, ns+"/"+name+"/"+done.Status.ArchiveSubdirectory+"/wal/"); len(keys) == 0 {
		t.Errorf("nothing archived in the upgraded system's location")
	}
	if a := mustGetCluster(t, ns, name).Status.Archive; a == nil || a.Failing {
		t.Errorf("archiving after the upgrade: %+v", a)
	}
	after := takeBackup(t, ns, name, "bk-after")
	if !strings.Contains(after.Status.Location, done.Status.ArchiveSubdirectory) {
		t.Errorf("the backup after the upgrade is at %s, not in the new system's location", after.Status.Location)
	}

	restored := newCluster(ns, "bk-before", 1)
	restored.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{Recovery: &tuskv1alpha1.RecoverySpec{
		Backup: &corev1.LocalObjectReference{Name: before.Name},
	}}
	createCluster(t, restored, "")
	waitHealthy(t, ns, restored.Name, 1, clusterCreateTimeout)
	assertRows(t, ns, restored.Name, 100)
	if got := appSQL(t, ns, restored.Name, "SELECT current_setting('server_version_num')::int / 10000"); strings.TrimSpace(got) != "15" {
		t.Errorf("the restored cluster serves PostgreSQL %s", got)
	}
}
