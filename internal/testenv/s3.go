package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinIOBinaryEnv names the MinIO server binary the S3 tests run; `make
// integration` sets it from hack/install-minio.sh.
const MinIOBinaryEnv = "TUSK_MINIO_BIN"

// S3 is a real S3 server (MinIO) on loopback, with one bucket, for one test.
type S3 struct {
	// Endpoint is the server's URL (http:// or, with TLS, https://).
	Endpoint string
	// AccessKey and SecretKey are the root credentials.
	AccessKey string
	SecretKey string
	// Bucket exists and is empty at start.
	Bucket string
	// CAFile is the PEM file of the CA that signed the server's
	// certificate, when the server has TLS.
	CAFile string

	host   string // host:port of Endpoint
	client *minio.Client
}

// S3Options change how StartS3 runs the server.
type S3Options struct {
	// CertPEM and KeyPEM, when set, make the server speak https only with
	// this certificate (for 127.0.0.1); CAPEM is its issuer's certificate.
	CertPEM, KeyPEM, CAPEM []byte
}

// MinIOBinary is the MinIO server the tests run, from $TUSK_MINIO_BIN. Its
// absence fails the test: the S3 tests are how the backup code is tested,
// and a skipped test would look like a passing one.
func MinIOBinary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv(MinIOBinaryEnv)
	if bin == "" {
		t.Fatalf("%s is not set: run the tests with `make integration`, which builds the MinIO server "+
			"(hack/install-minio.sh), or set %s=$(hack/install-minio.sh)", MinIOBinaryEnv, MinIOBinaryEnv)
	}
	if _, err := os.Stat(bin); err != nil { //nolint:gosec // the binary the developer or CI chose
		t.Fatalf("%s=%s: %v (hack/install-minio.sh builds it)", MinIOBinaryEnv, bin, err)
	}
	return bin
}

// StartS3 starts a MinIO server on a free loopback port with a temporary
// data directory and random credentials, creates a bucket and stops the
// server when the test ends.
func StartS3(t testing.TB, opts S3Options) *S3 {
	t.Helper()
	bin := MinIOBinary(t)
	s := &S3{AccessKey: "tusk-test", SecretKey: rand.Text(), Bucket: "tusk-test"}
	configDir := t.TempDir()
	scheme := "http"
	if opts.CertPEM != nil {
		scheme = "https"
		s.CAFile = writeServerCerts(t, configDir, opts)
	}
	// A free port can be taken between FreePort and the server's bind:
	// try again with another, rather than fail on a race with someone else.
	var lastErr error
	for range 3 {
		srv := &minioProcess{bin: bin, configDir: configDir, dataDir: t.TempDir(), s3: s}
		s.host = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		s.Endpoint = scheme + "://" + s.host
		if lastErr = srv.start(t); lastErr == nil {
			s.client = s.newClient(t)
			s.MakeBucket(t, s.Bucket)
			s.waitIAM(t)
			return s
		}
		t.Logf("Starting MinIO on %s: %v", s.Endpoint, lastErr)
	}
	t.Fatalf("could not start MinIO: %v", lastErr)
	return nil
}

// waitIAM waits until MinIO refuses unknown credentials as such. Its IAM
// subsystem comes up after the S3 API answers the root user; until then a
// request with other credentials gets "IAM sub-system not initialized yet,
// please try again", which a test of wrong credentials would take for the
// answer.
func (s *S3) waitIAM(t testing.TB) {
	t.Helper()
	unknown := s.clientAs(t, "tusk-unknown-"+rand.Text()[:8], rand.Text())
	Eventually(t, time.Minute, func(ctx context.Context) error {
		_, err := unknown.ListBuckets(ctx)
		if code := minio.ToErrorResponse(err).Code; code != "InvalidAccessKeyId" {
			return fmt.Errorf("unknown credentials answered %q, not yet InvalidAccessKeyId: %w", code, err)
		}
		return nil
	})
}

// MakeBucket creates another bucket.
func (s *S3) MakeBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.client.MakeBucket(ctx, name, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("creating bucket %s: %v", name, err)
	}
}

// Client is a minio-go client with the root credentials, for tests to look
// at the bucket behind the code under test's back.
func (s *S3) Client() *minio.Client { return s.client }

func (s *S3) newClient(t testing.TB) *minio.Client {
	t.Helper()
	return s.clientAs(t, s.AccessKey, s.SecretKey)
}

func (s *S3) clientAs(t testing.TB, accessKey, secretKey string) *minio.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if s.CAFile != "" {
		tr.TLSClientConfig = &tls.Config{RootCAs: certPool(t, s.CAFile), MinVersion: tls.VersionTLS12}
	}
	c, err := minio.New(s.host, &minio.Options{
		Creds: credentials.NewStaticV4(accessKey, secretKey, ""), Secure: s.CAFile != "", Transport: tr,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func certPool(t testing.TB, caFile string) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(caFile) //nolint:gosec // written by writeServerCerts
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", caFile)
	}
	return pool
}

// writeServerCerts lays out MinIO's certs directory and returns the CA file.
func writeServerCerts(t testing.TB, configDir string, opts S3Options) string {
	t.Helper()
	certs := filepath.Join(configDir, "certs")
	files := map[string][]byte{
		filepath.Join(certs, "public.crt"):  opts.CertPEM,
		filepath.Join(certs, "private.key"): opts.KeyPEM,
		filepath.Join(configDir, "ca.crt"):  opts.CAPEM,
	}
	if err := os.MkdirAll(filepath.Join(certs, "CAs"), 0o700); err != nil {
		t.Fatal(err)
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Readable by anyone: tests that run PostgreSQL as another OS user
	// hand this file to the archive commands it runs.
	caFile := filepath.Join(configDir, "ca.crt")
	if err := os.Chmod(caFile, 0o644); err != nil { //nolint:gosec // a CA certificate is public
		t.Fatal(err)
	}
	return caFile
}

// minioProcess is one run of the server.
type minioProcess struct {
	bin, configDir, dataDir string
	s3                      *S3
	cmd                     *exec.Cmd
	exited                  chan struct{}
	mu                      sync.Mutex
	output                  bytes.Buffer
}

func (p *minioProcess) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.output.Write(b)
}

func (p *minioProcess) start(t testing.TB) error {
	t.Helper()
	p.cmd = exec.Command(p.bin, "server", "--quiet", "--address", p.s3.host, //nolint:gosec // the test's MinIO binary
		"--console-address", fmt.Sprintf("127.0.0.1:%d", FreePort(t)), "--certs-dir", filepath.Join(p.configDir, "certs"), p.dataDir)
	p.cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+p.s3.AccessKey, "MINIO_ROOT_PASSWORD="+p.s3.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=on")
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("while starting %s: %w", p.bin, err)
	}
	p.exited = make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	if err := p.waitReady(); err != nil {
		p.stop()
		return fmt.Errorf("%w; output:\n%s", err, p.out())
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("MinIO output:\n%s", p.out())
		}
	})
	return nil
}

func (p *minioProcess) out() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.output.String()
}

// waitReady polls MinIO's liveness endpoint until it answers 200, the
// process exits or a minute passes.
func (p *minioProcess) waitReady() error {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // a liveness probe only
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return errors.New("MinIO exited before it was ready")
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := client.Get(p.s3.Endpoint + "/minio/health/live")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return errors.New("MinIO was not ready within a minute")
}

// stop sends SIGTERM, then SIGKILL after 10 s, and waits for the exit.
func (p *minioProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}
