package instance

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"tusk.dev/tusk/internal/instance/pgconf"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/pki"
)

// tlsFixture is a manager with --tls-dir serving its HTTP API over HTTPS on
// a loopback port, without postgres.
type tlsFixture struct {
	m      *Manager
	ca     pki.KeyPair
	tlsDir string
	addr   string
}

func writeCertDir(t *testing.T, dir string, kp, ca pki.KeyPair) {
	t.Helper()
	// Mounted Secret files are often readable by others; the copies must not be.
	for name, data := range map[string][]byte{tlsCertFile: kp.CertPEM, tlsKeyFile: kp.KeyPEM, tlsCAFile: ca.CertPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func issueServer(t *testing.T, ca pki.KeyPair) pki.KeyPair {
	t.Helper()
	kp, err := pki.IssueServer(ca, "pg-1", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func newTLSFixture(t *testing.T) *tlsFixture {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA("test CA", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tlsDir := filepath.Join(dir, "mounted-tls")
	if err := os.Mkdir(tlsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeCertDir(t, tlsDir, issueServer(t, ca), ca)
	su := filepath.Join(dir, "superuser")
	if err := os.WriteFile(su, []byte("pw"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := New(Options{
		Name: "pg-1", DataDir: filepath.Join(dir, "pgdata"), SocketDir: dir, RunDir: filepath.Join(dir, "run"),
		Port: 5432, Role: instanceapi.RolePrimary, Secrets: SecretFiles{Superuser: su},
		TLS: TLSOptions{Dir: tlsDir},
	}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := m.syncCertificates(); err != nil || !changed {
		t.Fatalf("first sync: changed=%v, %v", changed, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := m.serveHTTP(l)
	t.Cleanup(func() { _ = server.Close() })
	return &tlsFixture{m: m, ca: ca, tlsDir: tlsDir, addr: l.Addr().String()}
}

// get sends one request on a new connection, presenting client (when not
// nil), and returns the status code, the JSON error and the server's
// certificate.
func (f *tlsFixture) get(t *testing.T, path string, client *pki.KeyPair) (int, string, *x509.Certificate) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(f.ca.CertPEM)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if client != nil {
		cert, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}, Timeout: 10 * time.Second}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://"+f.addr+path, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Error string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Error, resp.TLS.PeerCertificates[0]
}

func (f *tlsFixture) client(t *testing.T, ca pki.KeyPair, cn string) *pki.KeyPair {
	t.Helper()
	kp, err := pki.IssueClient(ca, cn, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &kp
}

func TestHTTPSRequiresTheOperatorsClientCertificate(t *testing.T) {
	f := newTLSFixture(t)
	operator, err := pki.IssueIdentityClient(f.ca, instanceapi.DefaultAPIClientCN, instanceapi.OperatorIdentity, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	stranger := f.client(t, f.ca, "somebody")
	// A PostgresRole named tusk-operator gets this from the operator
	// (sql_rolecert.go): the client CA, the role's name as CommonName.
	role := f.client(t, f.ca, instanceapi.DefaultAPIClientCN)
	tests := []struct {
		path     string
		client   *pki.KeyPair
		wantCode int
		wantErr  string
	}{
		{instanceapi.PathStatus, nil, http.StatusUnauthorized, "client certificate signed by the cluster's CA is required"},
		{instanceapi.PathStatus, stranger, http.StatusForbidden, `common name "somebody" is not allowed`},
		{instanceapi.PathStatus, &operator, http.StatusOK, ""},
		{instanceapi.PathStatus, role, http.StatusForbidden, "lacks the operator's identity"},
		{instanceapi.PathRestart, role, http.StatusForbidden, "a certificate issued for a PostgreSQL role is not allowed here"},
		{instanceapi.PathRestart, nil, http.StatusUnauthorized, "is required"},
		{instanceapi.PathHealthz, nil, http.StatusOK, ""},
		// Not ready (no postgres), but answered without a certificate.
		{instanceapi.PathReadyz, nil, http.StatusServiceUnavailable, ""},
		{instanceapi.PathMetrics, nil, http.StatusOK, ""},
	}
	for _, tt := range tests {
		name := tt.path + " without a certificate"
		if tt.client != nil {
			cert, _ := pki.ParseCertificate(tt.client.CertPEM)
			name = tt.path + " as " + cert.Subject.CommonName
		}
		t.Run(name, func(t *testing.T) {
			code, msg, _ := f.get(t, tt.path, tt.client)
			if code != tt.wantCode || !strings.Contains(msg, tt.wantErr) {
				t.Fatalf("HTTP %d %q, want %d %q", code, msg, tt.wantCode, tt.wantErr)
			}
		})
	}
	t.Run("a certificate from another CA fails the handshake", func(t *testing.T) {
		otherCA, err := pki.NewCA("other", time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		forged := f.client(t, otherCA, instanceapi.DefaultAPIClientCN)
		cert, _ := tls.X509KeyPair(forged.CertPEM, forged.KeyPEM)
		conn, err := tls.Dial("tcp", f.addr, &tls.Config{
			InsecureSkipVerify: true,
			// Sent even though the server asks for its CA's certificates.
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
		})
		if err == nil {
			// TLS 1.3 reports the client certificate's rejection on the first read.
			_, err = conn.Read(make([]byte, 1))
			_ = conn.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("handshake with a foreign client certificate: %v", err)
		}
	})
}

func TestCertificateRotation(t *testing.T) {
	f := newTLSFixture(t)
	_, _, before := f.get(t, instanceapi.PathHealthz, nil)
	copied := filepath.Join(f.m.opts.RunDir, "tls", tlsKeyFile)
	info, err := os.Stat(copied)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("copied key %s: %v, %v; want mode 0600", copied, info, err)
	}
	if changed, err := f.m.syncCertificates(); changed || err != nil {
		t.Fatalf("sync without a change: changed=%v, %v", changed, err)
	}

	// A key that does not match the certificate (the kubelet half-way
	// through a swap) is refused and the old pair stays in use.
	renewed := issueServer(t, f.ca)
	if err := os.WriteFile(filepath.Join(f.tlsDir, tlsCertFile), renewed.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := f.m.syncCertificates(); changed || err == nil || !strings.Contains(err.Error(), "do not make a pair") {
		t.Fatalf("sync with a mismatched key: changed=%v, %v", changed, err)
	}
	if _, _, now := f.get(t, instanceapi.PathHealthz, nil); now.SerialNumber.Cmp(before.SerialNumber) != 0 {
		t.Fatal("a mismatched pair was put in use")
	}

	writeCertDir(t, f.tlsDir, renewed, f.ca)
	if changed, err := f.m.syncCertificates(); !changed || err != nil {
		t.Fatalf("sync after renewal: changed=%v, %v", changed, err)
	}
	_, _, after := f.get(t, instanceapi.PathHealthz, nil)
	want, _ := pki.ParseCertificate(renewed.CertPEM)
	if after.SerialNumber.Cmp(want.SerialNumber) != 0 {
		t.Fatalf("serving serial %x after renewal, want %x", after.SerialNumber, want.SerialNumber)
	}
	data, err := os.ReadFile(filepath.Join(f.m.opts.RunDir, "tls", tlsCertFile))
	if err != nil || string(data) != string(renewed.CertPEM) {
		t.Fatalf("the copy for postgres was not updated: %v", err)
	}
}

// TestConnInfoWithTLS: replicas and pg_rewind verify the primary against the
// cluster's CA when TLS is on, and replicas present their certificate.
func TestConnInfoWithTLS(t *testing.T) {
	up := instanceapi.Upstream{Host: "orders-rw", Port: 5432}
	plain := &Manager{opts: Options{Name: "pg-2", RunDir: "/run/tusk"}}
	withTLS := &Manager{opts: plain.opts,
		serverCerts:      &certFiles{dst: "/run/tusk/tls"},
		replicationCerts: &certFiles{dst: "/run/tusk/replication-tls"}}
	serverOnly := &Manager{opts: plain.opts, serverCerts: withTLS.serverCerts}
	tests := []struct {
		name string
		got  string
		want []string
		not  []string
	}{
		{"replication without TLS", pgconf.PrimaryConnInfo(plain.replicationConnInfo(up)), []string{"sslmode=prefer"}, []string{"sslcert", "sslrootcert"}},
		{"rewind without TLS", plain.rewindConnInfo(up), []string{"sslmode=prefer", "user=tusk_replication", "dbname=postgres"}, []string{"sslrootcert", "user=postgres"}},
		{"replication with a client certificate", pgconf.PrimaryConnInfo(withTLS.replicationConnInfo(up)), []string{"sslmode=verify-full",
			"sslcert=/run/tusk/replication-tls/tls.crt", "sslkey=/run/tusk/replication-tls/tls.key", "sslrootcert=/run/tusk/replication-tls/ca.crt"}, nil},
		{"replication with a password over TLS", pgconf.PrimaryConnInfo(serverOnly.replicationConnInfo(up)), []string{"sslmode=verify-full",
			"sslrootcert=/run/tusk/tls/ca.crt", "sslcert=/run/tusk/tls/no-client-certificate"}, []string{"sslkey"}},
		{"rewind with a client certificate", withTLS.rewindConnInfo(up), []string{"sslmode=verify-full", "user=tusk_replication", "dbname=postgres",
			"sslcert=/run/tusk/replication-tls/tls.crt", "sslkey=/run/tusk/replication-tls/tls.key"}, []string{"user=postgres"}},
		{"rewind with a password over TLS", serverOnly.rewindConnInfo(up), []string{"sslmode=verify-full", "user=tusk_replication", "dbname=postgres",
			"sslrootcert=/run/tusk/tls/ca.crt", "sslcert=/run/tusk/tls/no-client-certificate"}, []string{"sslkey", "user=postgres"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, w := range tt.want {
				if !strings.Contains(tt.got, w) {
					t.Errorf("%q lacks %q", tt.got, w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(tt.got, n) {
					t.Errorf("%q has %q", tt.got, n)
				}
			}
		})
	}
}
