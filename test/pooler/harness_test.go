//go:build integration

// Package pooler tests PgBouncer configured as Tusk's pooler runs it
// (internal/pooler's builders) against real PostgreSQL servers on this
// host: authentication through the auth role, TLS on both sides, and the
// PAUSE, repoint and RESUME a switchover will rely on.
package pooler

import (
	"bytes"
	"context"
	"fmt"
	"net"
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

	"tusk.dev/tusk/internal/pki"
	"tusk.dev/tusk/internal/pooler"
	"tusk.dev/tusk/internal/testenv"
)

const (
	authRole    = pooler.AuthRole
	appUser     = "app"
	appPassword = "app secret"
	waitTimeout = time.Minute
)

var (
	pgBinDir  string
	pgbouncer string
	pgUser    *syscall.Credential
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var errPG, errBouncer error
	pgBinDir, errPG = testenv.PostgresBinDir()
	pgbouncer, errBouncer = testenv.PgBouncerProgram()
	if err := errorsJoin(errPG, errBouncer); err != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "SKIP: the pooler tests need PostgreSQL and PgBouncer:", err)
		return 0
	}
	var err error
	if pgUser, err = testenv.PostgresCredential(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func errorsJoin(errs ...error) error {
	var msgs []string
	for _, err := range errs {
		if err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

// workDir makes a directory the postgres OS user owns (PostgreSQL and
// PgBouncer run as that user when the tests run as root).
func workDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tusk-pooler-")
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

// writeFile writes a file only its owner (the postgres OS user) reads:
// PostgreSQL refuses a key others can read.
func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	chown(t, path)
	return path
}

// clusterPKI is a cluster's CA and what it signs for the pooler's tests.
type clusterPKI struct {
	ca pki.KeyPair
}

func newClusterPKI(t testing.TB) *clusterPKI {
	t.Helper()
	ca, err := pki.NewCA("tusk pooler test CA", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &clusterPKI{ca: ca}
}

// server issues a server certificate for 127.0.0.1 only: the servers also
// listen on 127.0.0.2, a name their certificate does not have.
func (p *clusterPKI) server(t testing.TB, cn string) pki.KeyPair {
	t.Helper()
	kp, err := pki.IssueServer(p.ca, cn, nil, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func (p *clusterPKI) client(t testing.TB, cn string) pki.KeyPair {
	t.Helper()
	kp, err := pki.IssueClient(p.ca, cn, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// writeTLS writes kp and the CA into dir as <name>.crt, <name>.key, ca.crt.
func (p *clusterPKI) writeTLS(t testing.TB, dir, name string, kp pki.KeyPair) (cert, key, ca string) {
	t.Helper()
	return writeFile(t, dir, name+".crt", kp.CertPEM), writeFile(t, dir, name+".key", kp.KeyPEM),
		writeFile(t, dir, "ca.crt", p.ca.CertPEM)
}

// runAsPostgres runs a program as the postgres OS user, failing the test
// with its output if it fails.
func runAsPostgres(t testing.TB, name string, args ...string) {
	t.Helper()
	out, err := commandAsPostgres(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
}

func commandAsPostgres(name string, args ...string) *exec.Cmd {
	return commandAsPostgresContext(context.Background(), name, args...)
}

// commandAsPostgresContext is commandAsPostgres killed when ctx ends.
func commandAsPostgresContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pgUser}
	return cmd
}

// server is one PostgreSQL server: TLS with the cluster's CA, the auth role
// in by client certificate only, everyone else by SCRAM over TLS.
type server struct {
	name   string
	dir    string
	socket string
	port   int
}

func startServer(t testing.TB, p *clusterPKI, name string) *server {
	t.Helper()
	s := &server{name: name, dir: workDir(t), port: testenv.FreePort(t)}
	s.socket = s.dir
	runAsPostgres(t, filepath.Join(pgBinDir, "initdb"), "-D", s.pgdata(), "-U", "postgres", "--auth-local=trust",
		"--auth-host=reject", "--no-sync")
	cert, key, ca := p.writeTLS(t, s.pgdata(), "server", p.server(t, name))
	writeFile(t, s.pgdata(), "pg_hba.conf", []byte(fmt.Sprintf(`local all postgres trust
hostssl all %s 127.0.0.0/8 cert
hostssl all all 127.0.0.0/8 scram-sha-256
`, authRole)))
	conf := fmt.Sprintf(`listen_addresses = '127.0.0.1,127.0.0.2'
port = %d
unix_socket_directories = '%s'
cluster_name = '%s'
ssl = on
ssl_cert_file = '%s'
ssl_key_file = '%s'
ssl_ca_file = '%s'
fsync = off
`, s.port, s.socket, name, cert, key, ca)
	f, err := os.OpenFile(filepath.Join(s.pgdata(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(conf)
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	runAsPostgres(t, filepath.Join(pgBinDir, "pg_ctl"), "start", "-w", "-D", s.pgdata(), "-l", filepath.Join(s.dir, "log"))
	t.Cleanup(func() {
		_ = commandAsPostgres(filepath.Join(pgBinDir, "pg_ctl"), "stop", "-m", "immediate", "-D", s.pgdata()).Run()
	})
	return s
}

func (s *server) pgdata() string { return filepath.Join(s.dir, "pgdata") }

// superuser connects over the Unix socket (trust).
func (s *server) superuser(t testing.TB, db string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), fmt.Sprintf("host=%s port=%d user=postgres dbname=%s", s.socket, s.port, db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func exec1(t testing.TB, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// prepare makes what the operator will: the auth role (a login with no
// password) and its lookup function, the application's role and database.
// verifier, when set, is the application role's password verifier, so
// that a second server holds the same one (as a replica does).
func (s *server) prepare(t testing.TB, verifier string) {
	t.Helper()
	conn := s.superuser(t, "postgres")
	exec1(t, conn, "SET password_encryption = 'scram-sha-256'")
	exec1(t, conn, "CREATE ROLE "+authRole+" LOGIN")
	for _, stmt := range pooler.AuthFunctionSQL(authRole) {
		exec1(t, conn, stmt)
	}
	password := appPassword
	if verifier != "" {
		password = verifier
	}
	exec1(t, conn, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", appUser, strings.ReplaceAll(password, "'", "''")))
	exec1(t, conn, "CREATE DATABASE "+appUser+" OWNER "+appUser)
	exec1(t, s.superuser(t, appUser), "CREATE TABLE t (id bigserial PRIMARY KEY, client int, at timestamptz DEFAULT now())")
	exec1(t, s.superuser(t, appUser), "ALTER TABLE t OWNER TO "+appUser)
}

func (s *server) appVerifier(t testing.TB) string {
	t.Helper()
	var v string
	if err := s.superuser(t, "postgres").QueryRow(context.Background(),
		"SELECT rolpassword FROM pg_authid WHERE rolname = $1", appUser).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// bouncer is one PgBouncer process.
type bouncer struct {
	t      testing.TB
	dir    string
	config pooler.Config
	cmd    *exec.Cmd
	mu     sync.Mutex
	log    bytes.Buffer
	exited chan struct{}
	// ctx ends when the test does, killing an admin command still
	// waiting for an answer (a PAUSE that never completes).
	ctx context.Context
}

// poolerConfig is the configuration Tusk's pooler runs with, pointed at
// host:port; the TLS files are written into dir.
func poolerConfig(t testing.TB, p *clusterPKI, dir, host string, port int) pooler.Config {
	t.Helper()
	authCert, authKey, ca := p.writeTLS(t, dir, "auth", p.client(t, authRole))
	cert, key, _ := p.writeTLS(t, dir, "pooler", p.server(t, "pooler"))
	return pooler.Config{
		ListenAddr: "127.0.0.1", ListenPort: testenv.FreePort(t), SocketDir: dir,
		ServerHost: host, ServerPort: port, PoolMode: pooler.PoolModeTransaction,
		Pools:    pooler.PoolSizes{DefaultPoolSize: 5, MaxClientConn: 200},
		AuthRole: authRole, AuthDatabase: "postgres",
		ServerTLS:  pooler.ServerTLS{CAFile: ca, CertFile: authCert, KeyFile: authKey},
		ClientTLS:  pooler.ClientTLS{CertFile: cert, KeyFile: key, CAFile: ca, Required: true},
		Parameters: map[string]string{"server_login_retry": "1"},
	}
}

func startBouncer(t testing.TB, dir string, c pooler.Config) *bouncer {
	t.Helper()
	return startPeer(t, dir, c, 0)
}

// startPeer starts PgBouncer as `tusk pooler` does when peerID is set: on
// pooler.PeerINI, which includes the configuration and sets peer_id.
func startPeer(t testing.TB, dir string, c pooler.Config, peerID int) *bouncer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &bouncer{t: t, dir: dir, config: c, exited: make(chan struct{}), ctx: ctx}
	b.writeConfig(c)
	config := b.iniPath()
	if peerID != 0 {
		ini, err := pooler.PeerINI(config, peerID)
		if err != nil {
			t.Fatal(err)
		}
		config = writeFile(t, dir, "peer.ini", []byte(ini))
	}
	b.cmd = exec.Command(pgbouncer, config)
	b.cmd.Stdout, b.cmd.Stderr = b, b
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pgUser, Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = b.cmd.Wait()
		close(b.exited)
	}()
	t.Cleanup(b.stop)
	t.Cleanup(cancel) // first: cleanups run last registered first
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		select {
		case <-b.exited:
			t.Fatalf("pgbouncer exited:\n%s", b.output())
		default:
		}
		_, err := os.Stat(filepath.Join(dir, ".s.PGSQL."+strconv.Itoa(c.ListenPort)))
		return err
	})
	return b
}

func (b *bouncer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.log.Write(p)
}

func (b *bouncer) output() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.log.String()
}

func (b *bouncer) iniPath() string { return filepath.Join(b.dir, "pgbouncer.ini") }

func (b *bouncer) writeConfig(c pooler.Config) {
	b.t.Helper()
	ini, err := pooler.INI(c)
	if err != nil {
		b.t.Fatal(err)
	}
	writeFile(b.t, b.dir, "pgbouncer.ini", []byte(ini))
	b.config = c
}

// stop sends SIGINT (PgBouncer's immediate shutdown) and waits for it.
func (b *bouncer) stop() {
	_ = b.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-b.exited:
	case <-time.After(waitTimeout):
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		<-b.exited
	}
	if b.t.Failed() {
		b.t.Logf("pgbouncer's log:\n%s", b.output())
	}
}

// admin runs one command on PgBouncer's admin console over its Unix
// socket, as the OS user PgBouncer runs as (peer authentication, as the
// pooler's pod will), and returns psql's output and how long it took.
func (b *bouncer) admin(command string) (string, time.Duration, error) {
	start := time.Now()
	out, err := commandAsPostgresContext(b.ctx, filepath.Join(pgBinDir, "psql"), "-X", "-A", "-t", "-h", b.dir,
		"-p", strconv.Itoa(b.config.ListenPort), "-U", "pgbouncer", "-d", "pgbouncer", "-c", command).CombinedOutput()
	if err != nil {
		err = fmt.Errorf("%s: %w: %s", command, err, out)
	}
	return string(out), time.Since(start), err
}

func (b *bouncer) mustAdmin(command string) time.Duration {
	b.t.Helper()
	_, took, err := b.admin(command)
	if err != nil {
		b.t.Fatal(err)
	}
	return took
}

// clientDSN is how an application reaches the pooler: TLS, the pooler's
// certificate verified against the cluster's CA.
func (b *bouncer) clientDSN(user, password, sslmode string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s password='%s' dbname=%s sslmode=%s sslrootcert=%s",
		b.config.ListenPort, user, strings.ReplaceAll(password, "'", `\'`), appUser, sslmode, b.config.ServerTLS.CAFile)
}

func (b *bouncer) connect(t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), b.clientDSN(appUser, appPassword, "verify-full"))
	if err != nil {
		t.Fatalf("connecting through the pooler: %v\n%s", err, b.output())
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}
