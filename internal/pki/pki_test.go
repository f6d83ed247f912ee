package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

const year = 365 * 24 * time.Hour

func mustCA(t *testing.T, cn string) KeyPair {
	t.Helper()
	ca, err := NewCA(cn, 10*year, now)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustParse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestNewCA(t *testing.T) {
	ca := mustCA(t, "orders CA")
	cert := mustParse(t, ca.CertPEM)
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 || cert.Subject.CommonName != "orders CA" {
		t.Fatalf("CA certificate: IsCA=%v KeyUsage=%b CN=%q", cert.IsCA, cert.KeyUsage, cert.Subject.CommonName)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Fatalf("CA key is %T, want ECDSA P-256", cert.PublicKey)
	}
	if !cert.NotBefore.Equal(now.Add(-ClockSkew)) || !cert.NotAfter.Equal(now.Add(10*year)) {
		t.Fatalf("validity %s to %s", cert.NotBefore, cert.NotAfter)
	}
	if err := cert.CheckSignatureFrom(cert); err != nil {
		t.Fatalf("CA is not self-signed: %v", err)
	}
	block, _ := pem.Decode(ca.KeyPEM)
	if block == nil || block.Type != "PRIVATE KEY" {
		t.Fatalf("key PEM block %v, want PRIVATE KEY", block)
	}
	if _, err := tls.X509KeyPair(ca.CertPEM, ca.KeyPEM); err != nil {
		t.Fatalf("certificate and key do not match: %v", err)
	}
}

func TestSerialsAreRandomAnd128Bit(t *testing.T) {
	ca := mustCA(t, "ca")
	seen := map[string]bool{}
	for range 20 {
		kp, err := IssueClient(ca, "app", year, now)
		if err != nil {
			t.Fatal(err)
		}
		serial := mustParse(t, kp.CertPEM).SerialNumber
		if serial.BitLen() > 128 || serial.Sign() <= 0 {
			t.Fatalf("serial %s has %d bits", serial, serial.BitLen())
		}
		if seen[serial.String()] {
			t.Fatalf("serial %s issued twice", serial)
		}
		seen[serial.String()] = true
	}
}

// TestChainVerifiesForItsUsage verifies issued certificates the way a TLS
// peer does: with the CA as the only root, for a given usage and name.
func TestChainVerifiesForItsUsage(t *testing.T) {
	ca := mustCA(t, "orders CA")
	other := mustCA(t, "another CA")
	server, err := IssueServer(ca, "orders-rw", []string{"orders-rw", "orders-rw.db.svc"}, []net.IP{net.ParseIP("127.0.0.1")}, year, now)
	if err != nil {
		t.Fatal(err)
	}
	client, err := IssueClient(ca, "tusk_replication", year, now)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cert    []byte
		roots   KeyPair
		usage   x509.ExtKeyUsage
		dnsName string
		at      time.Time
		wantErr string
	}{
		{"server for server auth", server.CertPEM, ca, x509.ExtKeyUsageServerAuth, "orders-rw.db.svc", now, ""},
		{"server by IP", server.CertPEM, ca, x509.ExtKeyUsageServerAuth, "127.0.0.1", now, ""},
		{"server within the clock skew", server.CertPEM, ca, x509.ExtKeyUsageServerAuth, "orders-rw", now.Add(-time.Minute), ""},
		{"server for a name it lacks", server.CertPEM, ca, x509.ExtKeyUsageServerAuth, "orders-ro", now, "certificate is valid for"},
		{"server used as a client", server.CertPEM, ca, x509.ExtKeyUsageClientAuth, "", now, "incompatible key usage"},
		{"client for client auth", client.CertPEM, ca, x509.ExtKeyUsageClientAuth, "", now, ""},
		{"client used as a server", client.CertPEM, ca, x509.ExtKeyUsageServerAuth, "", now, "incompatible key usage"},
		{"client under another CA", client.CertPEM, other, x509.ExtKeyUsageClientAuth, "", now, "unknown authority"},
		{"server expired", server.CertPEM, ca, x509.ExtKeyUsageServerAuth, "orders-rw", now.Add(year + time.Second), "expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			roots := x509.NewCertPool()
			roots.AddCert(mustParse(t, tt.roots.CertPEM))
			_, err := mustParse(t, tt.cert).Verify(x509.VerifyOptions{
				Roots: roots, KeyUsages: []x509.ExtKeyUsage{tt.usage}, DNSName: tt.dnsName, CurrentTime: tt.at,
			})
			checkErr(t, err, tt.wantErr)
		})
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want one containing %q", err, want)
	}
}

func TestSignedBy(t *testing.T) {
	ca := mustCA(t, "orders CA")
	other := mustCA(t, "orders CA") // same name, another key: a replaced CA
	server, err := IssueServer(ca, "orders-rw", []string{"orders-rw"}, nil, year, now)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		cert, ca []byte
		wantErr  string
	}{
		{"issued by it", server.CertPEM, ca.CertPEM, ""},
		{"the CA itself", ca.CertPEM, ca.CertPEM, ""},
		{"a replaced CA", server.CertPEM, other.CertPEM, "not signed by the CA"},
		{"not a certificate", []byte("garbage"), ca.CertPEM, "while reading the certificate"},
		{"a key as the CA", server.CertPEM, ca.KeyPEM, "while reading the CA certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkErr(t, SignedBy(tt.cert, tt.ca), tt.wantErr) })
	}
}

func TestIssueRefusesABadCA(t *testing.T) {
	ca := mustCA(t, "ca")
	leaf, err := IssueClient(ca, "app", year, now)
	if err != nil {
		t.Fatal(err)
	}
	other := mustCA(t, "other")
	for name, bad := range map[string]KeyPair{
		"a leaf as the CA":    leaf,
		"a key of another CA": {CertPEM: ca.CertPEM, KeyPEM: other.KeyPEM},
		"no key":              {CertPEM: ca.CertPEM},
	} {
		t.Run(name, func(t *testing.T) {
			kp, err := IssueServer(bad, "x", []string{"x"}, nil, year, now)
			if err == nil {
				// A certificate signed with the wrong key must not verify.
				err = SignedBy(kp.CertPEM, bad.CertPEM)
			}
			if err == nil {
				t.Fatal("issued a certificate that chains to the CA with a bad CA key pair")
			}
		})
	}
	if _, err := IssueClient(ca, "app", 0, now); err == nil {
		t.Fatal("issued a certificate with no validity")
	}
}

func TestNeedsRenewal(t *testing.T) {
	ca := mustCA(t, "ca")
	kp, err := IssueServer(ca, "s", []string{"s"}, nil, 90*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	expiry := now.Add(90 * 24 * time.Hour)
	const window = 30 * 24 * time.Hour
	tests := []struct {
		name    string
		cert    []byte
		at      time.Time
		want    bool
		wantErr bool
	}{
		{"just issued", kp.CertPEM, now, false, false},
		{"just outside the window", kp.CertPEM, expiry.Add(-window - time.Second), false, false},
		{"at the window's start", kp.CertPEM, expiry.Add(-window), true, false},
		{"inside the window", kp.CertPEM, expiry.Add(-time.Hour), true, false},
		{"expired", kp.CertPEM, expiry.Add(time.Hour), true, false},
		{"not valid yet", kp.CertPEM, now.Add(-time.Hour), true, false},
		{"unparsable", []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), now, true, true},
		{"empty", nil, now, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NeedsRenewal(tt.cert, tt.at, window)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Fatalf("NeedsRenewal = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestSANsMatch(t *testing.T) {
	ca := mustCA(t, "ca")
	kp, err := IssueServer(ca, "orders-rw", []string{"orders-rw", "orders-rw.db", "orders-rw.db.svc"}, []net.IP{net.ParseIP("10.0.0.1")}, year, now)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		names []string
		want  bool
	}{
		{"all of them", []string{"orders-rw", "orders-rw.db", "orders-rw.db.svc"}, true},
		{"fewer", []string{"orders-rw.db"}, true},
		{"in another case", []string{"Orders-RW"}, true},
		{"none asked", nil, true},
		{"one more", []string{"orders-rw", "orders-ro"}, false},
		{"the common name is not a SAN", []string{"orders"}, false},
		{"an IP is not a DNS name", []string{"10.0.0.1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SANsMatch(kp.CertPEM, tt.names); got != tt.want {
				t.Fatalf("SANsMatch(%v) = %v, want %v", tt.names, got, tt.want)
			}
		})
	}
	if SANsMatch([]byte("garbage"), nil) {
		t.Fatal("an unreadable certificate matched")
	}
}

// userCA makes a CA the way openssl or cert-manager hands one over: a
// self-signed certificate for key, whose PEM block is blockType.
func userCA(t *testing.T, key crypto.Signer, blockType string, der []byte, notAfter time.Time) KeyPair {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "user CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	cert, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return KeyPair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})}
}

// TestUserCAKeys: a user's CA with an RSA (PKCS#1 or PKCS#8), ECDSA
// (SEC 1) or Ed25519 key issues certificates that verify; a key of another
// kind or that is not the certificate's is refused with a message.
func TestUserCAKeys(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8 := func(k any) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	sec1, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	later := now.Add(10 * year)
	for name, ca := range map[string]KeyPair{
		"RSA, PKCS#1":        userCA(t, rsaKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey), later),
		"RSA, PKCS#8":        userCA(t, rsaKey, "PRIVATE KEY", pkcs8(rsaKey), later),
		"ECDSA P-384, SEC 1": userCA(t, ecKey, "EC PRIVATE KEY", sec1, later),
		"Ed25519, PKCS#8":    userCA(t, edKey, "PRIVATE KEY", pkcs8(edKey), later),
	} {
		t.Run(name, func(t *testing.T) {
			kp, err := IssueServer(ca, "x", []string{"x"}, nil, year, now)
			if err != nil {
				t.Fatal(err)
			}
			if err := SignedBy(kp.CertPEM, ca.CertPEM); err != nil {
				t.Fatal(err)
			}
		})
	}
	mismatched := userCA(t, rsaKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey), later)
	mismatched.KeyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})
	if _, err := IssueClient(mismatched, "app", year, now); err == nil || !strings.Contains(err.Error(), "does not belong to the CA certificate") {
		t.Errorf("a CA key of another certificate: %v", err)
	}
	dsa := userCA(t, rsaKey, "DSA PRIVATE KEY", []byte{1}, later)
	if _, err := IssueClient(dsa, "app", year, now); err == nil || !strings.Contains(err.Error(), `"DSA PRIVATE KEY"`) {
		t.Errorf("a DSA key: %v", err)
	}
}

// TestCertificatesDoNotOutliveTheirCA: a CA expiring within a leaf's
// validity caps the leaf at its own end; an expired CA issues nothing and
// says so.
func TestCertificatesDoNotOutliveTheirCA(t *testing.T) {
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der := pkcs8Key(t, ecKey)
	soon := userCA(t, ecKey, "PRIVATE KEY", der, now.Add(60*24*time.Hour))
	kp, err := IssueClient(soon, "app", year, now)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ParseCertificate(kp.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if caCert, _ := ParseCertificate(soon.CertPEM); leaf.NotAfter.After(caCert.NotAfter) {
		t.Errorf("the certificate ends %v, after its CA (%v)", leaf.NotAfter, caCert.NotAfter)
	}
	expired := userCA(t, ecKey, "PRIVATE KEY", der, now.Add(-time.Minute))
	if _, err := IssueClient(expired, "app", year, now); err == nil || !strings.Contains(err.Error(), "the CA expired") {
		t.Errorf("an expired CA: %v", err)
	}
}

func pkcs8Key(t *testing.T, k any) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// TestIdentityClient: only IssueIdentityClient's certificates name an
// identity, so a server that requires one tells them from IssueClient's
// whatever their CommonName.
func TestIdentityClient(t *testing.T) {
	now := time.Now()
	ca := mustCA(t, "tusk test CA")
	const identity = "urn:tusk.dev:operator"
	withIdentity, err := IssueIdentityClient(ca, "tusk-operator", identity, year, now)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := IssueClient(ca, "tusk-operator", year, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		kp   KeyPair
		want bool
	}{{"IssueIdentityClient", withIdentity, true}, {"IssueClient of the same name", plain, false}} {
		cert, err := ParseCertificate(tt.kp.CertPEM)
		if err != nil {
			t.Fatal(err)
		}
		if got := HasIdentity(cert, identity); got != tt.want || cert.Subject.CommonName != "tusk-operator" {
			t.Errorf("%s: HasIdentity = %v (CN %q), want %v", tt.name, got, cert.Subject.CommonName, tt.want)
		}
		if got := HasIdentity(cert, "urn:tusk.dev:someone-else"); got {
			t.Errorf("%s names another identity", tt.name)
		}
	}
	if _, err := IssueIdentityClient(ca, "x", "not a uri", year, now); err == nil {
		t.Error("an identity that is no absolute URI was accepted")
	}
}
