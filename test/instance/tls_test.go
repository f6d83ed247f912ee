//go:build integration

package instance

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instance"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/pki"
	"tusk.dev/tusk/internal/testenv"
)

// clusterPKI is the TLS material the operator makes for one cluster: ca
// issues the server certificate, clientCA the client certificates (one
// CA, unless ca is a user's that other clusters may share).
type clusterPKI struct {
	t        testing.TB
	ca       pki.KeyPair
	clientCA pki.KeyPair
	server   pki.KeyPair
	repl     pki.KeyPair
	operator pki.KeyPair
}

func newClusterPKI(t testing.TB) *clusterPKI {
	t.Helper()
	ca, err := pki.NewCA("tusk test cluster CA", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return newClusterPKIFrom(t, ca, ca)
}

// newClusterPKIFrom makes a cluster's material from a server CA and a
// client CA.
func newClusterPKIFrom(t testing.TB, ca, clientCA pki.KeyPair) *clusterPKI {
	t.Helper()
	p := &clusterPKI{t: t, ca: ca, clientCA: clientCA}
	p.server = p.issueServer()
	p.repl = p.issueClient("tusk_replication")
	operator, err := pki.IssueIdentityClient(clientCA, instanceapi.DefaultAPIClientCN, instanceapi.OperatorIdentity, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.operator = operator
	return p
}

// issueServer makes a server certificate for the names replicas and tests
// use to reach an instance here: 127.0.0.1.
func (p *clusterPKI) issueServer() pki.KeyPair {
	p.t.Helper()
	kp, err := pki.IssueServer(p.ca, "tusk-test-rw", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	return kp
}

func (p *clusterPKI) issueClient(cn string) pki.KeyPair {
	p.t.Helper()
	kp, err := pki.IssueClient(p.clientCA, cn, time.Hour, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	return kp
}

func (p *clusterPKI) roots() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.ca.CertPEM)
	return pool
}

// httpClient verifies the instance's certificate and presents client (or
// no certificate when nil). Each request uses a new connection, so a
// rotated server certificate shows at once.
func (p *clusterPKI) httpClient(client *pki.KeyPair) *http.Client {
	cfg := &tls.Config{RootCAs: p.roots(), MinVersion: tls.VersionTLS12}
	if client != nil {
		cert, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
		if err != nil {
			p.t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}, Timeout: 30 * time.Second}
}

// nodeArgs mounts the server and replication certificates into n's
// directory, as the kubelet does, makes the test talk HTTPS to n as the
// operator, and returns the flags.
func (p *clusterPKI) nodeArgs(n *node) []string {
	serverDir, replDir := filepath.Join(n.dir, "tls"), filepath.Join(n.dir, "replication-tls")
	// As the operator mounts them: the server's ca.crt is the CA it trusts
	// clients from, the replication one's the CA of servers.
	mountCerts(n.t, serverDir, p.server, p.clientCA)
	mountCerts(n.t, replDir, p.repl, p.ca)
	n.scheme, n.client = "https", p.httpClient(&p.operator)
	return []string{"--tls-dir", serverDir, "--replication-tls-dir", replDir}
}

// mountCerts writes tls.crt, tls.key and ca.crt into dir the way the
// kubelet updates a Secret volume: the files are symlinks into ..data,
// itself a symlink to a timestamped directory, swapped atomically. Modes
// are the kubelet's default 0644, which PostgreSQL refuses for a key.
func mountCerts(t testing.TB, dir string, kp, ca pki.KeyPair) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	version := filepath.Join(dir, fmt.Sprintf("..%d", time.Now().UnixNano()))
	if err := os.Mkdir(version, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM, "ca.crt": ca.CertPEM} {
		if err := os.WriteFile(filepath.Join(version, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(version), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func serial(t testing.TB, kp pki.KeyPair) *big.Int {
	t.Helper()
	cert, err := pki.ParseCertificate(kp.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber
}

// TestTLS runs a primary and a replica with the cluster's certificates:
// replication over TLS authenticated by a client certificate, the HTTP API
// behind client certificates, a server certificate rotated in place, and a
// failover whose pg_rewind verifies the new primary.
func TestTLS(t *testing.T) {
	p := newClusterPKI(t)
	primary := startNode(t, "tls-1", nodeOptions{role: instanceapi.RolePrimary, tls: p})
	primary.waitReady(instanceapi.RolePrimary)
	primary.exec("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
	replica := startNode(t, "tls-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port, tls: p})
	replica.waitReady(instanceapi.RoleReplica)
	replica.waitIDs(1)

	t.Run("replication uses TLS and certificate authentication", func(t *testing.T) {
		assertCertReplication(t, primary, "tls-2")
		var conninfo string
		replica.withConn("postgres", superuserPassword, "postgres", func(conn *pgx.Conn) error {
			return conn.QueryRow(context.Background(), "SHOW primary_conninfo").Scan(&conninfo)
		})
		if !strings.Contains(conninfo, "sslmode=verify-full") || !strings.Contains(conninfo, "sslcert=") {
			t.Errorf("primary_conninfo %q does not verify the primary with a client certificate", conninfo)
		}
	})
	t.Run("the API needs the operator's client certificate", func(t *testing.T) { testAPIClientCerts(t, p, primary) })
	t.Run("a rotated server certificate is used", func(t *testing.T) { testServerCertRotation(t, p, primary) })

	// Failover: the replica is promoted, and the former primary rejoins it
	// with pg_rewind, which verifies the new primary's certificate.
	replica.command(http.MethodPost, instanceapi.PathPromote, nil, &instance.PromoteResult{})
	replica.waitReady(instanceapi.RolePrimary)
	primary.exec("INSERT INTO t VALUES (100)")
	primary.command(http.MethodPost, instanceapi.PathDemote, instanceapi.FollowRequest{Upstream: instanceapi.Upstream{Host: "127.0.0.1", Port: replica.port}}, nil)
	primary.waitReady(instanceapi.RoleReplica)
	replica.exec("INSERT INTO t VALUES (2)")
	primary.waitIDs(1, 2)
	if logs := primary.logs(); !strings.Contains(logs, `"logger":"pg_rewind"`) || strings.Contains(logs, "copying the primary afresh") {
		t.Errorf("the former primary did not rejoin through pg_rewind:\n%s", logs)
	}
	assertCertReplication(t, replica, "tls-1")
}

// assertCertReplication checks on primary that standby streams over TLS as
// tusk_replication with its client certificate, and that this role has no
// password: hba's cert method let it in.
func assertCertReplication(t *testing.T, primary *node, standby string) {
	t.Helper()
	var ssl, noPassword bool
	var dn string
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		conn, err := primary.tryConnect(ctx, "postgres", superuserPassword, "postgres")
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(context.Background()) }()
		return conn.QueryRow(ctx, `SELECT s.ssl, coalesce(s.client_dn, ''),
			(SELECT rolpassword IS NULL FROM pg_authid WHERE rolname = 'tusk_replication')
			FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid)
			WHERE r.application_name = $1 AND r.state = 'streaming' AND r.usename = 'tusk_replication'`, standby).
			Scan(&ssl, &dn, &noPassword)
	})
	if !ssl || dn != "/CN=tusk_replication" || !noPassword {
		t.Fatalf("walsender for %s: ssl=%v client_dn=%q, tusk_replication without password=%v", standby, ssl, dn, noPassword)
	}
}

func testAPIClientCerts(t *testing.T, p *clusterPKI, n *node) {
	stranger := p.issueClient("somebody")
	// A PostgresRole named tusk-operator: its certificate comes from the
	// client CA with the role's name as CommonName, as the operator issues
	// it (sql_rolecert.go).
	role := p.issueClient(instanceapi.DefaultAPIClientCN)
	tests := []struct {
		name     string
		client   *http.Client
		path     string
		wantCode int
	}{
		{"status without a certificate", p.httpClient(nil), instanceapi.PathStatus, http.StatusUnauthorized},
		{"status as another CN", p.httpClient(&stranger), instanceapi.PathStatus, http.StatusForbidden},
		{"promote as another CN", p.httpClient(&stranger), instanceapi.PathPromote, http.StatusForbidden},
		{"status as a role named tusk-operator", p.httpClient(&role), instanceapi.PathStatus, http.StatusForbidden},
		{"promote as a role named tusk-operator", p.httpClient(&role), instanceapi.PathPromote, http.StatusForbidden},
		{"status as the operator", p.httpClient(&p.operator), instanceapi.PathStatus, http.StatusOK},
		{"readyz without a certificate", p.httpClient(nil), instanceapi.PathReadyz, http.StatusOK},
		{"healthz without a certificate", p.httpClient(nil), instanceapi.PathHealthz, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := http.MethodGet
			if tt.path == instanceapi.PathPromote {
				method = http.MethodPost
			}
			req, _ := http.NewRequestWithContext(context.Background(), method, n.url(tt.path), nil)
			resp, err := tt.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("%s %s: HTTP %d, want %d", method, tt.path, resp.StatusCode, tt.wantCode)
			}
		})
	}
	// The kubelet's HTTPS probes verify nothing and present nothing.
	probe := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := probe.Get(n.url(instanceapi.PathReadyz))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("kubelet-style readiness probe: %v %v", resp, err)
	}
	_ = resp.Body.Close()
}

// testServerCertRotation renews the server certificate in place, as the
// kubelet does when the operator updates the Secret, and asks the manager
// to look at once (SIGHUP; the poll would find it later): new connections
// to the API and to PostgreSQL get the new certificate.
func testServerCertRotation(t *testing.T, p *clusterPKI, n *node) {
	renewed := p.issueServer()
	mountCerts(t, filepath.Join(n.dir, "tls"), renewed, p.clientCA)
	if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	want := serial(t, renewed)
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		api, err := n.apiServerSerial(ctx, p)
		if err != nil {
			return err
		}
		pg, err := n.postgresServerSerial(ctx, p)
		if err != nil {
			return err
		}
		if api.Cmp(want) != 0 || pg.Cmp(want) != 0 {
			return fmt.Errorf("serving serials %x (API) and %x (PostgreSQL), want %x", api, pg, want)
		}
		return nil
	})
	if !strings.Contains(n.logs(), "Reloading postgres for the new certificate") {
		t.Error("the manager did not say it reloaded postgres for the new certificate")
	}
}

func (n *node) apiServerSerial(ctx context.Context, p *clusterPKI) (*big.Int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.url(instanceapi.PathHealthz), nil)
	resp, err := p.httpClient(nil).Do(req)
	if err != nil {
		return nil, err
	}
	_ = resp.Body.Close()
	return resp.TLS.PeerCertificates[0].SerialNumber, nil
}

// postgresServerSerial connects over TLS only, verifying the server's
// certificate against the cluster's CA, and returns its serial number.
func (n *node) postgresServerSerial(ctx context.Context, p *clusterPKI) (*big.Int, error) {
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database = "127.0.0.1", uint16(n.port), "app", appPassword, "app"
	var got *big.Int
	cfg.TLSConfig = &tls.Config{RootCAs: p.roots(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			got = cs.PeerCertificates[0].SerialNumber
			return nil
		}}
	cfg.Fallbacks = nil
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	_ = conn.Close(context.Background())
	return got, nil
}

// TestSharedServerCAIsNoClientCredential: two clusters whose server
// certificates come from one user CA, each with a client CA of its own (as
// the operator makes them). Cluster A's replication certificate streams
// from A and is refused by B's PostgreSQL; A's operator certificate is
// refused by B's instance API. Both connect and verify B's server by the
// shared CA.
func TestSharedServerCAIsNoClientCredential(t *testing.T) {
	shared, err := pki.NewCA("a user's CA, shared", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	clusterPKIWithOwnClientCA := func() *clusterPKI {
		own, err := pki.NewCA("tusk test client CA", time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return newClusterPKIFrom(t, shared, own)
	}
	a, b := clusterPKIWithOwnClientCA(), clusterPKIWithOwnClientCA()
	primaryB := startNode(t, "shared-b1", nodeOptions{role: instanceapi.RolePrimary, tls: b})
	primaryB.waitReady(instanceapi.RolePrimary)
	replicaB := startNode(t, "shared-b2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primaryB.port, tls: b})
	replicaB.waitReady(instanceapi.RoleReplica)
	assertCertReplication(t, primaryB, "shared-b2")

	dir := workDir(t)
	connectAsReplication := func(p *clusterPKI) error {
		certFile, keyFile, caFile := filepath.Join(dir, "repl.crt"), filepath.Join(dir, "repl.key"), filepath.Join(dir, "ca.crt")
		for path, data := range map[string][]byte{certFile: p.repl.CertPEM, keyFile: p.repl.KeyPEM, caFile: shared.CertPEM} {
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%d user=tusk_replication dbname=postgres sslmode=verify-full "+
			"sslcert=%s sslkey=%s sslrootcert=%s", primaryB.port, certFile, keyFile, caFile))
		if err == nil {
			_ = conn.Close(context.Background())
		}
		return err
	}
	if err := connectAsReplication(b); err != nil {
		t.Fatalf("B's own replication certificate: %v", err)
	}
	if err := connectAsReplication(a); err == nil {
		t.Fatal("A's replication certificate logged in to B's PostgreSQL")
	}

	resp, err := a.httpClient(&a.operator).Get(primaryB.url(instanceapi.PathStatus))
	if err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("A's operator certificate was served B's /status")
		}
	}
	if _, err := b.httpClient(&b.operator).Get(primaryB.url(instanceapi.PathStatus)); err != nil {
		t.Fatalf("B's operator certificate: %v", err)
	}
}
