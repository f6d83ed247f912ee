//go:build integration

package backup

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"

	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/testenv"
)

// fakePGWAL makes dir/pg_wal with archive_status, as PostgreSQL lays it out.
func fakePGWAL(t *testing.T, dir string) string {
	t.Helper()
	walDir := filepath.Join(dir, "pg_wal")
	for _, d := range []string{walDir, filepath.Join(walDir, "archive_status")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		chown(t, d)
	}
	return walDir
}

// markReady writes the status file PostgreSQL writes for a file to archive.
func markReady(t *testing.T, walDir, name string) {
	t.Helper()
	writeFile(t, filepath.Join(walDir, "archive_status", name+".ready"), "")
}

func walKey(name string) string {
	if strings.HasSuffix(name, ".history") {
		return cluster + "/wal/" + name + ".zst"
	}
	return cluster + "/wal/" + name[:16] + "/" + name + ".zst"
}

func objectExists(t *testing.T, s3 *testenv.S3, key string) bool {
	t.Helper()
	_, err := s3.Client().StatObject(context.Background(), s3.Bucket, key, minio.StatObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code != "NoSuchKey" {
		t.Fatal(err)
	}
	return err == nil
}

// TestArchiveAhead: a wal-archive call for one segment also archives the
// next ready segments (only those, at most --parallel in all), and the
// later calls for them succeed without the store, but only for the same
// content and location.
func TestArchiveAhead(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	dir := workDir(t)
	cfg := archiveConfig(t, dir, s3, nil)
	walDir := fakePGWAL(t, dir)
	names := []string{
		"0000000100000000000000FD", "0000000100000000000000FE", "0000000100000000000000FF",
		"000000010000000100000000", "000000010000000100000001", "000000010000000100000002",
	}
	sums := map[string]string{}
	for i, n := range names {
		sums[n] = sha(t, fakeSegment(t, walDir, n, byte(10+i), 8))
		markReady(t, walDir, n)
	}
	writeFile(t, filepath.Join(walDir, "00000002.history"), "1\t0/FF000000\tno recovery target specified\n")
	markReady(t, walDir, "00000002.history")

	code, out := tusk(t, "instance", "wal-archive", "--config", cfg, "--parallel", "4", filepath.Join(walDir, names[0]))
	if code != 0 || out != "" {
		t.Fatalf("wal-archive %s: exit %d, %q; want 0 and nothing printed", names[0], code, out)
	}
	// The requested one and the next three, across the log boundary.
	for i, n := range names {
		if got, want := objectExists(t, s3, walKey(n)), i < 4; got != want {
			t.Errorf("%s archived: %v, want %v", n, got, want)
		}
		if i < 4 {
			if md, data := rawObject(t, s3, walKey(n)); md["tusk-sha256"] != sums[n] || sha256Hex(data) != sums[n] {
				t.Errorf("%s: metadata %v, content sha256 %s; want %s", n, md, sha256Hex(data), sums[n])
			}
		}
	}
	if objectExists(t, s3, walKey("00000002.history")) {
		t.Error("a timeline history file was archived ahead")
	}
	records, _ := os.ReadDir(filepath.Join(walDir, "tusk-spool", "archived"))
	if len(records) != 3 {
		t.Errorf("spool records: %v, want the 3 segments archived ahead", records)
	}
	// PostgreSQL marks what it archived done.
	done := func(n string) {
		if err := os.Rename(filepath.Join(walDir, "archive_status", n+".ready"), filepath.Join(walDir, "archive_status", n+".done")); err != nil {
			t.Fatal(err)
		}
	}
	done(names[0])

	t.Run("a recorded segment needs no store", func(t *testing.T) {
		// Credentials that cannot even read: the call must not use the store.
		noAccess := otherConfig(t, dir, s3, "noaccess", func(c *objectstore.Config) {
			c.SecretAccessKeyFile = writeFile(t, filepath.Join(dir, "wrong-secret"), "wrong")
		})
		code, out := tusk(t, "instance", "wal-archive", "--config", noAccess, "--parallel", "1", filepath.Join(walDir, names[1]))
		if code != 0 || out != "" {
			t.Fatalf("wal-archive %s: exit %d, %q; want 0 from the record, quietly", names[1], code, out)
		}
		done(names[1])
		// The record is used once.
		code, out = tusk(t, "instance", "wal-archive", "--config", noAccess, "--parallel", "1", filepath.Join(walDir, names[1]))
		if code != 1 || !strings.Contains(out, "wrong credentials") {
			t.Errorf("wal-archive %s again without access: exit %d, %q; want 1 (the record was used up)", names[1], code, out)
		}
	})

	t.Run("different content under a recorded name fails", func(t *testing.T) {
		fakeSegment(t, walDir, names[2], 99, 8)
		code, out := tusk(t, "instance", "wal-archive", "--config", cfg, "--parallel", "1", filepath.Join(walDir, names[2]))
		if code != 1 || !strings.Contains(out, "a different file of the same name is already archived") {
			t.Errorf("wal-archive %s changed: exit %d, %q; want 1 and a refusal", names[2], code, out)
		}
		if md, _ := rawObject(t, s3, walKey(names[2])); md["tusk-sha256"] != sums[names[2]] {
			t.Errorf("the archived %s was overwritten: %v", names[2], md)
		}
	})

	t.Run("a record is for its location only", func(t *testing.T) {
		other := otherConfig(t, dir, s3, "other", func(c *objectstore.Config) { c.Path = "elsewhere" })
		code, out := tusk(t, "instance", "wal-archive", "--config", other, "--parallel", "1", filepath.Join(walDir, names[3]))
		if code != 0 {
			t.Fatalf("wal-archive %s to another location: exit %d, %q; want 0 and an upload", names[3], code, out)
		}
		if !objectExists(t, s3, "elsewhere/wal/"+names[3][:16]+"/"+names[3]+".zst") {
			t.Errorf("%s was not uploaded to the other location", names[3])
		}
	})

	t.Run("a failure ahead only warns", func(t *testing.T) {
		// Unreadable for the command: archiving it ahead fails.
		if err := os.Chmod(filepath.Join(walDir, names[5]), 0); err != nil {
			t.Fatal(err)
		}
		code, out := tusk(t, "instance", "wal-archive", "--config", cfg, "--parallel", "4", filepath.Join(walDir, names[4]))
		if code != 0 || !strings.Contains(out, "warning: archiving "+names[5]+" ahead failed") {
			t.Errorf("wal-archive %s: exit %d, %q; want 0 and a warning about %s", names[4], code, out, names[5])
		}
		if !objectExists(t, s3, walKey(names[4])) || objectExists(t, s3, walKey(names[5])) {
			t.Errorf("want %s archived and %s not", names[4], names[5])
		}
		code, out = tusk(t, "instance", "wal-archive", "--config", cfg, "--parallel", "4", filepath.Join(walDir, names[5]))
		if code != 1 {
			t.Errorf("wal-archive of the unreadable %s: exit %d, %q; want 1", names[5], code, out)
		}
	})
}

// otherConfig writes a configuration in its own subdirectory of dir.
func otherConfig(t *testing.T, dir string, s3 *testenv.S3, name string, change func(*objectstore.Config)) string {
	t.Helper()
	sub := filepath.Join(dir, name)
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	chown(t, sub)
	return archiveConfig(t, sub, s3, change)
}

// TestRestorePrefetch: a wal-restore call fetches the next segments of the
// timeline into the spool; later calls take them from there, but only while
// the archive still stores the same checksum.
func TestRestorePrefetch(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	dir := workDir(t)
	cfg := archiveConfig(t, dir, s3, nil)
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o700); err != nil {
		t.Fatal(err)
	}
	chown(t, src)
	names := []string{"0000000100000000000000FE", "0000000100000000000000FF", "000000010000000100000000"}
	sums := map[string]string{}
	for i, n := range names {
		sums[n] = sha(t, fakeSegment(t, src, n, byte(20+i), 8))
		if code, out := tusk(t, "instance", "wal-archive", "--config", cfg, "--parallel", "1", filepath.Join(src, n)); code != 0 {
			t.Fatalf("wal-archive %s: exit %d, %s", n, code, out)
		}
	}
	walDir := fakePGWAL(t, filepath.Join(dir))
	dest := filepath.Join(walDir, "RECOVERYXLOG")
	spool := filepath.Join(walDir, "tusk-spool", "prefetch")

	// The next three are asked for: two are there, the third is past the
	// end of the archive, which is no error.
	code, out := tusk(t, "instance", "wal-restore", "--config", cfg, "--parallel", "4", names[0], dest)
	if code != 0 || out != "" {
		t.Fatalf("wal-restore %s: exit %d, %q; want 0 and nothing printed", names[0], code, out)
	}
	if got := sha(t, dest); got != sums[names[0]] {
		t.Errorf("restored %s: sha256 %s, want %s", names[0], got, sums[names[0]])
	}
	spooled, _ := os.ReadDir(spool)
	var got []string
	for _, e := range spooled {
		got = append(got, e.Name())
	}
	want := []string{names[1] + "." + sums[names[1]], names[2] + "." + sums[names[2]]}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("spool holds %v, want %v", got, want)
	}

	t.Run("served from the spool", func(t *testing.T) {
		// The stored bytes no longer match their checksum: a download would
		// fail, the verified prefetched copy does not.
		replaceContent(t, s3, walKey(names[1]))
		code, out := tusk(t, "instance", "wal-restore", "--config", cfg, "--parallel", "4", names[1], dest)
		if code != 0 || out != "" {
			t.Fatalf("wal-restore %s: exit %d, %q; want 0 from the spool", names[1], code, out)
		}
		if got := sha(t, dest); got != sums[names[1]] {
			t.Errorf("restored %s: sha256 %s, want %s", names[1], got, sums[names[1]])
		}
		if _, err := os.Stat(filepath.Join(spool, want[0])); !os.IsNotExist(err) {
			t.Errorf("the spool still holds %s (%v)", want[0], err)
		}
	})

	t.Run("not served when the archive changed", func(t *testing.T) {
		// Another content with its own checksum under the same name (as
		// a different location would hold): the spool's copy is stale.
		other := bytes.Repeat([]byte{7}, segmentSize)
		putSegment(t, s3, walKey(names[2]), other)
		code, out := tusk(t, "instance", "wal-restore", "--config", cfg, "--parallel", "4", names[2], dest)
		if code != 0 {
			t.Fatalf("wal-restore %s: exit %d, %q", names[2], code, out)
		}
		if got := sha(t, dest); got != sha256Hex(other) {
			t.Errorf("restored %s: sha256 %s, want the archive's current %s (not the prefetched %s)", names[2], got, sha256Hex(other), sums[names[2]])
		}
	})

	t.Run("history files are not prefetched, and missing ones exit 1", func(t *testing.T) {
		code, out := tusk(t, "instance", "wal-restore", "--config", cfg, "--parallel", "4", "00000002.history", dest)
		if code != 1 || out != "" {
			t.Errorf("wal-restore 00000002.history: exit %d, %q; want 1 and nothing printed", code, out)
		}
	})
}

// putSegment stores content under key as wal-archive would, behind its back.
func putSegment(t *testing.T, s3 *testenv.S3, key string, content []byte) {
	t.Helper()
	enc, _ := zstd.NewWriter(nil)
	compressed := enc.EncodeAll(content, nil)
	meta := map[string]string{"tusk-sha256": sha256Hex(content), "tusk-size": "16777216", "tusk-compression": "zstd"}
	if _, err := s3.Client().PutObject(context.Background(), s3.Bucket, key, bytes.NewReader(compressed), int64(len(compressed)),
		minio.PutObjectOptions{UserMetadata: meta}); err != nil {
		t.Fatal(err)
	}
}
