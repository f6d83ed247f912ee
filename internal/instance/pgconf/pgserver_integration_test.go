//go:build integration

package pgconf

import (
	"bytes"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tusk.dev/tusk/internal/testenv"
)

// pgServer runs PostgreSQL binaries on this host for a test, as the
// postgres OS user when the test runs as root (initdb and postgres refuse
// to run as root).
type pgServer struct {
	t        *testing.T
	bin      string
	major    int
	dir      string // owned by the user the server runs as
	data     string
	password string
	cred     *syscall.Credential // nil: run as ourselves
}

// newPGServer initdb's a data directory in a fresh temporary directory.
func newPGServer(t *testing.T) *pgServer {
	t.Helper()
	s := &pgServer{t: t, bin: testenv.RequirePostgres(t), password: "s3cret-'\\-pw"}
	dir, err := os.MkdirTemp("", "tusk-pgconf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s.dir, s.data = dir, filepath.Join(dir, "data")
	if os.Geteuid() == 0 {
		cred, err := testenv.PostgresCredential()
		if err != nil {
			t.Fatal(err)
		}
		s.cred = cred
		s.chown(dir)
	}
	s.major = s.serverMajor()
	s.writeFile("pwfile", s.password+"\n")
	s.run("initdb", "-D", s.data, "-U", "postgres", "--auth=scram-sha-256", "--pwfile="+filepath.Join(dir, "pwfile"),
		"--encoding=UTF8", "--locale=C", "--data-checksums")
	s.mkdir("run")
	return s
}

// monitorLogin maps the server's OS user to the monitoring role, as the
// instance manager (which runs as that user) does.
func (s *pgServer) monitorLogin() *MonitorLogin {
	u, err := user.Current()
	if s.cred != nil {
		u, err = user.LookupId(strconv.Itoa(int(s.cred.Uid)))
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return &MonitorLogin{Role: "tusk_monitor", SystemUser: u.Username}
}

func (s *pgServer) chown(path string) {
	if s.cred == nil {
		return
	}
	if err := os.Chown(path, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
		s.t.Fatal(err)
	}
}

func (s *pgServer) writeFile(name, content string) string {
	path := filepath.Join(s.dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		s.t.Fatal(err)
	}
	s.chown(path)
	return path
}

func (s *pgServer) mkdir(name string) string {
	path := filepath.Join(s.dir, name)
	if err := os.Mkdir(path, 0o700); err != nil {
		s.t.Fatal(err)
	}
	s.chown(path)
	return path
}

// command prepares a PostgreSQL program, run as the server's user with a
// clean environment (no PG* variables from the caller).
func (s *pgServer) command(program string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, program), args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"HOME=" + s.dir, "PATH=/usr/bin:/bin", "LC_ALL=C", "PGPASSWORD=" + s.password,
		"PGOPTIONS=-c synchronous_commit=local"}
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

// run runs a program and fails the test with its output if it fails.
func (s *pgServer) run(program string, args ...string) string {
	s.t.Helper()
	out, err := s.tryRun(program, args...)
	if err != nil {
		s.t.Fatalf("%s %s: %v\n%s", program, strings.Join(args, " "), err, out)
	}
	return out
}

func (s *pgServer) tryRun(program string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := s.command(program, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSuffix(out.String(), "\n"), err // only the newline: values may end in spaces
}

func (s *pgServer) serverMajor() int {
	out := s.run("postgres", "--version")
	m := regexp.MustCompile(`\(PostgreSQL\) (\d+)`).FindStringSubmatch(out)
	if m == nil {
		s.t.Fatalf("cannot read the major version from %q", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// start starts the server with pg_ctl and registers a cleanup that stops
// it with -m immediate and checks that no process of it is left.
func (s *pgServer) start(clusterName string) {
	s.t.Helper()
	logFile := filepath.Join(s.dir, "postgres.log")
	s.t.Cleanup(func() { s.stopAndCheck(clusterName) })
	if out, err := s.tryRun("pg_ctl", "start", "-D", s.data, "-w", "-t", "60", "-l", logFile); err != nil {
		log, _ := os.ReadFile(logFile)
		s.t.Fatalf("pg_ctl start: %v\n%s\nserver log:\n%s", err, out, log)
	}
}

func (s *pgServer) stopAndCheck(clusterName string) {
	pid := s.postmasterPID()
	if out, err := s.tryRun("pg_ctl", "stop", "-D", s.data, "-m", "immediate", "-w", "-t", "30"); err != nil {
		s.t.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := processesOf(pid, clusterName)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Errorf("PostgreSQL processes left behind after pg_ctl stop: %v", left)
			for _, p := range left {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *pgServer) postmasterPID() int {
	data, err := os.ReadFile(filepath.Join(s.data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.SplitN(string(data), "\n", 2)[0])
	return pid
}

// processesOf lists the postmaster (by PID) and every process whose title
// carries the cluster name, which PostgreSQL puts in its children's titles.
func processesOf(postmaster int, clusterName string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if pid == postmaster || bytes.Contains(cmdline, []byte(clusterName)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// psql runs one SQL command with a connection string and returns the
// unaligned, tuples-only output.
func (s *pgServer) psql(conninfo, sql string) (string, error) {
	return s.tryRun("psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", conninfo, "-c", sql)
}

func (s *pgServer) mustPSQL(conninfo, sql string) string {
	s.t.Helper()
	out, err := s.psql(conninfo, sql)
	if err != nil {
		s.t.Fatalf("psql %q: %v\n%s", sql, err, out)
	}
	return out
}
