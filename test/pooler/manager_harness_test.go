//go:build integration

package pooler

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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
	"tusk.dev/tusk/internal/pki"
	"tusk.dev/tusk/internal/pooler"
	"tusk.dev/tusk/internal/testenv"
)

// The tusk binary, built once for the tests that run the pooler manager.
var (
	buildOnce sync.Once
	tuskBin   string
	errBuild  error
)

func tuskBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		// Removed with the machine's temporary files: TestMain cannot know
		// whether a manager test ran.
		tuskBin, _, errBuild = testenv.BuildTuskForPostgres()
	})
	if errBuild != nil {
		t.Fatal(errBuild)
	}
	return tuskBin
}

// managed is a real `tusk pooler` process running PgBouncer on config,
// as a pooler pod runs it (as PostgreSQL's OS user when the tests run as
// root), with its API's certificates from the cluster's CA.
type managed struct {
	t       testing.TB
	pki     *clusterPKI
	config  pooler.Config
	cmd     *exec.Cmd
	mu      sync.Mutex
	log     bytes.Buffer
	exited  chan struct{}
	exitErr error
	api     string
	// dir holds the API's files and the auth certificate.
	dir string
	// operator presents the operator's client certificate.
	operator *http.Client
}

func startManaged(t testing.TB, p *clusterPKI, dir string, c pooler.Config, flags ...string) *managed {
	t.Helper()
	ini, err := pooler.INI(c)
	if err != nil {
		t.Fatal(err)
	}
	m := launchManaged(t, p, dir, ini, flags...)
	m.config = c
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		select {
		case <-m.exited:
			t.Fatalf("tusk pooler exited: %v\n%s", m.exitErr, m.output())
		default:
		}
		code, body, err := m.request(ctx, nil, http.MethodGet, "/readyz", nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("readyz: %d %s", code, body)
		}
		return err
	})
	return m
}

// launchManaged starts tusk pooler on ini, its API's files in dir, with
// flags added to the pod's.
func launchManaged(t testing.TB, p *clusterPKI, dir, ini string, flags ...string) *managed {
	t.Helper()
	configPath := writeFile(t, dir, "pgbouncer.ini", []byte(ini))
	api, err := pki.IssueServer(p.ca, "pooler", []string{"localhost"}, nil, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m := &managed{t: t, pki: p, dir: dir, exited: make(chan struct{}), api: "https://localhost:" + strconv.Itoa(testenv.FreePort(t))}
	args := []string{"pooler", "--pgbouncer=" + pgbouncer, "--config=" + configPath, "--run-dir=" + dir,
		"--port=" + strings.TrimPrefix(m.api, "https://localhost:"),
		"--tls-cert=" + writeFile(t, dir, "api.crt", api.CertPEM), "--tls-key=" + writeFile(t, dir, "api.key", api.KeyPEM),
		"--client-ca=" + writeFile(t, dir, "client-ca.crt", p.ca.CertPEM), "--shutdown-timeout=20s",
		// The auth certificate poolerConfig writes, as the pod's flag names
		// the mounted Secret's.
		"--auth-cert=" + filepath.Join(dir, "auth.crt")}
	m.cmd = exec.Command(tuskBinary(t), append(args, flags...)...)
	m.cmd.Stdout, m.cmd.Stderr = m, m
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pgUser, Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		m.exitErr = m.cmd.Wait()
		close(m.exited)
	}()
	t.Cleanup(m.stop)
	operator, err := pki.IssueIdentityClient(p.ca, instanceapi.DefaultAPIClientCN, instanceapi.OperatorIdentity, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m.operator = m.client(&operator)
	return m
}

func (m *managed) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.log.Write(p)
}

func (m *managed) output() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.log.String()
}

// stop sends SIGTERM, as the kubelet does, and waits for the manager.
func (m *managed) stop() {
	start := time.Now()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
		// No client is in a transaction by now: a safe shutdown is quick.
		if took := time.Since(start); took > 10*time.Second {
			m.t.Errorf("tusk pooler took %s to stop", took)
		}
	case <-time.After(waitTimeout):
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		<-m.exited
	}
	if m.t.Failed() {
		m.t.Logf("tusk pooler's log:\n%s", m.output())
	}
}

// client trusts the cluster's CA and presents cert, if any.
func (m *managed) client(cert *pki.KeyPair) *http.Client {
	m.t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(m.pki.ca.CertPEM)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		pair, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
		if err != nil {
			m.t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: waitTimeout}
}

func (m *managed) request(ctx context.Context, c *http.Client, method, path string, body any) (int, []byte, error) {
	if c == nil {
		c = m.client(nil)
	}
	var in io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		in = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, m.api+path, in)
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// call sends an operator's request and decodes a 200 answer into out.
func (m *managed) call(method, path string, body, out any) error {
	code, answer, err := m.request(context.Background(), m.operator, method, path, body)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, path, code, answer)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(answer, out)
}

func (m *managed) mustCall(method, path string, body, out any) {
	m.t.Helper()
	if err := m.call(method, path, body, out); err != nil {
		m.t.Fatal(err)
	}
}

// metrics is the text of a scrape.
func (m *managed) metrics(t testing.TB) string {
	t.Helper()
	code, body, err := m.request(context.Background(), nil, http.MethodGet, "/metrics", nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("scraping: %d %v", code, err)
	}
	return string(body)
}

// hasSample says whether the scrape holds the line "name value".
func hasSample(scrape, name string, value float64) error {
	want := name + " " + strconv.FormatFloat(value, 'g', -1, 64)
	for _, line := range strings.Split(scrape, "\n") {
		if line == want {
			return nil
		}
	}
	return errors.New("no sample " + want)
}

// connect logs in through PgBouncer as the application.
func (m *managed) connect(t testing.TB) *pgx.Conn {
	t.Helper()
	dsn := fmt.Sprintf("host=127.0.0.1 port=%d user=%s password='%s' dbname=%s sslmode=verify-full sslrootcert=%s",
		m.config.ListenPort, appUser, appPassword, appUser, m.config.ServerTLS.CAFile)
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatalf("connecting through the managed pooler: %v\n%s", err, m.output())
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// startManagedPooler is a PostgreSQL server and a managed pooler in front
// of it.
func startManagedPooler(t *testing.T) (*server, *managed) {
	t.Helper()
	p := newClusterPKI(t)
	s := startServer(t, p, "a")
	s.prepare(t, "")
	dir := workDir(t)
	return s, startManaged(t, p, dir, poolerConfig(t, p, dir, "127.0.0.1", s.port))
}

// pgbouncerPID is the manager's PgBouncer child, 0 when none runs.
func (m *managed) pgbouncerPID(t testing.TB) int {
	t.Helper()
	out, err := exec.Command("pgrep", "-P", strconv.Itoa(m.cmd.Process.Pid), "-x", "pgbouncer").Output()
	if err != nil {
		return 0 // pgrep exits 1 when nothing matches
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("pgrep: %q: %v", out, err)
	}
	return pid
}

// admin runs command on the managed PgBouncer's admin console, as the
// pooler manager reaches it: over the Unix socket in dir, as its OS user.
func (m *managed) admin(t testing.TB, dir, command string) string {
	t.Helper()
	out, err := commandAsPostgres(filepath.Join(pgBinDir, "psql"), "-X", "-A", "-t", "-F", "|", "-h", dir,
		"-p", strconv.Itoa(m.config.ListenPort), "-U", "pgbouncer", "-d", "pgbouncer", "-c", command).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s\n%s", command, err, out, m.output())
	}
	return string(out)
}
