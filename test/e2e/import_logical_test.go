//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// TestLogicalUpgradeUnderWrites: a PostgreSQL 15 cluster moves to a new
// PostgreSQL 18 cluster by a logical import while the workload writes to
// it (the tuned writer and the ordinary client, whose DSN lists the old
// cluster first and the new one second, read-write only, as a migrating
// application's would): the new cluster copies the schema and follows the
// old one; the cutover annotation makes the old database read-only,
// applies its last changes and copies its sequences; the writers go on on
// the new cluster. No acknowledged write is lost; the cutover's write gap
// is printed as the operator measured it and as both clients saw it.
func TestLogicalUpgradeUnderWrites(t *testing.T) {
	ns := newNamespace(t)
	old := newCluster(ns, "old", 1)
	old.Spec.PostgreSQL.Synchronous = tuskv1alpha1.SynchronousSpec{Mode: tuskv1alpha1.SynchronousOff}
	old.Spec.PostgreSQL.Parameters = map[string]tuskv1alpha1.ParameterValue{"wal_level": "logical"}
	createCluster(t, old, "")
	waitHealthy(t, ns, "old", 1, 3*time.Minute)
	oldPrimary := mustGetCluster(t, ns, "old").Status.CurrentPrimary
	// The import's role: REPLICATION for the slots, a member of the
	// database's owner (app) to make it read-only, of pg_signal_backend to
	// end its sessions, and of pg_read_all_data to read the roles.
	instanceSQL(t, ns, "old", oldPrimary, `CREATE ROLE migrator LOGIN REPLICATION PASSWORD 'migrate-me' IN ROLE app, pg_signal_backend, pg_read_all_data;
CREATE PUBLICATION tusk_import FOR ALL TABLES;
CREATE TABLE items (id bigserial PRIMARY KEY, note text NOT NULL);
INSERT INTO items (note) SELECT 'item ' || g FROM generate_series(1, 2000) g`)

	w := startMigratingWorkload(t, ns)
	ca, err := clientset.CoreV1().ConfigMaps(ns).Get(context.Background(), "old-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createSecret(t, ns, "old-ca-cert", map[string][]byte{"ca.crt": []byte(ca.Data["ca.crt"])})
	createSecret(t, ns, "migrator", map[string][]byte{"password": []byte("migrate-me")})

	nw := newCluster(ns, "new", 1)
	nw.Spec.Image = "tusk/postgres:18"
	nw.Spec.PostgreSQL.Synchronous = tuskv1alpha1.SynchronousSpec{Mode: tuskv1alpha1.SynchronousOff}
	nw.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{InitDB: &tuskv1alpha1.InitDBSpec{
		// The application's credentials stay the same.
		Secret: &corev1.LocalObjectReference{Name: "old-app"},
		Import: &tuskv1alpha1.ImportSpec{
			Source: tuskv1alpha1.ImportSource{Host: "old-rw." + ns + ".svc", User: "migrator",
				PasswordSecret: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "migrator"}, Key: "password"},
				CASecret:       &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "old-ca-cert"}, Key: "ca.crt"}},
			Databases: []string{"app"},
			Method:    "logical",
		},
	}}
	start := time.Now()
	createCluster(t, nw, "")
	waitHealthy(t, ns, "new", 1, 5*time.Minute)
	t.Logf("the new cluster serves %.1fs after create", time.Since(start).Seconds())
	newPrimary := mustGetCluster(t, ns, "new").Status.CurrentPrimary
	eventually(t, 3*time.Minute, "the new cluster to hold the old one's items and follow its writes", func(ctx context.Context) (bool, error) {
		items, err := tryInstanceSQL(ctx, ns, "new", newPrimary, "SELECT count(*) FROM items")
		if err != nil || items != "2000" {
			return false, nil
		}
		pgc, err := getCluster(ctx, ns, "new")
		return err == nil && pgc.Status.Import != nil && pgc.Status.Import.Phase == tuskv1alpha1.ImportReplicating, nil
	})
	w.WaitAcks(t, 200, time.Minute) // the writers still write on the old cluster

	// The writers resolved new-rw before it existed: their DNS caches
	// the answer that it does not (CoreDNS: 30 s), as an application's
	// would. The cutover waits until they can reach it.
	eventually(t, 2*time.Minute, "new-rw to resolve in the writers' pod", func(ctx context.Context) (bool, error) {
		_, err := w.exec(ctx, "tools", "getent", "hosts", "new-rw."+ns+".svc")
		return err == nil, nil
	})
	cutoverAt := time.Now()
	annotateCluster(t, ns, "new", tuskv1alpha1.AnnotationImportCutover, "now")
	var done *tuskv1alpha1.PostgresCluster
	eventually(t, 3*time.Minute, "the cutover", func(ctx context.Context) (bool, error) {
		pgc, err := getCluster(ctx, ns, "new")
		if err != nil || pgc.Status.Import == nil {
			return false, nil
		}
		if pgc.Status.Import.Phase == tuskv1alpha1.ImportCutoverFailed {
			t.Fatalf("the cutover failed: %s", pgc.Status.Import.Message)
		}
		done = pgc
		return pgc.Status.Import.Phase == tuskv1alpha1.ImportCutOver, nil
	})
	cutOver := time.Now()
	if done.Status.Import.WriteGap == nil {
		t.Fatalf("import status %+v has no write gap", done.Status.Import)
	}
	w.WaitAcks(t, 200, time.Minute) // and now on the new one

	for _, c := range w.writers() {
		c.Stop(t)
	}
	recs, ordinaryRecs := w.Ledger(t), w.ordinary.Ledger(t)
	for _, c := range w.writers() {
		assertNoWriteLost(t, c.Check(t))
	}
	if got := instanceSQL(t, ns, "new", newPrimary, "SELECT nextval('items_id_seq')"); got != "2001" {
		t.Errorf("items_id_seq on the new cluster after the cutover: %s, want 2001", got)
	}
	if got := instanceSQL(t, ns, "new", newPrimary, "SELECT count(*) FROM pg_subscription"); got != "0" {
		t.Errorf("%s subscriptions left after the cutover", got)
	}
	if _, err := tryPSQLConninfoAs(context.Background(), ns, "old", "INSERT INTO items (note) VALUES ('late')"); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("a write on the old cluster after the cutover: %v; want a read-only refusal", err)
	}
	t.Logf("cutover: the operator's write gap %s; longest gap of the tuned writer around it %s, of the ordinary client %s",
		done.Status.Import.WriteGap.Duration, writeGapAround(recs, cutoverAt, cutOver), writeGapAround(ordinaryRecs, cutoverAt, cutOver))
}

// startMigratingWorkload starts the workload against the old cluster,
// with a DSN that lists the new cluster second and takes only a
// read-write server: the old cluster until its cutover, the new one
// after. TLS without verification: the two clusters have their own CAs.
func startMigratingWorkload(t *testing.T, ns string) *workloadWriter {
	t.Helper()
	pod := workloadPod(ns, "old")
	dsn := "host=old-rw." + ns + ".svc,new-rw." + ns + ".svc port=5432 sslmode=require target_session_attrs=read-write"
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		for j := range c.Env {
			if c.Env[j].Name == "TUSK_WORKLOAD_DSN" {
				c.Env[j].Value = dsn
			}
		}
	}
	createPod(t, ns, pod)
	waitPodReady(t, ns, workloadPodName, 2*time.Minute)
	w := &workloadWriter{ns: ns, cluster: "old", pod: workloadPodName, container: "writer", ledger: workloadLedger, table: "tusk_workload",
		ordinary: &workloadWriter{ns: ns, cluster: "old", pod: workloadPodName, container: ordinaryContainer, ledger: ordinaryLedger, table: ordinaryTable,
			splitBrainWindow: "0s"},
		// Both clusters take writes for the moment of the cutover, by
		// design: rows the old one took then reach the new one too.
		splitBrainWindow: "0s"}
	w.WaitAcks(t, 50, 2*time.Minute)
	return w
}

// tryPSQLConninfoAs runs sql as the app user on cluster's -rw Service
// from the workload pod's tools container.
func tryPSQLConninfoAs(ctx context.Context, ns, cluster, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, sqlTimeout)
	defer cancel()
	out, err := kubectl(ctx, "exec", "-n", ns, workloadPodName, "-c", "tools", "--",
		"psql", "host="+cluster+"-rw."+ns+".svc port=5432 sslmode=require", "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql)
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, out)
	}
	return strings.TrimSpace(out), nil
}
