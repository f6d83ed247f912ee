//go:build integration

package workload

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/testenv"
)

// pgServer is a real PostgreSQL server for a test, on a free loopback port
// (TCP, so inet_server_addr() is set), run as the postgres OS user when
// the test runs as root. fsync stays on: surviving a crash is the point.
type pgServer struct {
	t    *testing.T
	bin  string
	dir  string
	data string
	port int
	cred *syscall.Credential
}

func startPGServer(t *testing.T) *pgServer {
	t.Helper()
	s := &pgServer{t: t, bin: testenv.RequirePostgres(t), port: testenv.FreePort(t)}
	dir, err := os.MkdirTemp("", "tusk-workload-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s.dir, s.data = dir, filepath.Join(dir, "data")
	if s.cred, err = testenv.PostgresCredential(); err != nil {
		t.Fatal(err)
	}
	if s.cred != nil {
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	s.run("initdb", "-D", s.data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C")
	s.start()
	t.Cleanup(func() { _, _ = s.tryRun("pg_ctl", "stop", "-D", s.data, "-m", "immediate", "-w", "-t", "30") })
	return s
}

// DSN reaches the server over TCP.
func (s *pgServer) DSN() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", s.port)
}

func (s *pgServer) start() {
	s.t.Helper()
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=on -c synchronous_commit=on", s.port, s.dir)
	s.run("pg_ctl", "start", "-D", s.data, "-w", "-t", "60", "-l", filepath.Join(s.dir, "postgres.log"), "-o", opts)
}

// crash stops the server as a crash would: no shutdown checkpoint, open
// sessions cut.
func (s *pgServer) crash() {
	s.t.Helper()
	s.run("pg_ctl", "stop", "-D", s.data, "-m", "immediate", "-w", "-t", "30")
}

func (s *pgServer) run(program string, args ...string) {
	s.t.Helper()
	if out, err := s.tryRun(program, args...); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
		s.t.Fatalf("%s %s: %v\n%s\nserver log:\n%s", program, strings.Join(args, " "), err, out, log)
	}
}

func (s *pgServer) tryRun(program string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command(filepath.Join(s.bin, program), args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"HOME=" + s.dir, "PATH=/usr/bin:/bin", "LC_ALL=C"}
	cmd.Stdout, cmd.Stderr = &out, &out
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	err := cmd.Run()
	return out.String(), err
}

// exec runs SQL on the server.
func (s *pgServer) exec(ctx context.Context, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, s.DSN())
	if err != nil {
		return err
	}
	defer closeConn(conn)
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// mustExec is exec failing the test on error.
func (s *pgServer) mustExec(sql string, args ...any) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.exec(ctx, sql, args...); err != nil {
		s.t.Fatalf("%s: %v", sql, err)
	}
}

// count counts the rows of a table.
func (s *pgServer) count(ctx context.Context, table string) (int, error) {
	conn, err := pgx.Connect(ctx, s.DSN())
	if err != nil {
		return 0, err
	}
	defer closeConn(conn)
	var n int
	err = conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n)
	return n, err
}

// waitRows waits until table has more than n rows.
func (s *pgServer) waitRows(table string, n int) int {
	s.t.Helper()
	var got int
	testenv.EventuallyEvery(s.t, time.Minute, 50*time.Millisecond, func(ctx context.Context) error {
		var err error
		if got, err = s.count(ctx, table); err != nil {
			return err
		}
		if got <= n {
			return fmt.Errorf("%d rows in %s, waiting for more than %d", got, table, n)
		}
		return nil
	})
	return got
}
