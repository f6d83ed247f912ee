//go:build integration

package retention

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/postgres"
	"tusk.dev/tusk/internal/testenv"
	"tusk.dev/tusk/internal/walarchive"
)

// storeAt is a Store on the test server under path.
func storeAt(t testing.TB, s3 *testenv.S3, path string) *objectstore.Store {
	t.Helper()
	store, err := objectstore.New(objectstore.Config{
		Endpoint: s3.Endpoint, Bucket: s3.Bucket, Path: path, Region: "us-east-1",
		AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey, CAFile: s3.CAFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

func put(t testing.TB, store *objectstore.Store, key string, data []byte) {
	t.Helper()
	if err := store.Put(context.Background(), key, bytes.NewReader(data), nil); err != nil {
		t.Fatal(err)
	}
}

// putBackup writes a backup as tusk instance backup leaves it: the data,
// then the record, which ends endDaysAgo days before the real now (the
// store dates incomplete directories by the real clock).
func putBackup(t *testing.T, store *objectstore.Store, name string, endDaysAgo int, timeline uint32, beginLSN postgres.LSN) {
	t.Helper()
	put(t, store, basebackup.DataKey(name), []byte("tar"))
	beginWAL, err := postgres.WALFileName(timeline, beginLSN, postgres.DefaultWALSegmentSize)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().UTC().Add(-time.Duration(endDaysAgo) * 24 * time.Hour)
	rec := basebackup.Record{
		Format: basebackup.RecordFormat, Name: name, BeginLSN: beginLSN, EndLSN: beginLSN + 0x100,
		Timeline: timeline, BeginWAL: beginWAL, WALSegmentSize: postgres.DefaultWALSegmentSize,
		StartTime: end.Add(-time.Minute), EndTime: end, Object: basebackup.DataObject, Compression: "zstd",
	}
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	put(t, store, basebackup.RecordKey(name), data)
}

// putWAL archives files by name where the archive puts them.
func putWAL(t testing.TB, store *objectstore.Store, names ...string) {
	t.Helper()
	for _, name := range names {
		key, err := walarchive.Key(name)
		if err != nil {
			t.Fatal(err)
		}
		put(t, store, key, []byte("wal"))
	}
}

func keys(t *testing.T, store *objectstore.Store) []string {
	t.Helper()
	var ks []string
	for obj, err := range store.List(context.Background(), "") {
		if err != nil {
			t.Fatal(err)
		}
		ks = append(ks, obj.Key)
	}
	return ks
}

// TestPruneAgainstS3 puts backups and WAL into a real S3 server, runs
// Load, Decide and Prune with a one-week window, and checks exactly which
// objects remain.
func TestPruneAgainstS3(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	// Segment numbers with 16 MiB segments: LSN 0/A000000 is segment 0xA.
	tests := []struct {
		name    string
		setup   func(t *testing.T, store *objectstore.Store)
		remain  []string
		deleted []string // backups Prune reports
		wal     int
	}{{
		name: "old backups and their WAL go, the newest before the window and the history files stay",
		setup: func(t *testing.T, store *objectstore.Store) {
			putBackup(t, store, "b-20", 20, 1, 0x0A000028) // segment 0A
			putBackup(t, store, "b-10", 10, 1, 0x14000028) // segment 14: the newest before the window
			putBackup(t, store, "b-2", 2, 2, 0x1E000028)   // segment 1E on timeline 2
			putWAL(t, store, "000000010000000000000009", "00000001000000000000000A", "000000010000000000000013",
				"000000010000000000000014", "000000010000000000000018.partial", "00000002.history",
				"000000010000000000000010.00000028.backup", "000000020000000000000018", "00000002000000000000001E",
				"000000030000000000000001")
		},
		remain: []string{
			"base/b-10/backup.json", "base/b-10/base.tar.zst", "base/b-2/backup.json", "base/b-2/base.tar.zst",
			"wal/0000000100000000/000000010000000000000014.zst",
			"wal/0000000100000000/000000010000000000000018.partial.zst",
			"wal/00000002.history.zst",
			"wal/0000000200000000/000000020000000000000018.zst",
			"wal/0000000200000000/00000002000000000000001E.zst",
			"wal/0000000300000000/000000030000000000000001.zst", // a timeline newer than any kept backup
		},
		deleted: []string{"b-20"},
		wal:     4,
	}, {
		name: "one backup, long expired: kept with its WAL, older WAL goes",
		setup: func(t *testing.T, store *objectstore.Store) {
			putBackup(t, store, "only", 30, 1, 0x05000000)
			putWAL(t, store, "000000010000000000000004", "000000010000000000000005")
		},
		remain: []string{"base/only/backup.json", "base/only/base.tar.zst", "wal/0000000100000000/000000010000000000000005.zst"},
		wal:    1,
	}, {
		name: "no complete backup: nothing deleted, not even WAL",
		setup: func(t *testing.T, store *objectstore.Store) {
			put(t, store, basebackup.DataKey("interrupted"), []byte("tar"))
			putWAL(t, store, "000000010000000000000001")
		},
		remain: []string{"base/interrupted/base.tar.zst", "wal/0000000100000000/000000010000000000000001.zst"},
	}, {
		name: "a recent attempt without its record (running or failed) is left alone",
		setup: func(t *testing.T, store *objectstore.Store) {
			putBackup(t, store, "old", 20, 1, 0x01000000)
			putBackup(t, store, "mid", 10, 1, 0x01800000)
			putBackup(t, store, "new", 1, 1, 0x02000000)
			put(t, store, basebackup.DataKey("running"), []byte("tar"))
		},
		remain: []string{"base/mid/backup.json", "base/mid/base.tar.zst", "base/new/backup.json", "base/new/base.tar.zst",
			"base/running/base.tar.zst"},
		deleted: []string{"old"},
	}, {
		name: "an unreadable record: kept, and all WAL kept",
		setup: func(t *testing.T, store *objectstore.Store) {
			putBackup(t, store, "old", 20, 1, 0x01000000)
			putBackup(t, store, "mid", 10, 1, 0x01800000)
			putBackup(t, store, "new", 1, 1, 0x02000000)
			put(t, store, basebackup.RecordKey("future"), []byte(`{"format": 2}`))
			putWAL(t, store, "000000010000000000000000")
		},
		remain: []string{"base/future/backup.json", "base/mid/backup.json", "base/mid/base.tar.zst",
			"base/new/backup.json", "base/new/base.tar.zst",
			"wal/0000000100000000/000000010000000000000000.zst"},
		deleted: []string{"old"},
	}}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			store := storeAt(t, s3, "case"+string(rune('a'+i)))
			tt.setup(t, store)
			backups, err := Load(ctx, store)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Prune(ctx, store, Decide(backups, time.Now(), 7*24*time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if got := keys(t, store); !slices.Equal(got, tt.remain) {
				t.Errorf("objects left:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.remain, "\n  "))
			}
			if !slices.Equal(res.Backups, tt.deleted) || res.WALObjects != tt.wal {
				t.Errorf("pruned backups %v and %d WAL objects, want %v and %d", res.Backups, res.WALObjects, tt.deleted, tt.wal)
			}
		})
	}
}

// TestPruneStopsAtTheFirstStoreError deletes nothing once the store
// refuses: with a wrong secret, Load fails; a plan run against that store
// fails at its first deletion and leaves every object.
func TestPruneStopsAtTheFirstStoreError(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	ctx := context.Background()
	store := storeAt(t, s3, "c")
	putBackup(t, store, "a", 20, 1, 0x01000000)
	putBackup(t, store, "a2", 10, 1, 0x01800000)
	putBackup(t, store, "b", 1, 1, 0x02000000)
	putWAL(t, store, "000000010000000000000000")
	before := keys(t, store)
	bad, err := objectstore.New(objectstore.Config{
		Endpoint: s3.Endpoint, Bucket: s3.Bucket, Path: "c", Region: "us-east-1",
		AccessKeyID: s3.AccessKey, SecretAccessKey: "wrong", CAFile: s3.CAFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Load(ctx, bad); objectstore.Classify(err) != objectstore.KindCredentials {
		t.Fatalf("Load with a wrong secret: %v, want a credentials error", err)
	}
	backups, err := Load(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	plan := Decide(backups, time.Now(), 7*24*time.Hour)
	if !slices.Equal(plan.Delete, []string{"a"}) || plan.WAL == nil {
		t.Fatalf("plan %+v, want backup a and WAL deleted", plan)
	}
	res, err := Prune(ctx, bad, plan)
	if objectstore.Classify(err) != objectstore.KindCredentials || !strings.Contains(err.Error(), `record of backup "a"`) {
		t.Fatalf("Prune with a wrong secret: %v, want a credentials error about the record of a", err)
	}
	if len(res.Backups) != 0 || res.WALObjects != 0 {
		t.Errorf("Prune reports %+v deleted after failing", res)
	}
	if got := keys(t, store); !slices.Equal(got, before) {
		t.Errorf("objects after a failed prune %v, want all of %v", got, before)
	}
}
