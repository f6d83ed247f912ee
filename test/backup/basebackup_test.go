//go:build integration

package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"

	"tusk.dev/tusk/internal/basebackup"
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
