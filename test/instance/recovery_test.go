//go:build integration

package instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"

	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/testenv"
)

// storeArgs are the flags of one location in MinIO, with the credentials
// in files as a mounted Secret gives them.
func storeArgs(t *testing.T, s3 *testenv.S3, prefix, path string) []string {
	t.Helper()
	secrets := workDir(t)
	return []string{
		"--" + prefix + "-endpoint", s3.Endpoint, "--" + prefix + "-bucket", s3.Bucket,
		"--" + prefix + "-path", path, "--" + prefix + "-region", "us-east-1",
		"--" + prefix + "-access-key-id-file", writeSecret(t, secrets, "ACCESS_KEY_ID", s3.AccessKey),
		"--" + prefix + "-secret-access-key-file", writeSecret(t, secrets, "SECRET_ACCESS_KEY", s3.SecretKey),
	}
}

// TestRecoveryBootstrap bootstraps new primaries from a base backup and
// the WAL archive of another instance, as the operator runs the first
// instance of a cluster with bootstrap.recovery: to a time between two
// writes (exactly the rows before it), to the end of the archive (every
// row), each promoted on a new timeline, archiving to its own location,
// with the new cluster's passwords; and refuses what cannot work with a
// clear error in /status, retrying with a growing wait and leaving no
// data directory.
func TestRecoveryBootstrap(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	source := startNode(t, "src-1", nodeOptions{role: instanceapi.RolePrimary,
		extraArgs: append(storeArgs(t, s3, "wal-archive", "src/orders"), "--wal-archive-binary", tuskBinary)})
	source.waitReady(instanceapi.RolePrimary)
	conn := source.connectAsSuperuser(t)
	execSQL(t, conn, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)")
	beforeBackup := queryTime(t, conn)

	store, err := objectstore.New(objectstore.Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Path: "src/orders",
		Region: "us-east-1", AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := basebackup.Backup(context.Background(), basebackup.Options{Name: "b1", BinDir: pgBinDir, Store: store,
		ConnString: fmt.Sprintf("host=127.0.0.1 port=%d user=tusk_replication dbname=postgres password='%s'", source.port,
			replicationPassword)})
	if err != nil {
		t.Fatal(err)
	}

	execSQL(t, conn, "INSERT INTO t VALUES (3)")
	target := queryTime(t, conn)
	// After the target: a row, and the source's own passwords, which a
	// recovered cluster must not keep.
	execSQL(t, conn, "INSERT INTO t VALUES (4)",
		"ALTER ROLE app PASSWORD 'the source app password'", "ALTER ROLE postgres PASSWORD 'the source superuser password'")
	switchAndWaitArchived(t, conn)

	t.Run("to a time", func(t *testing.T) {
		n := startRecovery(t, s3, "pitr-1", "new/pitr", "--recovery-target-time", target.Format(time.RFC3339Nano))
		st := n.waitReady(instanceapi.RolePrimary)
		if st.Timeline != rec.Timeline+1 || st.Recovery != nil {
			t.Errorf("recovered primary on timeline %d with recovery report %+v; want timeline %d, no report", st.Timeline, st.Recovery, rec.Timeline+1)
		}
		n.waitIDs(1, 2, 3)
		checkArchivedHistory(t, s3, "new/pitr", rec.Timeline+1)
		if !strings.Contains(n.logs(), `"backup":"b1"`) {
			t.Errorf("the latest backup before the target is b1; the manager did not say it restored it")
		}
	})

	t.Run("to the end of the archive", func(t *testing.T) {
		n := startRecovery(t, s3, "end-1", "new/end", "--recovery-backup", "b1")
		n.waitReady(instanceapi.RolePrimary)
		// wal-restore's prefetched segments do not outlive the recovery.
		// (The spool itself is back: the manager's Watcher marks it.)
		if _, err := os.Stat(filepath.Join(n.dir, "pgdata", "pg_wal", "tusk-spool", "prefetch")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("prefetched WAL is still in pg_wal after the recovery (%v)", err)
		}
		// Every row, and the new cluster's passwords: the superuser's and
		// the owner's from its own files, not the source's.
		n.waitIDs(1, 2, 3, 4)
		n.withConn("app", appPassword, "app", func(conn *pgx.Conn) error {
			_, err := conn.Exec(context.Background(), "SELECT 1")
			return err
		})
		if _, err := n.tryConnect(context.Background(), "postgres", "the source superuser password", "app"); err == nil {
			t.Error("the recovered cluster still accepts the source's superuser password")
		}
	})

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a target before the backup", []string{"--recovery-backup", "b1", "--recovery-target-time", beforeBackup.Format(time.RFC3339Nano)},
			`is before backup "b1" ended`},
		{"no backup before the target", []string{"--recovery-target-time", beforeBackup.Format(time.RFC3339Nano)},
			"no backup ended before the recovery target time"},
		{"a missing backup", []string{"--recovery-backup", "nosuch"}, `backup "nosuch" does not exist`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startRecovery(t, s3, "bad-1", "new/bad", tc.args...)
			start := time.Now()
			st := n.waitFor("three failed attempts", func(st instanceapi.Status) error {
				if st.Recovery == nil || st.Recovery.FailedAttempts < 3 {
					return fmt.Errorf("recovery %+v, error %q: want 3 failed attempts", st.Recovery, st.LastError)
				}
				return nil
			})
			// 1 s, then 2 s between attempts: a retry loop without a
			// backoff would get there at once.
			if elapsed := time.Since(start); elapsed < 3*time.Second {
				t.Errorf("3 failed attempts within %s: the manager retries without backing off", elapsed)
			}
			if st.Phase != instanceapi.PhaseRecovering || !strings.Contains(st.LastError, tc.want) {
				t.Errorf("phase %s, last error %q; want Recovering and an error saying %q", st.Phase, st.LastError, tc.want)
			}
			for _, dir := range []string{"pgdata", "pgdata.tusk-bootstrap"} {
				if entries, err := os.ReadDir(filepath.Join(n.dir, dir)); err == nil && len(entries) > 0 {
					t.Errorf("a failed recovery left %d entries in %s", len(entries), dir)
				}
			}
		})
	}

	t.Run("into its own archive", func(t *testing.T) {
		args := append(storeArgs(t, s3, "recovery-source", "src/orders"), storeArgs(t, s3, "wal-archive", "src/orders")...)
		n := startNode(t, "same-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: append(args, "--wal-archive-binary", tuskBinary)})
		select {
		case <-n.exited:
		case <-time.After(waitTimeout):
			t.Fatal("a manager told to recover from its own archive location did not refuse to start")
		}
		if !strings.Contains(n.logs(), "it is where this cluster archives its own WAL") {
			t.Errorf("the manager did not say why it refused:\n%s", n.logs())
		}
	})
}

// startRecovery starts a new primary recovering from src/orders, which
// archives to its own location, path.
func startRecovery(t *testing.T, s3 *testenv.S3, name, path string, args ...string) *node {
	t.Helper()
	all := append(storeArgs(t, s3, "recovery-source", "src/orders"), storeArgs(t, s3, "wal-archive", path)...)
	all = append(all, "--wal-archive-binary", tuskBinary)
	return startNode(t, name, nodeOptions{role: instanceapi.RolePrimary, extraArgs: append(all, args...)})
}

// checkArchivedHistory checks that the new timeline's history file went to
// the recovered cluster's own location.
func checkArchivedHistory(t *testing.T, s3 *testenv.S3, path string, timeline uint32) {
	t.Helper()
	key := fmt.Sprintf("%s/wal/%08X.history.zst", path, timeline)
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		_, err := s3.Client().StatObject(ctx, s3.Bucket, key, minio.StatObjectOptions{})
		return err
	})
}

func (n *node) connectAsSuperuser(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := n.tryConnect(context.Background(), "postgres", superuserPassword, "app")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func execSQL(t *testing.T, conn *pgx.Conn, statements ...string) {
	t.Helper()
	for _, s := range statements {
		if _, err := conn.Exec(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func queryTime(t *testing.T, conn *pgx.Conn) time.Time {
	t.Helper()
	var at time.Time
	if err := conn.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// switchAndWaitArchived completes the current segment and waits until the
// archiver has archived it.
func switchAndWaitArchived(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	var segment string
	if err := conn.QueryRow(context.Background(), "SELECT pg_walfile_name(pg_current_wal_lsn())").Scan(&segment); err != nil {
		t.Fatal(err)
	}
	execSQL(t, conn, "SELECT pg_switch_wal()")
	testenv.EventuallyEvery(t, waitTimeout, 200*time.Millisecond, func(ctx context.Context) error {
		var archived string
		if err := conn.QueryRow(ctx, "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver").Scan(&archived); err != nil {
			return err
		}
		if archived < segment {
			return fmt.Errorf("last archived %q, want %s", archived, segment)
		}
		return nil
	})
}
