package poolermanager

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"tusk.dev/tusk/internal/pki"
)

// A scrape reports when the server and auth certificates end, reading
// their files each time: a certificate the kubelet renews in place shows
// its new end at the next scrape, one that cannot be read has no series.
func TestScrapeReportsCertificateExpiries(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := pki.NewCA("pooler-test-ca", 365*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	server, err := pki.IssueServer(ca, "pg-pooler", []string{"pg-pooler"}, nil, 90*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	auth := issueClient(t, ca, 30*24*time.Hour, now)
	opts := Options{
		PgBouncer: "/nonexistent/pgbouncer", RunDir: dir,
		Config:  writeTestFile(t, dir, "pgbouncer.ini", []byte("[pgbouncer]\nlisten_port = 6432\n")),
		TLSCert: writeTestFile(t, dir, "tls.crt", server.CertPEM), TLSKey: filepath.Join(dir, "tls.key"), ClientCA: filepath.Join(dir, "ca.crt"),
		AuthCert: writeTestFile(t, dir, "auth.crt", auth.CertPEM),
	}
	m, err := New(opts, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"server": notAfter(t, server.CertPEM), "auth": notAfter(t, auth.CertPEM)}
	checkExpiries(t, m, "both readable", want)

	renewed := issueClient(t, ca, 60*24*time.Hour, now.Add(time.Hour))
	writeTestFile(t, dir, "auth.crt", renewed.CertPEM)
	want["auth"] = notAfter(t, renewed.CertPEM)
	checkExpiries(t, m, "the auth certificate renewed in place", want)

	writeTestFile(t, dir, "auth.crt", []byte("not a certificate"))
	delete(want, "auth")
	checkExpiries(t, m, "the auth file holding no certificate", want)

	if err := os.Remove(opts.TLSCert); err != nil {
		t.Fatal(err)
	}
	checkExpiries(t, m, "the server file gone and no auth certificate", map[string]float64{})
}

func issueClient(t *testing.T, ca pki.KeyPair, validity time.Duration, now time.Time) pki.KeyPair {
	t.Helper()
	kp, err := pki.IssueClient(ca, "tusk_pooler_auth", validity, now)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func notAfter(t *testing.T, certPEM []byte) float64 {
	t.Helper()
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return float64(cert.NotAfter.Unix())
}

func writeTestFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkExpiries gathers m's metrics as a scrape does and compares the
// certificate expiry series with want, by certificate.
func checkExpiries(t *testing.T, m *Manager, when string, want map[string]float64) {
	t.Helper()
	families, err := m.metrics.registry.Gather()
	if err != nil {
		t.Fatalf("%s: gathering: %v", when, err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "tusk_pooler_certificate_expiry_timestamp_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "certificate" {
					got[l.GetValue()] = s.GetGauge().GetValue()
				}
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: expiries %v, want %v", when, got, want)
		return
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s: %s certificate expires at %v, want %v", when, name, got[name], v)
		}
	}
}
