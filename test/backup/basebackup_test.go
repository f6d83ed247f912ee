//go:build integration

package backup

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"

	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/postgres"
	"tusk.dev/tusk/internal/testenv"
)

// archivingPrimary initdbs and starts a primary whose archive_command is
// tusk wal-archive with cfg.
func archivingPrimary(t testing.TB, dir, cfg string) *server {
	t.Helper()
	data := filepath.Join(dir, "primary")
	pgTool(t, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-N")
	return startPostgres(t, "primary", dir, data, map[string]string{
		"archive_mode":       "on",
		"archive_command":    tuskBinary + " instance wal-archive --config " + cfg + " %p",
		"checkpoint_timeout": "1h",
	})
}

// takeBackup runs tusk instance backup against srv and returns its record.
func takeBackup(t testing.TB, cfg, dir string, srv *server, name string) basebackup.Record {
	t.Helper()
	code, out := tusk(t, "instance", "backup", "--config", cfg, "--name", name, "--pg-bindir", pgBinDir,
		"--connection", fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", dir, srv.port))
	if code != 0 {
		t.Fatalf("tusk instance backup: exit %d: %s", code, out)
	}
	var rec basebackup.Record
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("tusk instance backup printed %q: %v", out, err)
	}
	return rec
}

// restore runs tusk instance restore and returns its exit code and output.
func restore(t testing.TB, cfg, backup, target string, extra ...string) (int, string) {
	t.Helper()
	args := append([]string{"instance", "restore", "--config", cfg, "--backup", backup, "--target-dir", target,
		"--tusk-binary", tuskBinary}, extra...)
	return tusk(t, args...)
}

// waitPromoted waits until the server has left recovery.
func waitPromoted(t testing.TB, conn *pgx.Conn) {
	t.Helper()
	testenv.EventuallyEvery(t, waitTimeout, 200*time.Millisecond, func(ctx context.Context) error {
		var inRecovery bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || inRecovery {
			return fmt.Errorf("still in recovery (%w)", err)
		}
		return nil
	})
}

// TestBaseBackupAndPointInTimeRecovery takes a base backup with the
// command while PostgreSQL archives its WAL through wal-archive, then
// restores it twice: to a time noted between two batches of writes (only
// the rows before it come back) and to the end of the archive (all of
// them), each promoted on a new timeline.
func TestBaseBackupAndPointInTimeRecovery(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	dir := workDir(t)
	cfg := archiveConfig(t, dir, s3, nil)
	primary := archivingPrimary(t, dir, cfg)
	conn := primary.connect()
	exec1(t, conn, "CREATE TABLE items (id int PRIMARY KEY, payload text)")
	exec1(t, conn, "INSERT INTO items SELECT g, md5(g::text) FROM generate_series(1, 20000) g")

	rec := takeBackup(t, cfg, dir, primary, "first")
	checkRecord(t, s3, conn, rec)

	// After the backup: only the archive has these.
	exec1(t, conn, "INSERT INTO items SELECT g, md5(g::text) FROM generate_series(20001, 30000) g")
	atTime := tableDigest(t, conn)
	target := query1[time.Time](t, conn, "SELECT clock_timestamp()")
	exec1(t, conn, "INSERT INTO items SELECT g, md5(g::text) FROM generate_series(30001, 40000) g")
	exec1(t, conn, "UPDATE items SET payload = 'changed' WHERE id % 7 = 0")
	all := tableDigest(t, conn)
	if atTime == all {
		t.Fatal("the writes after the target time changed nothing")
	}
	last := query1[string](t, conn, "SELECT pg_walfile_name(pg_current_wal_lsn())")
	exec1(t, conn, "SELECT pg_switch_wal()")
	waitArchived(t, conn, last)

	t.Run("to a time", func(t *testing.T) {
		data := filepath.Join(dir, "pitr")
		if code, out := restore(t, cfg, "first", data, "--target-time", target.Format(time.RFC3339Nano)); code != 0 {
			t.Fatalf("restore: exit %d: %s", code, out)
		}
		// PostgreSQL's own verification agrees (-n: the WAL is in the
		// archive, not in the directory).
		pgTool(t, "pg_verifybackup", "-n", data)
		srv := startPostgres(t, "pitr", dir, data, map[string]string{"archive_mode": "off"})
		rconn := srv.connect()
		waitPromoted(t, rconn)
		if got := tableDigest(t, rconn); got != atTime {
			t.Errorf("recovered to %s: %s; the primary had %s then", target, got, atTime)
		}
		checkPromotedAfterRecovery(t, srv, "recovery stopping before commit")
	})
	t.Run("to the end of the archive", func(t *testing.T) {
		data := filepath.Join(dir, "latest")
		if code, out := restore(t, cfg, "first", data); code != 0 {
			t.Fatalf("restore: exit %d: %s", code, out)
		}
		srv := startPostgres(t, "latest", dir, data, map[string]string{"archive_mode": "off"})
		rconn := srv.connect()
		waitPromoted(t, rconn)
		if got := tableDigest(t, rconn); got != all {
			t.Errorf("recovered to the end of the archive: %s; the primary had %s", got, all)
		}
		checkPromotedAfterRecovery(t, srv, "archive recovery complete")
	})
	t.Run("bad input", func(t *testing.T) { testRefusals(t, s3, cfg, dir, primary, rec) })
	t.Run("corrupt backup", func(t *testing.T) { testCorruptBackup(t, s3, cfg, dir) })
}

// testRefusals checks that bad input is refused with a clear message
// before anything is written: no directory, no object.
func testRefusals(t *testing.T, s3 *testenv.S3, cfg, dir string, primary *server, rec basebackup.Record) {
	nonEmpty := filepath.Join(dir, "non-empty")
	if err := os.Mkdir(nonEmpty, 0o700); err != nil {
		t.Fatal(err)
	}
	chown(t, nonEmpty)
	writeFile(t, filepath.Join(nonEmpty, "keep"), "mine")
	before := baseObjects(t, s3)
	cases := []struct {
		name, backup, target string
		args                 []string
		says                 string
	}{
		{"backup that does not exist", "nope", "", nil,
			`backup "nope" does not exist at s3://tusk-test/orders/base/ (backups there: [first])`},
		{"non-empty target directory", "first", nonEmpty, nil, "refusing to restore into " + nonEmpty + ": it is not empty"},
		{"target time before the backup", "first", "", []string{"--target-time", rec.StartTime.Format(time.RFC3339Nano)},
			`recovery target time ` + rec.StartTime.Format(time.RFC3339Nano) + ` is before backup "first" ended`},
		{"target LSN before the backup", "first", "", []string{"--target-lsn", rec.BeginLSN.String()},
			`recovery target LSN ` + rec.BeginLSN.String() + ` is before backup "first" ended`},
		{"two targets", "first", "", []string{"--target-lsn", "1/0", "--target-name", "x"}, "give at most one recovery target"},
		{"target time that does not parse", "first", "", []string{"--target-time", "yesterday"}, "is not an RFC 3339 time"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target
			if target == "" {
				target = filepath.Join(dir, "never")
			}
			code, out := restore(t, cfg, tc.backup, target, tc.args...)
			if code == 0 || !strings.Contains(out, tc.says) {
				t.Errorf("exit %d, output %q; want a failure saying %q", code, out, tc.says)
			}
			if entries, err := os.ReadDir(target); tc.target == "" && !os.IsNotExist(err) {
				t.Errorf("%s was created (%v, %v)", target, entries, err)
			}
		})
	}
	if got, err := os.ReadFile(filepath.Join(nonEmpty, "keep")); err != nil || string(got) != "mine" {
		t.Errorf("the non-empty directory's file: %q, %v", got, err)
	}
	if entries, _ := os.ReadDir(nonEmpty); len(entries) != 1 {
		t.Errorf("the non-empty directory holds %d entries, not 1", len(entries))
	}
	testBackupRefusals(t, s3, cfg, dir, primary)
	if code, out := restore(t, missingBucketConfig(t, s3, dir), "first", filepath.Join(dir, "never")); code == 0 ||
		!strings.Contains(out, "bucket does not exist") {
		t.Errorf("restore from a missing bucket: exit %d, output %q", code, out)
	}
	if after := baseObjects(t, s3); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the refusals changed the stored backups: %v, then %v", before, after)
	}
}

// testBackupRefusals checks that the backup command refuses a name used
// already, an invalid name, a missing bucket and an instance with a
// tablespace besides the default, each with a clear message.
func testBackupRefusals(t *testing.T, s3 *testenv.S3, cfg, dir string, primary *server) {
	conn := primary.connect()
	space := filepath.Join(dir, "tablespace")
	if err := os.Mkdir(space, 0o700); err != nil {
		t.Fatal(err)
	}
	chown(t, space)
	exec1(t, conn, "CREATE TABLESPACE extra LOCATION '"+space+"'")
	defer exec1(t, conn, "DROP TABLESPACE extra")
	conninfo := fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", dir, primary.port)
	for _, tc := range []struct{ name, config, says string }{
		{"first", cfg, `refusing to take backup "first": s3://tusk-test/orders/base/first/`},
		{"../escape", cfg, `backup name "../escape" is not valid`},
		{"second", missingBucketConfig(t, s3, dir), "bucket does not exist"},
		{"second", cfg, "the instance has tablespaces besides the default (extra): base backups of other tablespaces are not supported"},
	} {
		code, out := tusk(t, "instance", "backup", "--config", tc.config, "--name", tc.name, "--pg-bindir", pgBinDir, "--connection", conninfo)
		if code == 0 || !strings.Contains(out, tc.says) {
			t.Errorf("backup %q: exit %d, output %q; want a failure saying %q", tc.name, code, out, tc.says)
		}
	}
}

// missingBucketConfig is the archive configuration with a bucket that does
// not exist.
func missingBucketConfig(t *testing.T, s3 *testenv.S3, dir string) string {
	t.Helper()
	sub := filepath.Join(dir, "missing-bucket")
	if _, err := os.Stat(sub); err == nil {
		return filepath.Join(sub, "archive-"+cluster+".json")
	}
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	chown(t, sub)
	return archiveConfig(t, sub, s3, func(c *objectstore.Config) { c.Bucket = "no-such-bucket" })
}

// baseObjects lists the backups' objects with their sizes and ETags.
func baseObjects(t *testing.T, s3 *testenv.S3) []string {
	t.Helper()
	var objs []string
	for obj := range s3.Client().ListObjects(context.Background(), s3.Bucket, minio.ListObjectsOptions{Prefix: "orders/base/", Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		objs = append(objs, fmt.Sprintf("%s %d %s", obj.Key, obj.Size, obj.ETag))
	}
	return objs
}

// testCorruptBackup stores a copy of the backup with one file's content
// changed (same size) and checks that restoring it fails on the manifest's
// checksum and leaves no directory.
func testCorruptBackup(t *testing.T, s3 *testenv.S3, cfg, dir string) {
	ctx := context.Background()
	copyObject(t, s3, "orders/base/first/base.tar.zst", "orders/base/corrupt/base.tar.zst", func(name string, content []byte) []byte {
		if name == "PG_VERSION" {
			return []byte(strings.Replace(string(content), "1", "9", 1))
		}
		return content
	})
	obj, err := s3.Client().GetObject(ctx, s3.Bucket, "orders/base/first/backup.json", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.NewDecoder(obj).Decode(&rec); err != nil {
		t.Fatal(err)
	}
	rec["name"] = "corrupt"
	data, _ := json.Marshal(rec)
	if _, err := s3.Client().PutObject(ctx, s3.Bucket, "orders/base/corrupt/backup.json", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "from-corrupt")
	code, out := restore(t, cfg, "corrupt", target)
	if code == 0 || !strings.Contains(out, "backup verification failed: PG_VERSION has checksum") {
		t.Errorf("restoring a corrupt backup: exit %d, %q; want a verification failure naming PG_VERSION", code, out)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("the failed restore left %s behind (%v)", target, err)
	}
}

// copyObject copies a backup's tar stream from one key to another,
// changing the files' content with change.
func copyObject(t *testing.T, s3 *testenv.S3, from, to string, change func(string, []byte) []byte) {
	t.Helper()
	ctx := context.Background()
	obj, err := s3.Client().GetObject(ctx, s3.Bucket, from, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = obj.Close() }()
	dec, err := zstd.NewReader(obj)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	var buf bytes.Buffer
	enc, _ := zstd.NewWriter(&buf)
	tr, tw := tar.NewReader(dec), tar.NewWriter(enc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		content, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		content = change(hdr.Name, content)
		hdr.Size = int64(len(content))
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(content); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s3.Client().PutObject(ctx, s3.Bucket, to, &buf, int64(buf.Len()), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkRecord compares what the backup recorded with the server and the
// store.
func checkRecord(t *testing.T, s3 *testenv.S3, conn *pgx.Conn, rec basebackup.Record) {
	t.Helper()
	if rec.Name != "first" || rec.Timeline != 1 || rec.BeginLSN == 0 || rec.EndLSN <= rec.BeginLSN {
		t.Errorf("record: name %q, timeline %d, LSNs %s..%s; want first, 1 and a range", rec.Name, rec.Timeline, rec.BeginLSN, rec.EndLSN)
	}
	if now, err := postgres.ParseLSN(query1[string](t, conn, "SELECT pg_current_wal_lsn()::text")); err != nil || rec.EndLSN > now {
		t.Errorf("record's end LSN %s is past the server's current %s (%v)", rec.EndLSN, now, err)
	}
	sysid := query1[string](t, conn, "SELECT system_identifier::text FROM pg_control_system()")
	version := query1[int](t, conn, "SELECT current_setting('server_version_num')::int")
	if rec.SystemIdentifier != sysid || rec.PostgreSQLVersionNum != version || rec.PostgreSQLVersion == "" {
		t.Errorf("record: system identifier %s, version %d (%q); the server has %s, %d", rec.SystemIdentifier,
			rec.PostgreSQLVersionNum, rec.PostgreSQLVersion, sysid, version)
	}
	if rec.EndTime.Before(rec.StartTime) || time.Since(rec.EndTime) > waitTimeout || rec.Files < 100 ||
		len(rec.ManifestChecksum) != 64 || rec.BeginWAL[:8] != "00000001" {
		t.Errorf("record: times %s..%s, %d files, manifest checksum %q, begin WAL %s", rec.StartTime, rec.EndTime,
			rec.Files, rec.ManifestChecksum, rec.BeginWAL)
	}
	info, err := s3.Client().StatObject(context.Background(), s3.Bucket, "orders/base/first/base.tar.zst", minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != rec.CompressedSize || rec.CompressedSize >= rec.Size || rec.Size < 20<<20 {
		t.Errorf("stored object is %d bytes; the record says %d compressed, %d uncompressed", info.Size, rec.CompressedSize, rec.Size)
	}
}

// checkPromotedAfterRecovery checks the server's log: recovery ended as
// expected and the server chose a new timeline.
func checkPromotedAfterRecovery(t *testing.T, srv *server, ended string) {
	t.Helper()
	logs := srv.logs()
	if !strings.Contains(logs, ended) || !strings.Contains(logs, "selected new timeline ID: 2") {
		t.Errorf("the log does not show %q and a new timeline:\n%s", ended, logs)
	}
	if strings.Contains(logs, "Error:") {
		t.Errorf("wal-restore printed errors during recovery:\n%s", logs)
	}
}
