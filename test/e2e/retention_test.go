//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"path"
	"slices"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/postgres"
)

// testRetentionPrunes runs while cluster takes a backup every minute with
// a retention of 7 days, and its location holds the completed backups
// oldest and kept. It ages them by rewriting their end times, in the store
// and in their PostgresBackups' status, to 30 and 20 days ago: the only way
// a test has to make backups days old. The next scheduled backup's
// completion runs retention, which must then delete oldest (an older
// backup than kept, which ended before the window, is what recovering to
// the start of the window starts from), its PostgresBackup, and the WAL
// before kept's first segment, and keep kept.
func testRetentionPrunes(t *testing.T, s3 *s3Server, ns, cluster, oldest, kept string) {
	prefix := ns + "/" + cluster + "/" // the default path
	keptRecord := readBackupRecord(t, s3, prefix, kept)
	if older := walKeysBefore(s3.listKeys(t, prefix+"wal/"), keptRecord.BeginWAL); len(older) == 0 {
		t.Fatalf("no archived WAL before %s, the first segment of %s: nothing for retention to prune", keptRecord.BeginWAL, kept)
	}
	now := time.Now()
	ageBackup(t, s3, ns, prefix, oldest, now.Add(-30*24*time.Hour))
	keptEnd := ageBackup(t, s3, ns, prefix, kept, now.Add(-20*24*time.Hour))

	eventuallyEvery(t, 4*time.Minute, 2*time.Second, "retention deleting "+oldest+" and its PostgresBackup", func(ctx context.Context) (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: oldest}, &tuskv1alpha1.PostgresBackup{})
		if !apierrors.IsNotFound(err) {
			return false, client.IgnoreNotFound(err)
		}
		return len(s3.listKeys(t, prefix+basebackup.Prefix+oldest+"/")) == 0, nil
	})
	if older := walKeysBefore(s3.listKeys(t, prefix+"wal/"), keptRecord.BeginWAL); len(older) > 0 {
		t.Errorf("retention kept WAL no kept backup needs, before %s: %v", keptRecord.BeginWAL, older)
	}
	if !slices.Contains(s3.listKeys(t, prefix+basebackup.Prefix+kept+"/"), prefix+basebackup.RecordKey(kept)) {
		t.Errorf("retention deleted %s, the backup recovering to the start of the window needs", kept)
	}
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: kept}, &tuskv1alpha1.PostgresBackup{}); err != nil {
		t.Errorf("the PostgresBackup %s of the kept backup: %v", kept, err)
	}
	frp := mustGetCluster(t, ns, cluster).Status.Backup.FirstRecoverabilityPoint
	if want := keptEnd.Truncate(time.Second); frp == nil || !frp.Time.Equal(want) {
		t.Errorf("first recoverability point %v, want the end of %s, %v", frp, kept, want)
	}
}

// ageBackup sets backup name's end time to end (and its start a minute
// before), in its PostgresBackup's status first and then in its record in
// the store, so that retention never sees a stored backup aged whose
// PostgresBackup is not. It returns the end time as the record holds it.
func ageBackup(t *testing.T, s3 *s3Server, ns, prefix, name string, end time.Time) time.Time {
	t.Helper()
	end = end.UTC()
	b := &tuskv1alpha1.PostgresBackup{}
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, b); err != nil {
		t.Fatalf("reading PostgresBackup %s: %v", name, err)
	}
	b.Status.StartedAt = &metav1.Time{Time: end.Add(-time.Minute)}
	b.Status.CompletedAt = &metav1.Time{Time: end}
	if err := kube.Status().Update(context.Background(), b); err != nil {
		t.Fatalf("ageing the status of PostgresBackup %s: %v", name, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, stop := s3.forwardedClient(ctx, t)
	defer stop()
	key := prefix + basebackup.RecordKey(name)
	var rec map[string]any
	if err := json.Unmarshal(readObject(ctx, t, c, s3.Bucket, key), &rec); err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	rec["startTime"], rec["endTime"] = end.Add(-time.Minute).Format(time.RFC3339Nano), end.Format(time.RFC3339Nano)
	body, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObject(ctx, s3.Bucket, key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{ContentType: "application/json"}); err != nil {
		t.Fatalf("ageing %s: %v", key, err)
	}
	return end
}

// readBackupRecord reads backup name's record from the store.
func readBackupRecord(t *testing.T, s3 *s3Server, prefix, name string) basebackup.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, stop := s3.forwardedClient(ctx, t)
	defer stop()
	var rec basebackup.Record
	if err := json.Unmarshal(readObject(ctx, t, c, s3.Bucket, prefix+basebackup.RecordKey(name)), &rec); err != nil {
		t.Fatalf("reading the record of backup %s: %v", name, err)
	}
	return rec
}

// readObject reads the object key from bucket.
func readObject(ctx context.Context, t *testing.T, c *minio.Client, bucket, key string) []byte {
	t.Helper()
	o, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	defer func() { _ = o.Close() }()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(o); err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	return buf.Bytes()
}

// walKeysBefore are the keys of archived WAL segments, partial segments
// and backup history files (not timeline history files) whose segment,
// the start of the name, sorts before the segment first. On one
// timeline, name order is WAL order.
func walKeysBefore(keys []string, first string) []string {
	var before []string
	n := len(first)
	for _, k := range keys {
		base := path.Base(k)
		if len(base) > n && base[n] == '.' && postgres.IsWALFileName(base[:n]) && base[:n] < first {
			before = append(before, k)
		}
	}
	return before
}
