//go:build integration

// Package instance tests the instance manager as the operator will use it:
// `tusk instance run` processes on this host, real PostgreSQL, HTTP calls.
package instance

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

const (
	superuserPassword   = "super'secret"
	replicationPassword = "repl:secret"
	appPassword         = "app secret"
	waitTimeout         = 2 * time.Minute
)

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
		fmt.Fprintln(os.Stderr, "SKIP: instance manager tests need PostgreSQL:", err)
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
	defer stopAPIServer()
	return m.Run()
}

// workDir makes a directory the postgres OS user owns, removed after the test.
func workDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tusk-instance-")
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

// node is one `tusk instance run` process.
type node struct {
	t        testing.TB
	name     string
	dir      string
	port     int
	httpPort int
	args     []string
	cmd      *exec.Cmd
	exited   chan struct{}
	// scheme and client reach the HTTP API: https with the operator's
	// client certificate when the node has TLS.
	scheme string
	client *http.Client
	mu     sync.Mutex
	output bytes.Buffer
}

type nodeOptions struct {
	role         instanceapi.Role
	upstreamPort int
	config       *instanceapi.Config
	// interruptedBootstrap leaves what a crash half-way through initdb
	// would: a partial data directory beside the real one.
	interruptedBootstrap bool
	// tls, when set, runs the node with --tls-dir and --replication-tls-dir
	// (and no replication password).
	tls *clusterPKI
	// extraArgs are appended to the command line.
	extraArgs []string
	// binDir, when set, runs another PostgreSQL than pgBinDir
	// (testenv.RequirePostgres16).
	binDir string
}

func writeSecret(t testing.TB, dir, name, value string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	chown(t, path)
	return path
}

func startNode(t testing.TB, name string, o nodeOptions) *node {
	t.Helper()
	n := &node{t: t, name: name, dir: workDir(t), port: testenv.FreePort(t), httpPort: testenv.FreePort(t),
		scheme: "http", client: http.DefaultClient}
	for _, sub := range []string{"socket", "run", "secrets"} {
		if err := os.Mkdir(filepath.Join(n.dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
		chown(t, filepath.Join(n.dir, sub))
	}
	if o.interruptedBootstrap {
		partial := filepath.Join(n.dir, "pgdata.tusk-bootstrap")
		if err := os.MkdirAll(filepath.Join(partial, "base"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(partial, "PG_VERSION"), []byte("15\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		chown(t, partial)
	}
	secrets := filepath.Join(n.dir, "secrets")
	args := []string{"instance", "run", "--name", name, "--cluster", n.cluster(),
		"--pgdata", filepath.Join(n.dir, "pgdata"), "--pg-bindir", cmp.Or(o.binDir, pgBinDir),
		"--port", strconv.Itoa(n.port), "--listen-addresses", "127.0.0.1",
		"--socket-dir", filepath.Join(n.dir, "socket"), "--run-dir", filepath.Join(n.dir, "run"),
		"--http-addr", fmt.Sprintf("127.0.0.1:%d", n.httpPort), "--role", string(o.role),
		"--upstream-host", "127.0.0.1", "--upstream-port", strconv.Itoa(o.upstreamPort),
		"--superuser-password-file", writeSecret(t, secrets, "superuser", superuserPassword),
		"--app-password-file", writeSecret(t, secrets, "app", appPassword),
		"--zap-log-level", "info",
	}
	if o.tls == nil {
		args = append(args, "--replication-password-file", writeSecret(t, secrets, "replication", replicationPassword))
	} else {
		args = append(args, o.tls.nodeArgs(n)...)
	}
	if o.config != nil {
		data, _ := json.Marshal(o.config)
		args = append(args, "--config-file", writeSecret(t, secrets, "config.json", string(data)))
	}
	n.start(append(args, o.extraArgs...))
	t.Cleanup(n.stopIfRunning)
	return n
}

func (n *node) start(args []string) {
	n.args = args
	n.exited = make(chan struct{})
	n.cmd = exec.Command(tuskBinary, args...)
	n.cmd.Stdout = n
	n.cmd.Stderr = n
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pgUser, Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	cmd, exited := n.cmd, n.exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
}

// rerun starts the manager again, as the kubelet restarts a container.
func (n *node) rerun() {
	n.t.Helper()
	select {
	case <-n.exited:
	default:
		n.t.Fatalf("%s is still running", n.name)
	}
	n.start(n.args)
}

// kill ends the manager with SIGKILL, as a node failure would: it releases
// nothing. Its postgres gets the parent-death signal and stops at once.
func (n *node) kill() {
	n.t.Helper()
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-n.exited:
	case <-time.After(waitTimeout):
		n.t.Fatalf("%s did not exit after SIGKILL", n.name)
	}
}

// Write collects the manager's output, shown when a test fails.
func (n *node) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.output.Write(p)
}

func (n *node) logs() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.output.String()
}

// stop sends SIGTERM and waits for the manager to exit.
func (n *node) stop() {
	n.t.Helper()
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(waitTimeout):
		n.t.Fatalf("%s did not stop within %s of SIGTERM:\n%s", n.name, waitTimeout, n.logs())
	}
}

func (n *node) stopIfRunning() {
	select {
	case <-n.exited:
	default:
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.exited:
		case <-time.After(waitTimeout):
			_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	if n.t.Failed() {
		n.t.Logf("output of %s:\n%s", n.name, n.logs())
	}
}

// waitLog waits until one line of the manager's output contains every one
// of parts, and returns when the test saw it: the line was written then or
// earlier.
func (n *node) waitLog(parts ...string) time.Time {
	n.t.Helper()
	testenv.Eventually(n.t, waitTimeout, func(context.Context) error {
		for line := range strings.Lines(n.logs()) {
			if containsAll(line, parts) {
				return nil
			}
		}
		return fmt.Errorf("%s logged no line with %q", n.name, parts)
	})
	return time.Now()
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// postgresProcesses lists this node's postmaster and its children.
func (n *node) postgresProcesses() []string {
	return processesMatching("postgres -D "+filepath.Join(n.dir, "pgdata"), "postgres: "+n.cluster()+":")
}

// cluster is the node's cluster_name, unique per node, so its processes'
// titles ("postgres: <cluster>: checkpointer") tell them apart.
func (n *node) cluster() string { return fmt.Sprintf("tusk%d", n.port) }

// leftovers lists processes of this node still running: the manager, the
// postmaster or any of its children.
func (n *node) leftovers() []string {
	return processesMatching(n.dir, "postgres: "+n.cluster()+":")
}

// metrics returns the manager's /metrics text.
func (n *node) metrics() string {
	n.t.Helper()
	resp, err := n.client.Get(n.url(instanceapi.PathMetrics))
	if err != nil {
		n.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		n.t.Fatal(err)
	}
	return string(data)
}

func (n *node) url(path string) string {
	return fmt.Sprintf("%s://127.0.0.1:%d%s", n.scheme, n.httpPort, path)
}

func (n *node) status(ctx context.Context) (instanceapi.Status, error) {
	var st instanceapi.Status
	code, err := n.call(ctx, http.MethodGet, instanceapi.PathStatus, nil, &st)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET /status: HTTP %d", code)
	}
	return st, err
}

// call sends a request to the manager and decodes its JSON reply into out.
func (n *node) call(ctx context.Context, method, path string, body, out any) (int, error) {
	var r io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, n.url(path), r)
	if err != nil {
		return 0, err
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decoding %s: %w", data, err)
		}
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, data)
	}
	return resp.StatusCode, nil
}

// command calls an operator command and fails the test if it fails.
func (n *node) command(method, path string, body, out any) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := n.call(ctx, method, path, body, out); err != nil {
		n.t.Fatalf("%s: %v\n%s", n.name, err, n.logs())
	}
}

// waitFor polls the manager's status until check passes.
func (n *node) waitFor(what string, check func(instanceapi.Status) error) instanceapi.Status {
	n.t.Helper()
	var st instanceapi.Status
	testenv.Eventually(n.t, waitTimeout, func(ctx context.Context) error {
		select {
		case <-n.exited:
			n.t.Fatalf("%s exited while waiting until %s:\n%s", n.name, what, n.logs())
		default:
		}
		var err error
		if st, err = n.status(ctx); err != nil {
			return err
		}
		return check(st)
	})
	return st
}

func (n *node) waitReady(role instanceapi.Role) instanceapi.Status {
	n.t.Helper()
	return n.waitFor("ready as "+string(role), func(st instanceapi.Status) error {
		if !st.Ready || st.Role != role {
			return fmt.Errorf("%s: ready=%v role=%s phase=%s error=%q", n.name, st.Ready, st.Role, st.Phase, st.LastError)
		}
		return nil
	})
}

// tryConnect opens a session over TCP, as a client would. The caller
// closes it: sessions left open would pile up to max_connections while a
// test polls, and hold up a smart shutdown.
func (n *node) tryConnect(ctx context.Context, user, password, database string) (*pgx.Conn, error) {
	if user == "postgres" {
		// The superuser logs in over the Unix socket only, as with
		// kubectl exec in a pod.
		return n.connectAs(ctx, fmt.Sprintf("host=%s port=%d", filepath.Join(n.dir, "socket"), n.port), user, password, database)
	}
	return n.connectOverTCP(ctx, user, password, database)
}

// connectOverTCP opens a session over TCP whatever the user.
func (n *node) connectOverTCP(ctx context.Context, user, password, database string) (*pgx.Conn, error) {
	// TLS when the node has it (its pg_hba.conf then requires it), plain
	// otherwise. The host goes into the string: pgx derives the TLS
	// settings of each attempt from it.
	return n.connectAs(ctx, fmt.Sprintf("host=127.0.0.1 port=%d sslmode=prefer", n.port), user, password, database)
}

func (n *node) connectAs(ctx context.Context, conninfo, user, password, database string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(conninfo)
	if err != nil {
		return nil, err
	}
	cfg.User, cfg.Password, cfg.Database = user, password, database
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s as %s: %w", n.name, user, err)
	}
	return conn, nil
}

// withConn runs fn in a new session and closes it, failing the test when
// the session cannot be opened.
func (n *node) withConn(user, password, database string, fn func(*pgx.Conn) error) {
	n.t.Helper()
	conn, err := n.tryConnect(context.Background(), user, password, database)
	if err != nil {
		n.t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if err := fn(conn); err != nil {
		n.t.Fatalf("%s: %v", n.name, err)
	}
}

func (n *node) exec(sql string) {
	n.t.Helper()
	n.withConn("postgres", superuserPassword, "app", func(conn *pgx.Conn) error {
		_, err := conn.Exec(context.Background(), sql)
		return err
	})
}

// ids returns the sorted ids in table t as seen on n.
func (n *node) ids(ctx context.Context) ([]int, error) {
	conn, err := n.tryConnect(ctx, "postgres", superuserPassword, "app")
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(ctx, "SELECT id FROM t ORDER BY id")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// waitIDs waits until n has exactly the ids want.
func (n *node) waitIDs(want ...int) {
	n.t.Helper()
	testenv.Eventually(n.t, waitTimeout, func(ctx context.Context) error {
		got, err := n.ids(ctx)
		if err != nil {
			return err
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("%s has rows %v, want %v", n.name, got, want)
		}
		return nil
	})
}

// lsn is the primary n's current WAL write position.
func (n *node) lsn() string {
	n.t.Helper()
	var lsn string
	n.withConn("postgres", superuserPassword, "app", func(conn *pgx.Conn) error {
		return conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	})
	return lsn
}

// waitReplayed waits until the replica n has replayed WAL up to lsn.
func (n *node) waitReplayed(lsn string) {
	n.t.Helper()
	testenv.Eventually(n.t, waitTimeout, func(ctx context.Context) error {
		conn, err := n.tryConnect(ctx, "postgres", superuserPassword, "app")
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(context.Background()) }()
		var replayed bool
		if err := conn.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&replayed); err != nil {
			return err
		}
		if !replayed {
			return fmt.Errorf("%s has not replayed up to %s yet", n.name, lsn)
		}
		return nil
	})
}

// postmasterPid reads the running postmaster's PID from postmaster.pid.
func (n *node) postmasterPid() int {
	n.t.Helper()
	data, err := os.ReadFile(filepath.Join(n.dir, "pgdata", "postmaster.pid"))
	if err != nil {
		n.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(data), "\n", 2)[0])
	if err != nil {
		n.t.Fatal(err)
	}
	return pid
}

// processesMatching lists running processes whose command line contains
// any of patterns.
func processesMatching(patterns ...string) []string {
	var found []string
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, path := range cmdlines {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		line := strings.ReplaceAll(string(data), "\x00", " ")
		for _, p := range patterns {
			if strings.Contains(line, p) {
				found = append(found, filepath.Base(filepath.Dir(path))+": "+line)
				break
			}
		}
	}
	return found
}
