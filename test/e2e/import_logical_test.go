//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// TestLogicalUpgradeUnderWrites: a PostgreSQL 15 cluster moves to a new
// PostgreSQL 18 cluster by a logical import while the workload writes to
// it through its -rw Service (the tuned writer and the ordinary client,
// verify-full against the old cluster's CA), declared as docs/upgrades.md
// shows (its YAML applied verbatim): the import's role and publication as
// PostgresRole and PostgresPublication, the new cluster naming the old one
// as source.cluster. The new cluster copies the schema and follows the old
// one; the cutover annotation makes the old database read-only, applies
// its last changes and copies its sequences; the old cluster's Services
// then send the writers to the new cluster, whose certificate the old CA
// verifies under the old name. No acknowledged write is lost; the
// cutover's write gap is printed as the operator measured it and as both
// clients saw it.
func TestLogicalUpgradeUnderWrites(t *testing.T) {
	serial(t, measuresWriteGap)
	ns := newNamespace(t)
	oldPrimary := createLogicalSource(t, ns, "orders")
	instanceSQL(t, ns, "orders", oldPrimary, `CREATE TABLE items (id bigserial PRIMARY KEY, note text NOT NULL);
INSERT INTO items (note) SELECT 'item ' || g FROM generate_series(1, 2000) g`)
	// An application's pace: unpaced, the writer's 8 clients commit
	// together, sharing each flush, faster than one apply worker, which
	// commits their transactions one by one, each waiting for the new
	// cluster's synchronous standby, can follow here; the cutover then
	// refuses (docs/upgrades.md).
	w := startPacedWorkload(t, ns, "orders", workloadPace)

	block := docYAMLBlocks(t, "upgrades.md", 2)[1]
	start := time.Now()
	applyYAML(t, ns, block)
	waitApplied(t, ns, "pgrole/orders-migrator")
	waitApplied(t, ns, "pgpub/orders-app-import")
	waitHealthy(t, ns, "orders-18", 2, 5*time.Minute)
	t.Logf("the new cluster serves %.1fs after the manifests were applied", time.Since(start).Seconds())
	newPrimary := mustGetCluster(t, ns, "orders-18").Status.CurrentPrimary
	eventually(t, 3*time.Minute, "the new cluster to hold the old one's items and follow its writes", func(ctx context.Context) (bool, error) {
		items, err := tryInstanceSQL(ctx, ns, "orders-18", newPrimary, "SELECT count(*) FROM items")
		if err != nil || items != "2000" {
			return false, nil
		}
		pgc, err := getCluster(ctx, ns, "orders-18")
		return err == nil && pgc.Status.Import != nil && pgc.Status.Import.Phase == tuskv1alpha1.ImportReplicating, nil
	})
	w.WaitAcks(t, 200, time.Minute) // the writers still write on the old cluster

	cutoverAt := time.Now()
	annotateCluster(t, ns, "orders-18", tuskv1alpha1.AnnotationImportCutover, "now")
	var done *tuskv1alpha1.PostgresCluster
	eventually(t, 3*time.Minute, "the cutover", func(ctx context.Context) (bool, error) {
		pgc, err := getCluster(ctx, ns, "orders-18")
		if err != nil || pgc.Status.Import == nil {
			return false, nil
		}
		if pgc.Status.Import.Phase == tuskv1alpha1.ImportCutoverFailed {
			t.Fatalf("the cutover failed: %s", pgc.Status.Import.Message)
		}
		done = pgc
		return pgc.Status.Import.Phase == tuskv1alpha1.ImportCutOver, nil
	})
	eventually(t, time.Minute, "the old cluster's Services to send clients to the new one", func(ctx context.Context) (bool, error) {
		pgc, err := getCluster(ctx, ns, "orders")
		return err == nil && pgc.Status.ServedBy == "orders-18", nil
	})
	cutOver := time.Now()
	if done.Status.Import.WriteGap == nil {
		t.Fatalf("import status %+v has no write gap", done.Status.Import)
	}
	for _, suffix := range []string{"-rw", "-ro", "-r"} {
		svc, err := clientset.CoreV1().Services(ns).Get(context.Background(), "orders"+suffix, metav1.GetOptions{})
		if err != nil || svc.Spec.Selector["tusk.dev/cluster"] != "orders-18" {
			t.Errorf("Service orders%s after the cutover: %v, selector %v; want it to select orders-18", suffix, err, svc.Spec.Selector)
		}
	}
	w.WaitAcks(t, 200, time.Minute) // and now on the new one, through the same Service

	for _, c := range w.writers() {
		c.Stop(t)
	}
	recs, ordinaryRecs := w.Ledger(t), w.ordinary.Ledger(t)
	for _, c := range w.writers() {
		assertNoWriteLost(t, c.Check(t))
	}
	if got := instanceSQL(t, ns, "orders-18", newPrimary, "SELECT nextval('items_id_seq')"); got != "2001" {
		t.Errorf("items_id_seq on the new cluster after the cutover: %s, want 2001", got)
	}
	if got := instanceSQL(t, ns, "orders-18", newPrimary, "SELECT count(*) FROM pg_subscription"); got != "0" {
		t.Errorf("%s subscriptions left after the cutover", got)
	}
	// The old name, verified against the old CA, reaches the new major.
	out, err := w.exec(context.Background(), "tools", "psql", serviceConninfo(ns, "orders-rw"), "-XAtq", "-c", "SHOW server_version_num")
	if err != nil || !strings.HasPrefix(strings.TrimSpace(out), "18") {
		t.Errorf("orders-rw with verify-full against the old CA after the cutover: %v %q; want PostgreSQL 18", err, out)
	}
	if _, err := tryInstanceSQL(context.Background(), ns, "orders", oldPrimary, "INSERT INTO items (note) VALUES ('late')"); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("a write on the old primary after the cutover: %v; want a read-only refusal", err)
	}
	t.Logf("cutover: %s", done.Status.Import.Message)
	t.Logf("cutover: the operator's write gap %s; longest gap of the tuned writer around it %s, of the ordinary client %s",
		done.Status.Import.WriteGap.Duration, writeGapAround(recs, cutoverAt, cutOver), writeGapAround(ordinaryRecs, cutoverAt, cutOver))
}

// TestDeletedImportDropsItsSlot: a cluster deleted while its logical
// import still follows the source (no cutover) has its primary drop the
// subscription first, and with it the slot on the source, which would
// otherwise keep the source's WAL without end (Event ImportAbandoned).
func TestDeletedImportDropsItsSlot(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	srcPrimary := createLogicalSource(t, ns, "src")
	instanceSQL(t, ns, "src", srcPrimary, `CREATE ROLE migrator LOGIN REPLICATION PASSWORD 'migrate-me' IN ROLE app, pg_signal_backend, pg_read_all_data;
CREATE PUBLICATION tusk_import FOR ALL TABLES;
CREATE TABLE items (id bigserial PRIMARY KEY, note text NOT NULL)`)
	createSecret(t, ns, "migrator", map[string][]byte{"password": []byte("migrate-me")})

	dst := newCluster(ns, "dst", 1)
	// A logical import needs PostgreSQL 16 or later (its subscription
	// applies as each table's owner there, not as superuser).
	dst.Spec.Image = "tusk/postgres:17"
	dst.Spec.PostgreSQL.Synchronous = tuskv1alpha1.SynchronousSpec{Mode: tuskv1alpha1.SynchronousOff}
	dst.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{InitDB: &tuskv1alpha1.InitDBSpec{Import: &tuskv1alpha1.ImportSpec{
		Source: tuskv1alpha1.ImportSource{Cluster: "src", User: "migrator",
			PasswordSecret: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "migrator"}, Key: "password"}},
		Databases: []string{"app"},
		Method:    "logical",
	}}}
	createCluster(t, dst, "")
	eventually(t, 4*time.Minute, "the import to follow its source", func(ctx context.Context) (bool, error) {
		pgc, err := getCluster(ctx, ns, "dst")
		return err == nil && pgc.Status.Import != nil && pgc.Status.Import.Phase == tuskv1alpha1.ImportReplicating, nil
	})
	slots := "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'tusk_import_%'"
	if got := instanceSQL(t, ns, "src", srcPrimary, slots); got != "1" {
		t.Fatalf("%s import slots on the source while importing, want 1", got)
	}
	deleteCluster(t, ns, "dst")
	if got := instanceSQL(t, ns, "src", srcPrimary, slots); got != "0" {
		t.Errorf("%s import slots left on the source after the importing cluster's deletion", got)
	}
	waitEvent(t, ns, tuskv1alpha1.ReasonImportAbandoned, "tusk_import_")
}

// workloadPace is the tuned writer's pause between two writes of a client
// in TestLogicalUpgradeUnderWrites: 8 clients, at most 80 writes a second.
const workloadPace = 100 * time.Millisecond

// startPacedWorkload is startWorkload with each tuned client pausing
// pace between two writes.
func startPacedWorkload(t *testing.T, ns, cluster string, pace time.Duration) *workloadWriter {
	t.Helper()
	pod := workloadPod(ns, cluster)
	writer := &pod.Spec.Containers[0]
	writer.Command = append(writer.Command, "--interval", pace.String())
	return startWorkloadPod(t, ns, cluster, pod)
}

// createLogicalSource creates a healthy 1-instance PostgreSQL 15 cluster
// with wal_level logical, the source of a logical import, and returns its
// primary.
func createLogicalSource(t *testing.T, ns, name string) string {
	t.Helper()
	src := newCluster(ns, name, 1)
	src.Spec.PostgreSQL.Synchronous = tuskv1alpha1.SynchronousSpec{Mode: tuskv1alpha1.SynchronousOff}
	src.Spec.PostgreSQL.Parameters = map[string]tuskv1alpha1.ParameterValue{"wal_level": "logical"}
	createCluster(t, src, "")
	waitHealthy(t, ns, name, 1, 3*time.Minute)
	return mustGetCluster(t, ns, name).Status.CurrentPrimary
}
