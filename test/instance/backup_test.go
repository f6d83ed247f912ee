//go:build integration

package instance

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/postgres"
	"tusk.dev/tusk/internal/testenv"
	"tusk.dev/tusk/internal/walarchive"
)

// TestBaseBackups takes base backups through the instance manager's API
// (POST /v1/backups, GET /v1/backups/<name>) into a real S3 server: from a
// replica, which waits for the primary to archive the backup's last
// segment until the primary's manager is asked to switch WAL (POST
// /v1/wal/switch, throttled, refused on a standby), and whose backup
// restores (basebackup.Restore) to every row; from the primary; one at a time (409); a backup the manager does not know
// found in the store; wrong credentials failing with their kind.
func TestBaseBackups(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	secrets := workDir(t)
	archiveArgs := func(secretKeyFile string) []string {
		return []string{
			"--wal-archive-endpoint", s3.Endpoint, "--wal-archive-bucket", s3.Bucket,
			"--wal-archive-path", "prod/orders", "--wal-archive-region", "us-east-1",
			"--wal-archive-access-key-id-file", writeSecret(t, secrets, "ACCESS_KEY_ID", s3.AccessKey),
			"--wal-archive-secret-access-key-file", secretKeyFile,
			"--wal-archive-binary", tuskBinary,
			// The primary switches segments only when the test says, so
			// the replica's backup waits as long as the test needs.
			"--archive-timeout", "1h",
		}
	}
	replicaSecret := writeSecret(t, secrets, "replica-secret", s3.SecretKey)
	primary := startNode(t, "pg-1", nodeOptions{role: instanceapi.RolePrimary,
		extraArgs: archiveArgs(writeSecret(t, secrets, "primary-secret", s3.SecretKey))})
	primary.waitReady(instanceapi.RolePrimary)
	primary.exec("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 1000)")
	replica := startNode(t, "pg-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port, extraArgs: archiveArgs(replicaSecret)})
	replica.waitReady(instanceapi.RoleReplica)
	// Rows after the replica's bootstrap (whose backup switched the
	// primary's segment): the replica's backup ends in a segment not
	// archived yet.
	primary.exec("INSERT INTO t SELECT generate_series(1001, 1100)")
	replica.waitIDs(seq(1, 1100)...)
	store, err := objectstore.New(objectstore.Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Path: "prod/orders",
		Region: "us-east-1", AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey})
	if err != nil {
		t.Fatal(err)
	}

	// From the replica.
	st := startBackup(t, replica, "b1", http.StatusAccepted)
	if st.Phase != instanceapi.BackupRunning || st.StartedAt.IsZero() {
		t.Errorf("POST answered %+v: want running, with a start time", st)
	}
	if again := startBackup(t, replica, "b1", http.StatusOK); again.Name != "b1" {
		t.Errorf("the same backup asked again: %+v, want its state", again)
	}
	st = waitBackup(t, replica, "b1", func(st instanceapi.BackupStatus) error {
		if st.Phase != instanceapi.BackupRunning || st.WaitingForWAL == "" {
			return fmt.Errorf("backup %+v: want running, waiting for its last WAL segment", st)
		}
		return nil
	})
	waitingFor := st.WaitingForWAL
	// Deterministically still running: nothing archives its segment yet.
	refused := postBackup(t, replica, "b2", http.StatusConflict)
	if !strings.Contains(refused, `backup \"b1\" is already running`) {
		t.Errorf("a second backup while b1 runs: %s; want it refused naming b1", refused)
	}
	// As the operator does when a backup reports it waits: the primary's
	// manager switches WAL, and the segment is archived an hour before
	// archive_timeout would have.
	sw := switchWALByAPI(t, primary, http.StatusOK)
	switched := time.Now()
	if sw.Throttled || sw.LSN == "" || sw.Segment == "" {
		t.Errorf("the primary's switch answered %+v: want a switch, its LSN and segment", sw)
	}
	// The manager throttles by its own clock (5 s after the switch); the
	// test's clock started no earlier, so a second call it sees within 4 s
	// of its first answer is surely inside the window, however slow the
	// machine.
	if again := switchWALByAPI(t, primary, http.StatusOK); time.Since(switched) < 4*time.Second && (!again.Throttled || again.LSN != sw.LSN) {
		t.Errorf("a second switch right away answered %+v: want it throttled, with the first one's LSN %s", again, sw.LSN)
	}
	if body := switchWALByAPI(t, replica, http.StatusConflict); body.LSN != "" {
		t.Errorf("a standby answered a switch with %+v", body)
	}
	st = waitBackup(t, replica, "b1", phaseIs(instanceapi.BackupCompleted))
	t.Logf("the replica's backup: %s of pg_basebackup and upload, %d bytes (%d compressed); completed %s after the primary switched WAL",
		st.Record.EndTime.Sub(st.Record.StartTime).Round(time.Millisecond), st.Record.Size, st.Record.CompressedSize,
		time.Since(switched).Round(time.Millisecond))
	checkStandbyBackup(t, replica, st, waitingFor)
	key, err := walarchive.Key(waitingFor)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := store.Exists(context.Background(), key); !ok || err != nil {
		t.Errorf("the backup's last segment %s is not in the archive (%v)", waitingFor, err)
	}
	rec, err := basebackup.LoadRecord(context.Background(), store, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.EndLSN.String() != st.Record.EndLSN || rec.CompressedSize != st.Record.CompressedSize {
		t.Errorf("the stored record (end %s, %d bytes) differs from the reported one %+v", rec.EndLSN, rec.CompressedSize, *st.Record)
	}
	if want := "s3://" + s3.Bucket + "/prod/orders/base/b1/"; st.Location != want {
		t.Errorf("location %q, want %q", st.Location, want)
	}

	// Rows after the backup reach the archive; the backup restores to them.
	primary.exec("INSERT INTO t SELECT generate_series(1101, 1200)")
	last := switchWAL(t, primary, 1201)
	primary.waitFor(last+" archived", archivedThrough(last))
	restoreAndCount(t, store, "b1", filepath.Join(primary.dir, "run", "wal-archive.json"), 1201)

	t.Run("primary", func(t *testing.T) {
		startBackup(t, primary, "b3", http.StatusAccepted)
		st := waitBackup(t, primary, "b3", phaseIs(instanceapi.BackupCompleted))
		t.Logf("the primary's backup: %s from the request to completed, %d bytes compressed",
			st.CompletedAt.Sub(st.StartedAt).Round(time.Millisecond), st.Record.CompressedSize)
		if st.Record.Timeline != 1 || st.WaitingForWAL != "" {
			t.Errorf("a primary's backup %+v: want timeline 1, nothing to wait for", st)
		}
		// The replica never took it: it finds it in the store.
		found := waitBackup(t, replica, "b3", phaseIs(instanceapi.BackupCompleted))
		if found.Record == nil || found.Record.EndLSN != st.Record.EndLSN {
			t.Errorf("the replica reports b3 as %+v, want the primary's record %+v", found, *st.Record)
		}
		var body map[string]string
		if code, _ := replica.call(context.Background(), http.MethodGet, instanceapi.PathBackups+"/never-taken", nil, &body); code != http.StatusNotFound {
			t.Errorf("an unknown backup: HTTP %d %v, want 404", code, body)
		}
	})

	t.Run("wrong credentials", func(t *testing.T) {
		writeSecret(t, secrets, "replica-secret", "not-the-secret")
		startBackup(t, replica, "b4", http.StatusAccepted)
		st := waitBackup(t, replica, "b4", phaseIs(instanceapi.BackupFailed))
		if st.ErrorKind != instanceapi.BackupErrorWrongCredentials || !strings.Contains(st.Error, "access denied") ||
			strings.Contains(st.Error, "not-the-secret") {
			t.Errorf("failed backup %+v: want kind %s, access denied, no secret", st, instanceapi.BackupErrorWrongCredentials)
		}
		for obj, err := range store.List(context.Background(), "base/b4/") {
			t.Errorf("a failed backup left %s (%v)", obj.Key, err)
		}
		// The next backup may start.
		writeSecret(t, secrets, "replica-secret", s3.SecretKey)
		startBackup(t, replica, "b5", http.StatusAccepted)
	})
}

// checkStandbyBackup checks a replica's record against the replica: its
// timeline, a span ending where it had replayed, the segment it waited for.
func checkStandbyBackup(t *testing.T, replica *node, st instanceapi.BackupStatus, waitedFor string) {
	t.Helper()
	r := st.Record
	if r == nil {
		t.Fatalf("completed backup %+v has no record", st)
	}
	now, err := replica.status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	begin, err1 := postgres.ParseLSN(r.BeginLSN)
	end, err2 := postgres.ParseLSN(r.EndLSN)
	replayed, err3 := postgres.ParseLSN(now.ReplayedLSN)
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatalf("record %+v, replayed %q: %v %v %v", *r, now.ReplayedLSN, err1, err2, err3)
	}
	if r.Timeline != 1 || r.Timeline != now.Timeline || begin == 0 || begin > end || end > replayed {
		t.Errorf("record %+v on the replica at timeline %d, replayed %s: want its timeline, 0 < begin <= end <= replayed",
			*r, now.Timeline, replayed)
	}
	seg, err := postgres.SegmentOf(r.Timeline, end-1, 16<<20)
	if err != nil || seg.FileName() != waitedFor {
		t.Errorf("waited for %s, want the segment of the end LSN's last byte %s (%v)", waitedFor, seg.FileName(), err)
	}
	if r.BeginWAL == "" || r.CompressedSize <= 0 || r.SystemIdentifier != now.SystemIdentifier {
		t.Errorf("record %+v: want a begin segment, a size and the replica's system identifier %s", *r, now.SystemIdentifier)
	}
}

// restoreAndCount restores backup name with basebackup.Restore, starts
// postgres on it (archiving off, on its own port), waits for the end of
// recovery and checks table t holds rows 1..want.
func restoreAndCount(t *testing.T, store *objectstore.Store, name, config string, want int) {
	t.Helper()
	dir := workDir(t)
	data := filepath.Join(dir, "data")
	ctx := context.Background()
	_, err := basebackup.Restore(ctx, basebackup.RestoreOptions{Name: name, Store: store, TargetDir: data,
		RestoreCommand: basebackup.RestoreCommand(tuskBinary, config)})
	if err != nil {
		t.Fatal(err)
	}
	chownTree(t, data)
	port := testenv.FreePort(t)
	var out bytes.Buffer
	cmd := exec.Command(filepath.Join(pgBinDir, "postgres"), "-D", data, "-c", "port="+strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+dir, "-c", "archive_mode=off")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pgUser, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		<-exited
		if t.Failed() {
			t.Logf("restored postgres:\n%s", out.String())
		}
	}()
	// Over the Unix socket: the restored pg_hba.conf lets the superuser in
	// there only.
	dsn := fmt.Sprintf("host=%s port=%d user=postgres password=%s dbname=app", dir, port, "'super\\'secret'")
	var count, maxID int
	testenv.EventuallyEvery(t, waitTimeout, 100*time.Millisecond, func(ctx context.Context) error {
		select {
		case <-exited:
			t.Fatalf("the restored postgres exited:\n%s", out.String())
		default:
		}
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(ctx) }()
		var recovering bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), count(*), max(id) FROM t").Scan(&recovering, &count, &maxID); err != nil {
			return err
		}
		if recovering {
			return fmt.Errorf("still recovering, %d rows", count)
		}
		return nil
	})
	if count != want || maxID != want {
		t.Errorf("restored %d rows up to %d, want %d", count, maxID, want)
	}
}

func chownTree(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if pgUser == nil {
			return nil
		}
		return os.Lchown(path, int(pgUser.Uid), int(pgUser.Gid))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// switchWALByAPI asks n's manager to switch WAL and checks the HTTP status.
func switchWALByAPI(t *testing.T, n *node, wantCode int) instanceapi.WALSwitchResult {
	t.Helper()
	var res instanceapi.WALSwitchResult
	code, err := n.call(context.Background(), http.MethodPost, instanceapi.PathWALSwitch, nil, &res)
	if code != wantCode {
		t.Fatalf("POST %s on %s: HTTP %d (%v), want %d", instanceapi.PathWALSwitch, n.name, code, err, wantCode)
	}
	return res
}

func startBackup(t *testing.T, n *node, name string, wantCode int) instanceapi.BackupStatus {
	t.Helper()
	var st instanceapi.BackupStatus
	code, err := n.call(context.Background(), http.MethodPost, instanceapi.PathBackups, instanceapi.BackupRequest{Name: name}, &st)
	if code != wantCode {
		t.Fatalf("POST %s %s on %s: HTTP %d (%v), want %d", instanceapi.PathBackups, name, n.name, code, err, wantCode)
	}
	return st
}

// postBackup asks for a backup and returns the raw answer.
func postBackup(t *testing.T, n *node, name string, wantCode int) string {
	t.Helper()
	code, err := n.call(context.Background(), http.MethodPost, instanceapi.PathBackups, instanceapi.BackupRequest{Name: name}, nil)
	if code != wantCode {
		t.Fatalf("POST %s %s on %s: HTTP %d (%v), want %d", instanceapi.PathBackups, name, n.name, code, err, wantCode)
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

func waitBackup(t *testing.T, n *node, name string, check func(instanceapi.BackupStatus) error) instanceapi.BackupStatus {
	t.Helper()
	var st instanceapi.BackupStatus
	testenv.EventuallyEvery(t, waitTimeout, 100*time.Millisecond, func(ctx context.Context) error {
		st = instanceapi.BackupStatus{}
		if _, err := n.call(ctx, http.MethodGet, instanceapi.PathBackups+"/"+name, nil, &st); err != nil {
			return err
		}
		if st.Phase == instanceapi.BackupFailed {
			if err := check(st); err != nil {
				t.Fatalf("backup %s failed: %s (%s)\n%s", name, st.Error, st.ErrorKind, n.logs())
			}
		}
		return check(st)
	})
	return st
}

func phaseIs(p instanceapi.BackupPhase) func(instanceapi.BackupStatus) error {
	return func(st instanceapi.BackupStatus) error {
		if st.Phase != p {
			return fmt.Errorf("backup %s is %s (%s), want %s", st.Name, st.Phase, st.Error, p)
		}
		return nil
	}
}

func seq(from, to int) []int {
	s := make([]int, 0, to-from+1)
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}
