//go:build integration

package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"

	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/testenv"
)

// segmentSize is PostgreSQL's default WAL segment size.
const segmentSize = 16 << 20

// fakeSegment writes a segment-sized file of random bytes below alphabet
// (8 compresses as WAL roughly does, 256 not at all), owned by the postgres
// OS user.
func fakeSegment(t testing.TB, dir, name string, seed byte, alphabet uint32) string {
	t.Helper()
	r := rand.New(rand.NewChaCha8([32]byte{seed}))
	data := make([]byte, segmentSize)
	for i := range data {
		data[i] = byte(r.Uint32() % alphabet)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	chown(t, path)
	return path
}

func sha(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// rawObject reads an object behind the code's back: its metadata and its
// decompressed content.
func rawObject(t *testing.T, s3 *testenv.S3, key string) (map[string]string, []byte) {
	t.Helper()
	ctx := context.Background()
	obj, err := s3.Client().GetObject(ctx, s3.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = obj.Close() }()
	info, err := obj.Stat()
	if err != nil {
		t.Fatalf("object %s: %v", key, err)
	}
	dec, err := zstd.NewReader(obj)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	data, err := io.ReadAll(dec)
	if err != nil {
		t.Fatalf("decompressing %s: %v", key, err)
	}
	md := map[string]string{}
	for k, v := range info.UserMetadata {
		md[strings.ToLower(k)] = v
	}
	return md, data
}

func TestArchiveIsIdempotent(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	dir := workDir(t)
	cfg := archiveConfig(t, dir, s3, nil)
	const name = "000000010000000000000001"
	seg := fakeSegment(t, dir, name, 1, 8)
	original := sha(t, seg)
	key := "orders/wal/0000000100000000/" + name + ".zst"

	if code, out := tusk(t, "instance", "wal-archive", "--config", cfg, seg); code != 0 || out != "" {
		t.Fatalf("first archive: exit %d, %q; want 0 and nothing printed", code, out)
	}
	md, data := rawObject(t, s3, key)
	if md["tusk-sha256"] != original || md["tusk-size"] != fmt.Sprint(segmentSize) || sha256Hex(data) != original {
		t.Fatalf("archived object: metadata %v, content sha256 %s; want %s", md, sha256Hex(data), original)
	}

	code, out := tusk(t, "instance", "wal-archive", "--config", cfg, seg)
	if code != 0 || !strings.Contains(out, "already archived with the same content") {
		t.Errorf("archiving the same segment again: exit %d, %q; want 0 and a notice", code, out)
	}

	fakeSegment(t, dir, name, 2, 8) // same name, other content
	code, out = tusk(t, "instance", "wal-archive", "--config", cfg, seg)
	if code != 1 || !strings.Contains(out, "refusing to archive "+name) || !strings.Contains(out, "a different file of the same name is already archived") {
		t.Errorf("archiving different content under the same name: exit %d, %q; want 1 and a refusal", code, out)
	}
	if md, _ := rawObject(t, s3, key); md["tusk-sha256"] != original {
		t.Errorf("the archived object was overwritten: metadata %v", md)
	}

	dest := filepath.Join(dir, "RECOVERYXLOG")
	if code, out := tusk(t, "instance", "wal-restore", "--config", cfg, name, dest); code != 0 {
		t.Fatalf("restore: exit %d, %s", code, out)
	}
	if got := sha(t, dest); got != original {
		t.Errorf("restored sha256 %s, want the first archived %s", got, original)
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestRestoreExitCodes checks the contract with PostgreSQL: exit 1 and
// silence for a file the archive does not have; exit 255 (which stops
// recovery rather than ending it) and a clear message for everything else,
// leaving nothing at the destination.
func TestRestoreExitCodes(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	dir := workDir(t)
	cfg := archiveConfig(t, dir, s3, nil)
	const corrupt = "000000010000000000000007"
	// An object whose content does not match its checksum: archive one
	// segment, then put another's compressed bytes under its key.
	fakeSegment(t, dir, corrupt, 7, 8)
	if code, out := tusk(t, "instance", "wal-archive", "--config", cfg, filepath.Join(dir, corrupt)); code != 0 {
		t.Fatalf("archive: exit %d, %s", code, out)
	}
	replaceContent(t, s3, "orders/wal/0000000100000000/"+corrupt+".zst")

	badConfig := func(name string, change func(*objectstore.Config)) string {
		sub := filepath.Join(dir, name)
		if err := os.Mkdir(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		chown(t, sub)
		return archiveConfig(t, sub, s3, change)
	}
	cases := []struct {
		name, config, wal string
		code              int
		says              string
	}{
		{"missing segment", cfg, "000000010000000000000009", 1, ""},
		{"missing timeline history", cfg, "00000002.history", 1, ""},
		{"checksum mismatch", cfg, corrupt, 255, "checksum mismatch"},
		{"wrong credentials", badConfig("creds", func(c *objectstore.Config) {
			c.SecretAccessKeyFile = writeFile(t, filepath.Join(dir, "wrong-secret"), "wrong")
		}), corrupt, 255, "wrong credentials"},
		{"missing bucket", badConfig("bucket", func(c *objectstore.Config) { c.Bucket = "no-such-bucket" }), corrupt, 255, "bucket does not exist"},
		{"unreachable endpoint", badConfig("endpoint", func(c *objectstore.Config) { c.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)) }), corrupt, 255, "unreachable"},
		{"no configuration", filepath.Join(dir, "none.json"), corrupt, 255, "while reading the WAL archive configuration"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dest := filepath.Join(dir, "RECOVERYXLOG")
			code, out := tusk(t, "instance", "wal-restore", "--config", tc.config, tc.wal, dest)
			if code != tc.code || (tc.says == "" && out != "") || !strings.Contains(out, tc.says) {
				t.Errorf("exit %d, output %q; want exit %d and output saying %q", code, out, tc.code, tc.says)
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if strings.Contains(e.Name(), "RECOVERYXLOG") {
					t.Errorf("left %s behind", e.Name())
				}
			}
			if tc.code == 255 && tc.config != cfg {
				// The same mistakes make archiving fail (exit 1: PostgreSQL
				// retries) with the same message.
				code, out := tusk(t, "instance", "wal-archive", "--config", tc.config, filepath.Join(dir, corrupt))
				if code != 1 || !strings.Contains(out, tc.says) {
					t.Errorf("wal-archive: exit %d, output %q; want 1 and %q", code, out, tc.says)
				}
			}
		})
	}
}

// replaceContent overwrites an object's content with another valid zstd
// stream, keeping its metadata.
func replaceContent(t *testing.T, s3 *testenv.S3, key string) {
	t.Helper()
	md, _ := rawObject(t, s3, key)
	enc, _ := zstd.NewWriter(nil)
	other := enc.EncodeAll(bytes.Repeat([]byte{1}, segmentSize), nil)
	meta := map[string]string{}
	for k, v := range md {
		meta[k] = v
	}
	_, err := s3.Client().PutObject(context.Background(), s3.Bucket, key, bytes.NewReader(other), int64(len(other)),
		minio.PutObjectOptions{UserMetadata: meta})
	if err != nil {
		t.Fatal(err)
	}
}

// TestArchiveAndRecoverWithPostgreSQL runs the commands as PostgreSQL does:
// a primary archives through archive_command, a base backup taken without
// WAL (pg_basebackup -X none) is recovered with restore_command alone, and
// the recovered database holds every row, including those written after
// the backup.
func TestArchiveAndRecoverWithPostgreSQL(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	dir := workDir(t)
	cfg := archiveConfig(t, dir, s3, nil)
	data := filepath.Join(dir, "primary")
	pgTool(t, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-N")
	primary := startPostgres(t, "primary", dir, data, map[string]string{
		"archive_mode":    "on",
		"archive_command": tuskBinary + " instance wal-archive --config " + cfg + " %p",
		// No checkpoint recycles the segment compared with its archived copy.
		"checkpoint_timeout": "1h",
	})
	conn := primary.connect()
	exec1(t, conn, "CREATE TABLE items (id int PRIMARY KEY, payload text)")
	exec1(t, conn, "INSERT INTO items SELECT g, md5(g::text) FROM generate_series(1, 10000) g")

	base := filepath.Join(dir, "restored")
	pgTool(t, "pg_basebackup", "-h", "127.0.0.1", "-p", fmt.Sprint(primary.port), "-U", "postgres",
		"-D", base, "-X", "none", "-c", "fast", "--no-sync")
	// Written after the backup: only the archive has these.
	exec1(t, conn, "INSERT INTO items SELECT g, md5(g::text) FROM generate_series(10001, 50000) g")
	exec1(t, conn, "UPDATE items SET payload = 'changed' WHERE id % 7 = 0")
	// More segments than wal-restore fetches at once (--parallel 4, the
	// default), so recovery goes through the prefetched ones.
	for i := range 5 {
		exec1(t, conn, fmt.Sprintf("INSERT INTO items SELECT g, md5(g::text) FROM generate_series(%d, %d) g", 100000*(i+1), 100000*(i+1)+20000))
		exec1(t, conn, "SELECT pg_switch_wal()")
	}
	want := tableDigest(t, conn)
	last := query1[string](t, conn, "SELECT pg_walfile_name(pg_current_wal_lsn())")
	exec1(t, conn, "SELECT pg_switch_wal()")
	waitArchived(t, conn, last)
	checkArchivedSegment(t, s3, data, last)
	primary.stop()

	writeFile(t, filepath.Join(base, "recovery.signal"), "")
	restored := startPostgres(t, "restored", dir, base, map[string]string{
		"archive_mode":    "off", // never into the source's archive
		"restore_command": tuskBinary + " instance wal-restore --config " + cfg + " %f %p",
	})
	rconn := restored.connect()
	testenv.EventuallyEvery(t, waitTimeout, 200*time.Millisecond, func(ctx context.Context) error {
		var inRecovery bool
		if err := rconn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || inRecovery {
			return fmt.Errorf("still in recovery (%w)", err)
		}
		return nil
	})
	if got := tableDigest(t, rconn); got != want {
		t.Errorf("recovered table: %s; the primary had %s", got, want)
	}
	logs := restored.logs()
	if !strings.Contains(logs, fmt.Sprintf("restored log file \"%s\" from archive", last)) {
		t.Errorf("the restored server's log does not show %s restored from the archive:\n%s", last, logs)
	}
	if n := strings.Count(logs, "from archive"); n < 7 {
		t.Errorf("the restored server restored %d files from the archive, want at least 7:\n%s", n, logs)
	}
	// The files the archive lacks (the next segment, 00000002.history)
	// are asked for, and their absence is no error; nor is the end of the
	// archive for the segments prefetched.
	if strings.Contains(logs, "Error:") || strings.Contains(logs, "warning:") {
		t.Errorf("wal-restore printed errors during a normal recovery:\n%s", logs)
	}
}

// tableDigest is the row count and a hash of every row, in order.
func tableDigest(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	return query1[string](t, conn, "SELECT count(*) || ' rows, md5 ' || md5(string_agg(id || ':' || payload, ',' ORDER BY id)) FROM items")
}

// waitArchived waits until the archiver reports segment (or a later one) archived.
func waitArchived(t *testing.T, conn *pgx.Conn, segment string) {
	t.Helper()
	testenv.EventuallyEvery(t, waitTimeout, 200*time.Millisecond, func(ctx context.Context) error {
		var archived string
		var failed int64
		if err := conn.QueryRow(ctx, "SELECT coalesce(last_archived_wal, ''), failed_count FROM pg_stat_archiver").Scan(&archived, &failed); err != nil {
			return err
		}
		if failed != 0 {
			t.Fatalf("archive_command failed %d times", failed)
		}
		if archived < segment {
			return fmt.Errorf("last archived %q, waiting for %s", archived, segment)
		}
		return nil
	})
}

// checkArchivedSegment compares an archived segment with the file in
// pg_wal: the object holds it compressed, with its checksum.
func checkArchivedSegment(t *testing.T, s3 *testenv.S3, data, segment string) {
	t.Helper()
	var keys []string
	for obj := range s3.Client().ListObjects(context.Background(), s3.Bucket, minio.ListObjectsOptions{Prefix: "orders/wal/", Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		keys = append(keys, obj.Key)
		if obj.Size >= segmentSize {
			t.Errorf("%s is %d bytes: not compressed", obj.Key, obj.Size)
		}
	}
	key := "orders/wal/" + segment[:16] + "/" + segment + ".zst"
	if !slices.Contains(keys, key) {
		t.Fatalf("%s is not in the archive: %v", key, keys)
	}
	if !slices.ContainsFunc(keys, func(k string) bool { return strings.HasSuffix(k, ".backup.zst") }) {
		t.Errorf("no backup history file in the archive: %v", keys)
	}
	md, content := rawObject(t, s3, key)
	local := sha(t, filepath.Join(data, "pg_wal", segment))
	if md["tusk-sha256"] != local || sha256Hex(content) != local {
		t.Errorf("archived %s: metadata sha256 %s, content sha256 %s; pg_wal has %s", segment, md["tusk-sha256"], sha256Hex(content), local)
	}
}
