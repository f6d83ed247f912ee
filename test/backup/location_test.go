//go:build integration

package backup

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/testenv"
	"tusk.dev/tusk/internal/walarchive"
)

// TestLocationBelongsToOneDatabase: the first database system to archive
// to a location claims it with a marker; another one (a second cluster
// given the same path, a cluster re-created by initdb over an old
// location) archives nothing there and is told why; the first one, and a
// new archiver of the same system (another instance, a recovered copy), go
// on. A location archived to before markers existed is judged by its
// backups' records.
func TestLocationBelongsToOneDatabase(t *testing.T) {
	ctx := context.Background()
	s3 := testenv.StartS3(t, testenv.S3Options{})
	dir := workDir(t)
	archiver := func(path, systemID string) walarchive.Archiver {
		t.Helper()
		a, err := walarchive.NewArchiver(walarchive.Config{Cluster: cluster, SystemIdentifier: systemID, ObjectStore: objectstore.Config{
			Endpoint: s3.Endpoint, Bucket: s3.Bucket, Region: "us-east-1", Path: path,
			AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey,
		}})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	root, err := objectstore.New(objectstore.Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Region: "us-east-1", AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	exists := func(key string) bool {
		t.Helper()
		ok, err := root.Exists(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	seg1 := fakeSegment(t, dir, "000000010000000000000001", 1, 8)
	seg2 := fakeSegment(t, dir, "000000010000000000000002", 2, 8)

	first := archiver("shared", "7000000000000000001")
	if _, err := first.Archive(ctx, seg1); err != nil {
		t.Fatalf("the first database archiving to an empty location: %v", err)
	}
	if !exists("shared/" + walarchive.MarkerKey) {
		t.Fatal("archiving wrote no location marker")
	}

	other := archiver("shared", "7000000000000000002")
	_, err = other.Archive(ctx, seg2)
	if !errors.Is(err, walarchive.ErrLocationTaken) || !strings.Contains(err.Error(), "7000000000000000001") ||
		!strings.Contains(err.Error(), "spec.backup.objectStore.path") {
		t.Fatalf("another database archiving to the location: %v, want it refused naming the owner and the field to change", err)
	}
	key, _ := walarchive.Key("000000010000000000000002")
	if exists("shared/" + key) {
		t.Fatal("the refused database's segment is in the location")
	}
	if err := other.Claim(ctx); !errors.Is(err, walarchive.ErrLocationTaken) {
		t.Fatalf("a refused claim asked again: %v, want it refused again", err)
	}

	for name, a := range map[string]walarchive.Archiver{"the first archiver": first, "another archiver of the same system": archiver("shared", "7000000000000000001")} {
		if _, err := a.Archive(ctx, seg2); err != nil {
			t.Errorf("%s, after the refusal: %v", name, err)
		}
	}

	// A location without a marker whose backup names another system.
	store := archiver("older", "").Store
	putRecord(t, store, "pg-20260101", "7000000000000000003")
	if _, err := archiver("older", "7000000000000000001").Archive(ctx, seg1); !errors.Is(err, walarchive.ErrLocationTaken) ||
		!strings.Contains(err.Error(), "backup pg-20260101") {
		t.Fatalf("archiving to a location whose backup is another system's: %v, want it refused naming the backup", err)
	}
	if _, err := archiver("older", "7000000000000000003").Archive(ctx, seg1); err != nil {
		t.Fatalf("the system of the location's backups archiving there: %v", err)
	}
}

// putRecord stores a completed backup's record, as an older Tusk left it.
func putRecord(t *testing.T, store *objectstore.Store, name, systemID string) {
	t.Helper()
	rec := basebackup.Record{Format: basebackup.RecordFormat, Name: name, Compression: "zstd", SystemIdentifier: systemID, EndTime: time.Now().UTC()}
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.PutSized(context.Background(), basebackup.RecordKey(name), data, nil); err != nil {
		t.Fatal(err)
	}
}
