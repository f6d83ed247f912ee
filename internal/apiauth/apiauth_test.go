package apiauth

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"tusk.dev/tusk/internal/pki"
)

const identity = "spiffe://tusk.dev/operator"

func certificate(t *testing.T, ca pki.KeyPair, cn, uri string) *x509.Certificate {
	t.Helper()
	var kp pki.KeyPair
	var err error
	if uri == "" {
		kp, err = pki.IssueClient(ca, cn, time.Hour, time.Now())
	} else {
		kp, err = pki.IssueIdentityClient(ca, cn, uri, time.Hour, time.Now())
	}
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertificate(kp.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// The gate reads only what the handshake verified (tls.ConnectionState's
// VerifiedChains): the TLS server refuses a certificate the CA did not sign.
func TestGate(t *testing.T) {
	ca, err := pki.NewCA("test CA", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	operator := certificate(t, ca, "tusk-operator", identity)
	role := certificate(t, ca, "tusk-operator", "")
	stranger := certificate(t, ca, "somebody", identity)
	gate := Gate{OpenPaths: []string{"/healthz"}, CommonName: "tusk-operator", Identity: identity}
	tests := []struct {
		name     string
		gate     Gate
		path     string
		cert     *x509.Certificate
		tls      bool
		wantCode int
		wantErr  string
	}{
		{"open path, no TLS at all", gate, "/healthz", nil, false, http.StatusOK, ""},
		{"open path, no certificate", gate, "/healthz", nil, true, http.StatusOK, ""},
		{"plain HTTP", gate, "/status", nil, false, http.StatusUnauthorized, "is required"},
		{"no certificate", gate, "/status", nil, true, http.StatusUnauthorized, "signed by the cluster's CA is required"},
		{"another common name", gate, "/status", stranger, true, http.StatusForbidden, "somebody\\\" is not allowed here"},
		{"a role's certificate", gate, "/status", role, true, http.StatusForbidden, "lacks the operator's identity"},
		{"the operator", gate, "/status", operator, true, http.StatusOK, ""},
		{"an API served without TLS", Gate{NoTLS: true}, "/status", nil, false, http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tt.path, nil)
			if tt.tls {
				r.TLS = &tls.ConnectionState{}
				if tt.cert != nil {
					r.TLS.VerifiedChains = [][]*x509.Certificate{{tt.cert}}
				}
			}
			w := httptest.NewRecorder()
			tt.gate.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusOK)
			})).ServeHTTP(w, r)
			if w.Code != tt.wantCode || !strings.Contains(w.Body.String(), tt.wantErr) {
				t.Errorf("got %d %q, want %d with %q", w.Code, w.Body.String(), tt.wantCode, tt.wantErr)
			}
		})
	}
}
