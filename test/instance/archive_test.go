//go:build integration

package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
	"tusk.dev/tusk/internal/walarchive"
)

// TestWALArchiving runs a primary configured to archive to a real S3 server
// (MinIO), as the operator configures it: completed segments appear in the
// bucket and in /status; with wrong credentials /status says archiving
// fails while postgres keeps serving; fixed credentials make the same
// segment archive. A replica is ready to archive once promoted and reports
// nothing itself.
func TestWALArchiving(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	secrets := workDir(t)
	secretKeyFile := writeSecret(t, secrets, "SECRET_ACCESS_KEY", s3.SecretKey)
	archiveArgs := []string{
		"--wal-archive-endpoint", s3.Endpoint, "--wal-archive-bucket", s3.Bucket,
		"--wal-archive-path", "prod/orders", "--wal-archive-region", "us-east-1",
		"--wal-archive-access-key-id-file", writeSecret(t, secrets, "ACCESS_KEY_ID", s3.AccessKey),
		"--wal-archive-secret-access-key-file", secretKeyFile,
		"--wal-archive-binary", tuskBinary,
	}
	primary := startNode(t, "pg-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: archiveArgs})
	primary.waitReady(instanceapi.RolePrimary)
	info, err := os.Stat(filepath.Join(primary.dir, "run", "wal-archive.json"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the archive command's configuration: %v, mode %v; want mode 0600", err, info)
	}
	primary.exec("CREATE TABLE t (id int PRIMARY KEY)")

	first := switchWAL(t, primary, 1)
	st := primary.waitFor(first+" archived", archivedThrough(first))
	if st.Archive.Failing || st.Archive.LastArchivedTime == nil || st.Archive.ArchivedCount < 1 {
		t.Errorf("archive status %+v: want %s archived, with a time, not failing", *st.Archive, first)
	}
	if err := archivedObject(s3, first); err != nil {
		t.Fatal(err)
	}
	if m := primary.metrics(); !strings.Contains(m, "tusk_pg_wal_archive_failing 0") {
		t.Errorf("/metrics while archiving works has no tusk_pg_wal_archive_failing 0:\n%s", grepLines(m, "archive"))
	}
	// The manager archived it ahead; archive_command only waited for that.
	if m := primary.metrics(); metricValue(m, "tusk_instance_wal_archived_ahead_total") < 1 ||
		metricValue(m, "tusk_instance_wal_archive_ahead_failed_total") != 0 {
		t.Errorf("/metrics: want segments archived ahead by the manager and no failure:\n%s", grepLines(m, "archive"))
	}

	t.Run("replica", func(t *testing.T) {
		replica := startNode(t, "pg-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port, extraArgs: archiveArgs})
		if st := replica.waitReady(instanceapi.RoleReplica); st.Archive != nil {
			t.Errorf("a replica reports archive status %+v; it archives nothing", *st.Archive)
		}
		replica.withConn("postgres", superuserPassword, "app", func(conn *pgx.Conn) error {
			var mode, restore string
			err := conn.QueryRow(context.Background(), "SELECT current_setting('archive_mode'), current_setting('restore_command')").Scan(&mode, &restore)
			if err == nil && (mode != "on" || restore != "") {
				err = fmt.Errorf("archive_mode %q, restore_command %q: want on (a promotion archives without a restart) and none (it streams)", mode, restore)
			}
			return err
		})
	})

	// Wrong credentials: the archive command fails, PostgreSQL keeps the
	// segment and retries; the manager and postgres keep running.
	writeSecret(t, secrets, "SECRET_ACCESS_KEY", "not-the-secret")
	second := switchWAL(t, primary, 2)
	st = primary.waitFor(second+" failing", func(st instanceapi.Status) error {
		if st.Archive == nil || !st.Archive.Failing || st.Archive.LastFailedWAL != second {
			return fmt.Errorf("archive status %+v: want failing at %s", st.Archive, second)
		}
		return nil
	})
	// (The replica's pg_basebackup archived a segment and a backup history
	// file after the first: the last success is before the second.)
	if !st.Ready || st.Phase != instanceapi.PhaseRunning || st.Archive.LastArchivedWAL >= second || st.Archive.FailedCount < 1 {
		t.Errorf("status with failing archiving: ready %v, phase %s, archive %+v; want ready, Running, last archived before %s",
			st.Ready, st.Phase, *st.Archive, second)
	}
	if err := archivedObject(s3, second); err == nil {
		t.Errorf("%s was archived with wrong credentials", second)
	}
	if m := primary.metrics(); !strings.Contains(m, "tusk_pg_wal_archive_failing 1") ||
		metricValue(m, "tusk_instance_wal_archive_ahead_failed_total") < 1 {
		t.Errorf("/metrics while archiving fails: want tusk_pg_wal_archive_failing 1 and failures archiving ahead:\n%s", grepLines(m, "archive"))
	}

	// Fixed: the kept segment is archived, and archiving is healthy again.
	writeSecret(t, secrets, "SECRET_ACCESS_KEY", s3.SecretKey)
	third := switchWAL(t, primary, 3) // wakes the archiver, which otherwise retries within a minute
	st = primary.waitFor(third+" archived", archivedThrough(third))
	if st.Archive.Failing {
		t.Errorf("archive status %+v: still failing after a success", *st.Archive)
	}
	for _, seg := range []string{second, third} {
		if err := archivedObject(s3, seg); err != nil {
			t.Error(err)
		}
	}
}

// TestArchiveCatchUpAfterPromotion: a standby marks the WAL it streams as
// archived, so what the old primary had not archived when it stopped would
// be a hole in the archive. Here the primary archives nothing (a wrong
// secret of its own), two segments stream to the replica, the primary
// stops, the replica is promoted: its manager archives both.
func TestArchiveCatchUpAfterPromotion(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	archiveArgs := func(secret string) []string {
		dir := workDir(t)
		return []string{
			"--wal-archive-endpoint", s3.Endpoint, "--wal-archive-bucket", s3.Bucket,
			"--wal-archive-path", "prod/orders", "--wal-archive-region", "us-east-1",
			"--wal-archive-access-key-id-file", writeSecret(t, dir, "ACCESS_KEY_ID", s3.AccessKey),
			"--wal-archive-secret-access-key-file", writeSecret(t, dir, "SECRET_ACCESS_KEY", secret),
			"--wal-archive-binary", tuskBinary,
		}
	}
	primary := startNode(t, "pg-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: archiveArgs("not-the-secret")})
	primary.waitReady(instanceapi.RolePrimary)
	primary.exec("CREATE TABLE t (id int PRIMARY KEY)")
	replica := startNode(t, "pg-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port, extraArgs: archiveArgs(s3.SecretKey)})
	replica.waitReady(instanceapi.RoleReplica)
	segments := []string{switchWAL(t, primary, 1), switchWAL(t, primary, 2)}
	replica.waitReplayed(primary.lsn())
	for _, seg := range segments {
		if err := archivedObject(s3, seg); err == nil {
			t.Fatalf("%s was archived by a primary with a wrong secret", seg)
		}
	}
	primary.stop()

	var res struct {
		Timeline uint32 `json:"timeline"`
	}
	replica.command(http.MethodPost, instanceapi.PathPromote, nil, &res)
	if res.Timeline != 2 {
		t.Fatalf("promoted onto timeline %d, want 2", res.Timeline)
	}
	testenv.EventuallyEvery(t, waitTimeout, 200*time.Millisecond, func(context.Context) error {
		var errs []error
		for _, seg := range segments {
			errs = append(errs, archivedObject(s3, seg))
		}
		return errors.Join(errs...)
	})
	replica.waitLog("Archived the WAL of the timelines before the promotion", segments[0], segments[1])
}

// switchWAL writes a row and switches to a new WAL segment, and returns
// the name of the segment it completed.
func switchWAL(t *testing.T, n *node, id int) string {
	t.Helper()
	var segment string
	n.withConn("postgres", superuserPassword, "app", func(conn *pgx.Conn) error {
		ctx := context.Background()
		if _, err := conn.Exec(ctx, "INSERT INTO t VALUES ($1)", id); err != nil {
			return err
		}
		if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_lsn())").Scan(&segment); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, "SELECT pg_switch_wal()")
		return err
	})
	return segment
}

// archivedThrough checks that the primary reports segment, or a later one,
// as archived. Names of one timeline sort in WAL order.
func archivedThrough(segment string) func(instanceapi.Status) error {
	return func(st instanceapi.Status) error {
		if st.Archive == nil || st.Archive.LastArchivedWAL < segment {
			return fmt.Errorf("archive status %+v: want %s archived", st.Archive, segment)
		}
		return nil
	}
}

// archivedObject checks that the segment is in the bucket where
// docs/backup.md says: <path>/wal/<timeline><log id>/<segment>.zst.
func archivedObject(s3 *testenv.S3, segment string) error {
	key := "prod/orders/wal/" + segment[:16] + "/" + segment + ".zst"
	info, err := s3.Client().StatObject(context.Background(), s3.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return fmt.Errorf("segment %s is not at %s: %w", segment, key, err)
	}
	if info.Size == 0 {
		return errors.New(key + " is empty")
	}
	return nil
}

// metricValue is the value of the metric without labels called name in
// the exposition text m, or -1 when m has none.
func metricValue(m, name string) float64 {
	for line := range strings.Lines(m) {
		if value, ok := strings.CutPrefix(line, name+" "); ok {
			if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
				return v
			}
		}
	}
	return -1
}

func grepLines(text, substr string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		if strings.Contains(line, substr) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestAnotherDatabaseCannotArchiveToTheLocation: two clusters given the
// same location (a path set twice, or a cluster created anew over an old
// location). The first claims it with its system identifier; the second,
// another initdb, archives nothing there: its archiving fails, postgres
// keeps its WAL and goes on serving, and its log says which database owns
// the location and which field to change.
func TestAnotherDatabaseCannotArchiveToTheLocation(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	secrets := workDir(t)
	archiveArgs := []string{
		"--wal-archive-endpoint", s3.Endpoint, "--wal-archive-bucket", s3.Bucket,
		"--wal-archive-path", "prod/orders", "--wal-archive-region", "us-east-1",
		"--wal-archive-access-key-id-file", writeSecret(t, secrets, "ACCESS_KEY_ID", s3.AccessKey),
		"--wal-archive-secret-access-key-file", writeSecret(t, secrets, "SECRET_ACCESS_KEY", s3.SecretKey),
		"--wal-archive-binary", tuskBinary,
	}
	owner := startNode(t, "pg-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: archiveArgs})
	st := owner.waitReady(instanceapi.RolePrimary)
	owner.exec("CREATE TABLE t (id int PRIMARY KEY)")
	first := switchWAL(t, owner, 1)
	owner.waitFor(first+" archived", archivedThrough(first))
	marker := locationMarker(t, s3)
	if marker.SystemIdentifier != st.SystemIdentifier {
		t.Fatalf("the location's marker names system %q, the archiving primary is %q", marker.SystemIdentifier, st.SystemIdentifier)
	}

	intruder := startNode(t, "pg-9", nodeOptions{role: instanceapi.RolePrimary, extraArgs: archiveArgs})
	other := intruder.waitReady(instanceapi.RolePrimary)
	if other.SystemIdentifier == st.SystemIdentifier {
		t.Fatal("two initdb gave one system identifier: the test proves nothing")
	}
	intruder.exec("CREATE TABLE t (id int PRIMARY KEY)")
	segment := switchWAL(t, intruder, 1)
	st = intruder.waitFor(segment+" failing", func(st instanceapi.Status) error {
		if st.Archive == nil || !st.Archive.Failing || st.Archive.ArchivedCount != 0 || st.Archive.Reason == "" {
			return fmt.Errorf("archive status %+v: want failing with a reason, nothing archived", st.Archive)
		}
		return nil
	})
	if !st.Ready || st.Phase != instanceapi.PhaseRunning {
		t.Errorf("the refused primary: ready %v, phase %s; want it serving", st.Ready, st.Phase)
	}
	if !strings.Contains(st.Archive.Reason, "holds the WAL and backups of database system "+marker.SystemIdentifier) {
		t.Errorf("archive status reason %q: want it to say whose the location is", st.Archive.Reason)
	}
	if m := locationMarker(t, s3); m != marker {
		t.Errorf("the marker changed to %+v, was %+v", m, marker)
	}
	logs := intruder.logs()
	if !strings.Contains(logs, "holds the WAL and backups of database system "+marker.SystemIdentifier) || !strings.Contains(logs, "spec.backup.objectStore.path") {
		t.Errorf("the refused primary's log does not say whose the location is and what to change:\n%s", grepLines(logs, "location"))
	}
	// The owner goes on archiving.
	next := switchWAL(t, owner, 2)
	owner.waitFor(next+" archived", archivedThrough(next))
}

func locationMarker(t *testing.T, s3 *testenv.S3) walarchive.Marker {
	t.Helper()
	obj, err := s3.Client().GetObject(context.Background(), s3.Bucket, "prod/orders/"+walarchive.MarkerKey, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = obj.Close() }()
	var m walarchive.Marker
	if err := json.NewDecoder(obj).Decode(&m); err != nil {
		t.Fatalf("reading the location marker: %v", err)
	}
	return m
}
