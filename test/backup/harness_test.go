//go:build integration

// Package backup tests WAL archiving and restore as PostgreSQL runs them:
// the built tusk binary as archive_command and restore_command, real
// postgres processes on this host and a real S3 server (MinIO) on loopback.
package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/testenv"
	"tusk.dev/tusk/internal/walarchive"
)

const waitTimeout = 2 * time.Minute

var (
	tuskBinary string
	pgBinDir   string
	pgUser     *syscall.Credential
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if pgBinDir, err = testenv.PostgresBinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "SKIP: backup tests need PostgreSQL:", err)
		return 0
	}
	binary, remove, err := testenv.BuildTuskForPostgres()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer remove()
	tuskBinary = binary
	if pgUser, err = testenv.PostgresCredential(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// workDir makes a directory the postgres OS user owns, removed after the test.
func workDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tusk-backup-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	chown(t, dir)
	return dir
}

func chown(t testing.TB, path string) {
	t.Helper()
	if pgUser != nil {
		if err := os.Chown(path, int(pgUser.Uid), int(pgUser.Gid)); err != nil {
			t.Fatal(err)
		}
	}
}

// writeFile writes a file only the postgres OS user can read.
func writeFile(t testing.TB, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	chown(t, path)
	return path
}

// cluster is the cluster name the tests archive for: its archive is at
// orders/ in the bucket (the default location, as no path is set).
const cluster = "orders"

// archiveConfig writes the configuration the WAL commands read, with the
// credentials in files as the operator will mount them, and returns its path.
func archiveConfig(t testing.TB, dir string, s3 *testenv.S3, change func(*objectstore.Config)) string {
	t.Helper()
	cfg := walarchive.Config{Cluster: cluster, ObjectStore: objectstore.Config{
		Endpoint: s3.Endpoint, Bucket: s3.Bucket, Region: "us-east-1", CAFile: s3.CAFile,
		AccessKeyIDFile:     writeFile(t, filepath.Join(dir, "s3-id"), s3.AccessKey+"\n"),
		SecretAccessKeyFile: writeFile(t, filepath.Join(dir, "s3-secret"), s3.SecretKey+"\n"),
	}}
	if change != nil {
		change(&cfg.ObjectStore)
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, filepath.Join(dir, "archive-"+cluster+".json"), string(data))
}

// tusk runs the binary as the postgres OS user (as PostgreSQL would) and
// returns its exit code and output.
func tusk(t testing.TB, args ...string) (int, string) {
	t.Helper()
	code, out, _ := tuskCPU(t, args...)
	return code, out
}

// tuskCPU runs tusk as tusk does, and also returns the CPU time (user and
// system) the process used.
func tuskCPU(t testing.TB, args ...string) (int, string, time.Duration) {
	t.Helper()
	cmd := exec.Command(tuskBinary, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pgUser}
	out, err := cmd.CombinedOutput()
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		return exit.ExitCode(), string(out), exit.UserTime() + exit.SystemTime()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// pgTool runs a PostgreSQL program as the postgres OS user.
func pgTool(t testing.TB, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(pgBinDir, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pgUser}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// server is one postgres process on a data directory.
type server struct {
	t      testing.TB
	name   string
	data   string
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	output bytes.Buffer
}

func (s *server) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.output.Write(p)
}

func (s *server) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.output.String()
}

// startPostgres runs postgres on data with the given settings (-c), on a
// free loopback port, its socket in dir, stopped when the test ends.
func startPostgres(t testing.TB, name, dir, data string, settings map[string]string) *server {
	t.Helper()
	s := &server{t: t, name: name, data: data, port: testenv.FreePort(t), exited: make(chan struct{})}
	args := []string{"-D", data, "-c", "port=" + strconv.Itoa(s.port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + dir, "-c", "fsync=off"}
	for k, v := range settings {
		args = append(args, "-c", k+"="+v)
	}
	s.cmd = exec.Command(filepath.Join(pgBinDir, "postgres"), args...)
	s.cmd.Stdout, s.cmd.Stderr = s, s
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pgUser, Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, s.logs())
		}
	})
	return s
}

// stop shuts postgres down fast and waits for it.
func (s *server) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(waitTimeout):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
}

func (s *server) dsn() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", s.port)
}

// connect waits until the server accepts connections and returns one.
func (s *server) connect() *pgx.Conn {
	s.t.Helper()
	var conn *pgx.Conn
	testenv.EventuallyEvery(s.t, waitTimeout, 100*time.Millisecond, func(ctx context.Context) error {
		select {
		case <-s.exited:
			s.t.Fatalf("%s exited:\n%s", s.name, s.logs())
		default:
		}
		var err error
		conn, err = pgx.Connect(ctx, s.dsn())
		return err
	})
	s.t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// exec1 runs SQL and fails the test on error.
func exec1(t testing.TB, conn *pgx.Conn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// query1 returns the single value a query selects.
func query1[T any](t testing.TB, conn *pgx.Conn, sql string, args ...any) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var v T
	if err := conn.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}
