//go:build integration

package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/postgres"
	"tusk.dev/tusk/internal/testenv"
	"tusk.dev/tusk/internal/walarchive"
)

// backupClock is the clock of the backup schedule reconciler in these
// tests: they move it instead of waiting for a schedule.
var backupClock = clocktesting.NewFakePassiveClock(time.Now())

// poke makes the reconcilers look at the cluster now (after the clock
// moved), as any change to it would.
func poke(t *testing.T, key client.ObjectKey) {
	t.Helper()
	c := &tuskv1alpha1.PostgresCluster{}
	if err := env.Client.Get(context.Background(), key, c); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(c.DeepCopy())
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations["test.tusk.dev/poke"] = time.Now().Format(time.RFC3339Nano)
	if err := env.Client.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
}

func backupNames(t *testing.T, ns string) []string {
	t.Helper()
	var list tuskv1alpha1.PostgresBackupList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range list.Items {
		names = append(names, b.Name)
	}
	slices.Sort(names)
	return names
}

func backupsAre(t *testing.T, ns string, want ...string) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		if got := backupNames(t, ns); !slices.Equal(got, want) {
			return fmt.Errorf("PostgresBackups %v, want %v", got, want)
		}
		return nil
	})
}

func scheduleStatus(last, next time.Time) func(c *tuskv1alpha1.PostgresCluster) error {
	return func(c *tuskv1alpha1.PostgresCluster) error {
		st := c.Status.Backup
		if st == nil || st.LastScheduleTime == nil || st.NextScheduleTime == nil ||
			!st.LastScheduleTime.Time.Equal(last) || !st.NextScheduleTime.Time.Equal(next) {
			return fmt.Errorf("status.backup %+v, want lastScheduleTime %v and nextScheduleTime %v", st, last, next)
		}
		return condition(c, tuskv1alpha1.ConditionScheduledBackups, metav1.ConditionTrue, tuskv1alpha1.ReasonScheduled)
	}
}

// TestScheduleCreatesBackups: an every-minute schedule creates one
// PostgresBackup per run, named by the run's time, labelled with the
// cluster and not owned by it; ten missed minutes make one catch-up
// backup, not ten; a schedule that never fires is reported and creates
// nothing, while the cluster goes on; status says so, written by the
// ClusterReconciler alone.
func TestScheduleCreatesBackups(t *testing.T) {
	ns := newNamespace(t)
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
		Data:       map[string][]byte{"ACCESS_KEY_ID": []byte("id"), "SECRET_ACCESS_KEY": []byte("secret")},
	})
	cluster := newBackupCluster(ns)
	cluster.Spec.Backup.ObjectStore.CASecret = nil
	cluster.Spec.Backup.Schedule = "* * * * *"
	backupClock.SetTime(time.Now())
	create(t, cluster)
	key := client.ObjectKeyFromObject(cluster)
	created := cluster.CreationTimestamp.UTC()
	first := created.Truncate(time.Minute).Add(time.Minute)

	// Before the first minute: nothing, the next run known.
	backupClock.SetTime(created)
	poke(t, key)
	clusterWhen(t, key, func(c *tuskv1alpha1.PostgresCluster) error {
		if st := c.Status.Backup; st == nil || st.NextScheduleTime == nil || !st.NextScheduleTime.Time.Equal(first) {
			return fmt.Errorf("status.backup %+v, want nextScheduleTime %v", st, first)
		}
		return condition(c, tuskv1alpha1.ConditionScheduledBackups, metav1.ConditionTrue, tuskv1alpha1.ReasonScheduled)
	})
	backupsAre(t, ns)

	backupClock.SetTime(first.Add(5 * time.Second))
	poke(t, key)
	name := "pg-" + first.Format("20060102150405")
	backupsAre(t, ns, name)
	clusterWhen(t, key, scheduleStatus(first, first.Add(time.Minute)))
	b := get(t, ns, name, &tuskv1alpha1.PostgresBackup{})
	if b.Spec.Cluster.Name != "pg" || b.Labels[LabelCluster] != "pg" || len(b.OwnerReferences) != 0 {
		t.Errorf("backup %s: cluster %q, labels %v, owners %v; want pg, labelled, no owner", name, b.Spec.Cluster.Name, b.Labels, b.OwnerReferences)
	}
	waitForEvent(t, ns, tuskv1alpha1.ReasonBackupCreated, name)

	// The operator "down" for ten minutes: one catch-up backup.
	latest := first.Add(11 * time.Minute)
	backupClock.SetTime(latest.Add(30 * time.Second))
	poke(t, key)
	backupsAre(t, ns, name, "pg-"+latest.Format("20060102150405"))
	clusterWhen(t, key, scheduleStatus(latest, latest.Add(time.Minute)))
	poke(t, key)
	clusterWhen(t, key, scheduleStatus(latest, latest.Add(time.Minute)))
	backupsAre(t, ns, name, "pg-"+latest.Format("20060102150405"))

	// A schedule the CRD accepts but that never fires.
	c := get(t, ns, "pg", &tuskv1alpha1.PostgresCluster{})
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Backup.Schedule = "0 0 30 2 *"
	if err := env.Client.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
	backupClock.SetTime(latest.Add(time.Hour))
	poke(t, key)
	clusterWhen(t, key, func(c *tuskv1alpha1.PostgresCluster) error {
		if err := condition(c, tuskv1alpha1.ConditionScheduledBackups, metav1.ConditionFalse, tuskv1alpha1.ReasonScheduleInvalid); err != nil {
			return err
		}
		if c.Status.Backup == nil || c.Status.Backup.NextScheduleTime != nil {
			return fmt.Errorf("status.backup %+v, want no nextScheduleTime", c.Status.Backup)
		}
		// The rest of the cluster goes on: the ClusterReconciler took the
		// new spec without a spec error.
		if c.Status.ObservedGeneration != c.Generation || c.Status.Phase == tuskv1alpha1.ClusterPhaseFailed {
			return fmt.Errorf("observedGeneration %d of %d, phase %s", c.Status.ObservedGeneration, c.Generation, c.Status.Phase)
		}
		return nil
	})
	e := waitForEvent(t, ns, tuskv1alpha1.ReasonScheduleInvalid, `spec.backup.schedule "0 0 30 2 *" never fires`)
	if e.Type != corev1.EventTypeWarning {
		t.Errorf("Event %s, want Warning", e.Type)
	}
	backupsAre(t, ns, name, "pg-"+latest.Format("20060102150405"))
	statusWrittenByClusterReconcilerOnly(t, key)
}

// putStoredBackup writes a backup's data and record as tusk instance
// backup does.
func putStoredBackup(t *testing.T, store *objectstore.Store, name string, end time.Time, beginLSN postgres.LSN) {
	t.Helper()
	ctx := context.Background()
	if err := store.Put(ctx, basebackup.DataKey(name), strings.NewReader("tar"), nil); err != nil {
		t.Fatal(err)
	}
	beginWAL, err := postgres.WALFileName(1, beginLSN, postgres.DefaultWALSegmentSize)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(basebackup.Record{
		Format: basebackup.RecordFormat, Name: name, BeginLSN: beginLSN, EndLSN: beginLSN + 0x100, Timeline: 1,
		BeginWAL: beginWAL, WALSegmentSize: postgres.DefaultWALSegmentSize, StartTime: end.Add(-time.Minute), EndTime: end,
		Object: basebackup.DataObject, Compression: "zstd",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, basebackup.RecordKey(name), bytes.NewReader(data), nil); err != nil {
		t.Fatal(err)
	}
}

// completedBackup creates a Completed PostgresBackup of cluster pg, as
// the backup controller leaves one. It waits for that controller to have
// seen the new object, then writes the status with an optimistic lock, so
// that neither overwrites the other.
func markBackupCompleted(t *testing.T, ns, name string, end time.Time, store tuskv1alpha1.ObjectStoreSpec) {
	t.Helper()
	ctx := context.Background()
	b := &tuskv1alpha1.PostgresBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{LabelCluster: "pg"}},
		Spec:       tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: "pg"}},
	}
	create(t, b)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
				return err
			}
			if b.Status.ObservedGeneration != b.Generation {
				return fmt.Errorf("backup %s not seen by its controller yet", name)
			}
			return nil
		})
		b.Status.Phase, b.Status.CompletedAt, b.Status.ObjectStore = tuskv1alpha1.BackupPhaseCompleted, ptr.To(metav1.NewTime(end)), &store
		return env.Client.Status().Update(ctx, b)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func storeKeys(t *testing.T, store *objectstore.Store) []string {
	t.Helper()
	var keys []string
	for obj, err := range store.List(context.Background(), "") {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, obj.Key)
	}
	return keys
}

// TestRetentionPrunesTheStoreAndTheBackups: a cluster with a one-week
// retention deletes, in a real S3 server, the backups and WAL older than
// the newest backup before the window, then their PostgresBackups, and
// records the first recoverability point; with a wrong secret it stops,
// says so in a condition and an Event (without the secret), and deletes
// nothing.
func TestRetentionPrunesTheStoreAndTheBackups(t *testing.T) {
	ctx := context.Background()
	s3 := testenv.StartS3(t, testenv.S3Options{})
	ns := newNamespace(t)
	secret, spec, store := s3Location(t, s3, ns, ns+"/prod")
	now := time.Now().UTC().Truncate(time.Second)
	backupClock.SetTime(now)
	day := 24 * time.Hour
	for _, b := range []struct {
		name string
		age  time.Duration
		lsn  postgres.LSN
	}{{"pg-old", 20 * day, 0x01000000}, {"pg-mid", 10 * day, 0x03000000}, {"pg-new", day, 0x05000000}} {
		putStoredBackup(t, store, b.name, now.Add(-b.age), b.lsn)
		markBackupCompleted(t, ns, b.name, now.Add(-b.age), spec)
	}
	markBackupCompleted(t, ns, "pg-elsewhere", now.Add(-30*day), tuskv1alpha1.ObjectStoreSpec{Endpoint: s3.Endpoint, Bucket: "other", CredentialsSecret: spec.CredentialsSecret})
	for _, seg := range []string{"000000010000000000000001", "000000010000000000000002", "000000010000000000000003", "00000002.history"} {
		key, err := walarchive.Key(seg)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Put(ctx, key, strings.NewReader("wal"), nil); err != nil {
			t.Fatal(err)
		}
	}

	putMarker(t, store, testSystemID)

	cluster := newBackupCluster(ns)
	cluster.Spec.Backup.ObjectStore = spec
	cluster.Spec.Backup.Retention = "7d"
	create(t, cluster)
	key := client.ObjectKeyFromObject(cluster)
	reportSystemIdentifier(t, key)
	clusterWhen(t, key, func(c *tuskv1alpha1.PostgresCluster) error {
		if st := c.Status.Backup; st == nil || st.FirstRecoverabilityPoint == nil || !st.FirstRecoverabilityPoint.Time.Equal(now.Add(-10*day)) {
			return fmt.Errorf("status.backup %+v, want firstRecoverabilityPoint %v", c.Status.Backup, now.Add(-10*day))
		}
		return condition(c, tuskv1alpha1.ConditionBackupRetention, metav1.ConditionTrue, tuskv1alpha1.ReasonRetentionApplied)
	})
	backupsAre(t, ns, "pg-elsewhere", "pg-mid", "pg-new")
	want := []string{
		"base/pg-mid/backup.json", "base/pg-mid/base.tar.zst", "base/pg-new/backup.json", "base/pg-new/base.tar.zst",
		walarchive.MarkerKey, "wal/0000000100000000/000000010000000000000003.zst", "wal/00000002.history.zst",
	}
	if got := storeKeys(t, store); !slices.Equal(got, want) {
		t.Errorf("objects left %v, want %v", got, want)
	}
	waitForEvent(t, ns, tuskv1alpha1.ReasonBackupsPruned, "Deleted 1 backups [pg-old], 0 interrupted backup directories and 2 archived WAL files")

	// A wrong secret: a new backup completing triggers retention, which
	// fails at the store and deletes nothing. The pods' Secrets hash
	// changing says the operator's cache has the new secret.
	hash := func() string {
		return get(t, ns, "pg-1", &corev1.Pod{}).Annotations[AnnotationSecretsHash]
	}
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		if hash() == "" {
			return fmt.Errorf("pg-1 has no Secrets hash yet")
		}
		return nil
	})
	before := hash()
	secret.Data["SECRET_ACCESS_KEY"] = []byte("not-the-secret")
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		if hash() == before {
			return fmt.Errorf("pg-1's Secrets hash did not change")
		}
		return nil
	})
	backupClock.SetTime(now.Add(30 * day))
	putStoredBackup(t, store, "pg-newer", now.Add(30*day), 0x07000000)
	markBackupCompleted(t, ns, "pg-newer", now.Add(30*day), spec)
	c := clusterWhen(t, key, func(c *tuskv1alpha1.PostgresCluster) error {
		return condition(c, tuskv1alpha1.ConditionBackupRetention, metav1.ConditionFalse, tuskv1alpha1.ReasonRetentionFailed)
	})
	msg := findCondition(c, tuskv1alpha1.ConditionBackupRetention).Message
	if !strings.Contains(msg, "access denied") || strings.Contains(msg, "not-the-secret") {
		t.Errorf("condition message %q, want access denied and no secret", msg)
	}
	e := waitForEvent(t, ns, tuskv1alpha1.ReasonRetentionFailed, "access denied")
	if e.Type != corev1.EventTypeWarning || strings.Contains(e.Note, "not-the-secret") {
		t.Errorf("Event %s %q, want a Warning without the secret", e.Type, e.Note)
	}
	if got := storeKeys(t, store); !slices.Equal(got, append(slices.Clone(want[:4]), append([]string{"base/pg-newer/backup.json", "base/pg-newer/base.tar.zst"}, want[4:]...)...)) {
		t.Errorf("objects after the failed retention: %v", got)
	}
	backupsAre(t, ns, "pg-elsewhere", "pg-mid", "pg-new", "pg-newer")
	statusWrittenByClusterReconcilerOnly(t, key)
}

// s3Location is a location on the test's S3 server: the credentials
// Secret "s3" in ns, the spec that names it, and a Store on it.
func s3Location(t *testing.T, s3 *testenv.S3, ns, path string) (*corev1.Secret, tuskv1alpha1.ObjectStoreSpec, *objectstore.Store) {
	t.Helper()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
		Data:       map[string][]byte{"ACCESS_KEY_ID": []byte(s3.AccessKey), "SECRET_ACCESS_KEY": []byte(s3.SecretKey)},
	}
	create(t, secret)
	spec := tuskv1alpha1.ObjectStoreSpec{
		Endpoint: s3.Endpoint, Bucket: s3.Bucket, Path: path, Region: "us-east-1",
		CredentialsSecret: tuskv1alpha1.S3CredentialsSecret{Name: "s3"},
	}
	store, err := objectstore.New(objectstore.Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Path: spec.Path,
		Region: "us-east-1", AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return secret, spec, store
}

// testSystemID is the database system identifier the tests' clusters
// report (reportSystemIdentifier).
const testSystemID = "7400000000000000001"

// putMarker claims the store's location for a database system, as the
// first archiving instance does.
func putMarker(t *testing.T, store *objectstore.Store, systemID string) {
	t.Helper()
	data, err := json.Marshal(walarchive.Marker{SystemIdentifier: systemID, Cluster: "victim/pg", ClaimedAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(context.Background(), walarchive.MarkerKey, bytes.NewReader(data), nil); err != nil {
		t.Fatal(err)
	}
}

// TestRetentionPrunesOnlyItsOwnLocation: a cluster whose spec names
// another cluster's location (by mistake, or a tenant on purpose), with a
// retention that would delete everything there, deletes nothing: the
// location's marker names another database system, or none at all. It
// says so in its BackupRetention condition and a Warning Event, without
// the other cluster's name.
func TestRetentionPrunesOnlyItsOwnLocation(t *testing.T) {
	for _, tc := range []struct {
		name, marker, want string
	}{
		{"another system's location", "7400000000000000999", "holds the WAL and backups of database system 7400000000000000999"},
		{"a location without a marker", "", "has no " + walarchive.MarkerKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s3 := testenv.StartS3(t, testenv.S3Options{})
			ns := newNamespace(t)
			_, spec, store := s3Location(t, s3, ns, ns+"/victim")
			now := time.Now().UTC().Truncate(time.Second)
			backupClock.SetTime(now)
			// The victim's backups, all far outside the attacker's window.
			putStoredBackup(t, store, "pg-a", now.Add(-40*24*time.Hour), 0x01000000)
			putStoredBackup(t, store, "pg-b", now.Add(-30*24*time.Hour), 0x03000000)
			markBackupCompleted(t, ns, "pg-a", now.Add(-40*24*time.Hour), spec)
			markBackupCompleted(t, ns, "pg-b", now.Add(-30*24*time.Hour), spec)
			if tc.marker != "" {
				putMarker(t, store, tc.marker)
			}
			before := storeKeys(t, store)

			cluster := newBackupCluster(ns)
			cluster.Spec.Backup.ObjectStore = spec
			cluster.Spec.Backup.Retention = "1d"
			create(t, cluster)
			key := client.ObjectKeyFromObject(cluster)
			reportSystemIdentifier(t, key)
			var msg string
			clusterWhen(t, key, func(c *tuskv1alpha1.PostgresCluster) error {
				msg = retentionMessage(c)
				return condition(c, tuskv1alpha1.ConditionBackupRetention, metav1.ConditionFalse, tuskv1alpha1.ReasonRetentionRefused)
			})
			if !strings.Contains(msg, tc.want) || strings.Contains(msg, "victim/pg") {
				t.Errorf("condition message %q, want %q and not the other cluster's name", msg, tc.want)
			}
			e := waitForEvent(t, ns, tuskv1alpha1.ReasonRetentionRefused, tc.want)
			if e.Type != corev1.EventTypeWarning {
				t.Errorf("Event %s %q, want a Warning", e.Type, e.Note)
			}
			if got := storeKeys(t, store); !slices.Equal(got, before) {
				t.Errorf("objects after the refused retention %v, want all of %v", got, before)
			}
			backupsAre(t, ns, "pg-a", "pg-b")
		})
	}
}

// retentionMessage is the BackupRetention condition's message.
func retentionMessage(c *tuskv1alpha1.PostgresCluster) string {
	if cond := meta.FindStatusCondition(c.Status.Conditions, tuskv1alpha1.ConditionBackupRetention); cond != nil {
		return cond.Message
	}
	return ""
}

func findCondition(c *tuskv1alpha1.PostgresCluster, typ string) *metav1.Condition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == typ {
			return &c.Status.Conditions[i]
		}
	}
	return &metav1.Condition{}
}

// TestRetentionReachesNoInternalAddress: retention never connects to a
// link-local (cloud metadata) endpoint, and status tells a failure at the
// store by its kind, never by its cause, which would let whoever writes
// the spec probe the operator's network through status.
func TestRetentionReachesNoInternalAddress(t *testing.T) {
	for _, tc := range []struct {
		endpoint, want, never string
	}{
		{"http://169.254.169.254", "endpoint refused", ""},
		// A closed port on loopback (which these tests allow): refused
		// at once, and status must not say so.
		{"http://127.0.0.1:1", "endpoint unreachable", "connection refused"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			ns := newNamespace(t)
			create(t, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
				Data:       map[string][]byte{"ACCESS_KEY_ID": []byte("id"), "SECRET_ACCESS_KEY": []byte("secret")},
			})
			cluster := newBackupCluster(ns)
			cluster.Spec.Backup.ObjectStore.Endpoint = tc.endpoint
			cluster.Spec.Backup.ObjectStore.CASecret = nil
			cluster.Spec.Backup.Retention = "7d"
			create(t, cluster)
			reportSystemIdentifier(t, client.ObjectKeyFromObject(cluster))
			c := clusterWhen(t, client.ObjectKeyFromObject(cluster), func(c *tuskv1alpha1.PostgresCluster) error {
				return condition(c, tuskv1alpha1.ConditionBackupRetention, metav1.ConditionFalse, tuskv1alpha1.ReasonRetentionFailed)
			})
			msg := findCondition(c, tuskv1alpha1.ConditionBackupRetention).Message
			if !strings.Contains(msg, tc.want) || !strings.Contains(msg, tc.endpoint) || (tc.never != "" && strings.Contains(msg, tc.never)) {
				t.Errorf("condition message %q, want %q and the endpoint, never %q", msg, tc.want, tc.never)
			}
		})
	}
}

// drippingStore is an S3 endpoint, as whoever writes a cluster's spec may
// choose one, that never finishes an answer: a HEAD waits, a GET sends its
// headers and then a byte a second.
func drippingStore(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Length", "100000")
		w.WriteHeader(http.StatusOK)
		for {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Second):
			}
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

// TestRetentionStopsAtItsDeadline: an object store that drips its answers
// holds a retention run only until the run's deadline; the condition says
// so, without the endpoint's answer.
func TestRetentionStopsAtItsDeadline(t *testing.T) {
	ns := newNamespace(t)
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
		Data:       map[string][]byte{"ACCESS_KEY_ID": []byte("id"), "SECRET_ACCESS_KEY": []byte("secret")},
	})
	cluster := newBackupCluster(ns)
	cluster.Spec.Backup.ObjectStore.Endpoint = drippingStore(t)
	cluster.Spec.Backup.ObjectStore.CASecret = nil
	cluster.Spec.Backup.Retention = "7d"
	create(t, cluster)
	start := time.Now()
	reportSystemIdentifier(t, client.ObjectKeyFromObject(cluster))
	c := clusterWhen(t, client.ObjectKeyFromObject(cluster), func(c *tuskv1alpha1.PostgresCluster) error {
		return condition(c, tuskv1alpha1.ConditionBackupRetention, metav1.ConditionFalse, tuskv1alpha1.ReasonRetentionFailed)
	})
	msg := retentionMessage(c)
	if want := "retention stopped at its deadline after " + retentionTestTimeout.String(); !strings.Contains(msg, want) || strings.Contains(msg, "xxx") {
		t.Errorf("condition message %q, want one saying %q", msg, want)
	}
	if took := time.Since(start); took < retentionTestTimeout {
		t.Errorf("retention failed after %s, before its deadline %s: not the deadline that stopped it", took, retentionTestTimeout)
	}
}
