//go:build integration

package pgconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"
)

// testPKI is a throwaway CA with a server certificate for 127.0.0.1 and a
// client certificate for one role, written into the server's directory.
type testPKI struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

func newTestPKI(t *testing.T, s *pgServer, clientRole string) testPKI {
	t.Helper()
	caKey, caCert, caDER := newCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "tusk test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign,
	}, nil, nil)
	serverKey, _, serverDER := newCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, caCert, caKey)
	clientKey, _, clientDER := newCert(t, &x509.Certificate{
		Subject:  pkix.Name{CommonName: clientRole},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, caCert, caKey)
	return testPKI{
		CA:         s.writeFile("ca.crt", pemOf("CERTIFICATE", caDER)),
		ServerCert: s.writeFile("server.crt", pemOf("CERTIFICATE", serverDER)),
		ServerKey:  s.writeFile("server.key", pemOf("PRIVATE KEY", keyDER(t, serverKey))),
		ClientCert: s.writeFile("client.crt", pemOf("CERTIFICATE", clientDER)),
		ClientKey:  s.writeFile("client.key", pemOf("PRIVATE KEY", keyDER(t, clientKey))),
	}
}

// newCert makes a key and a certificate from template, signed by parent
// (self-signed when parent is nil).
func newCert(t *testing.T, template, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	template.SerialNumber = serial
	template.NotBefore = time.Now().Add(-time.Hour)
	template.NotAfter = time.Now().Add(time.Hour)
	if parent == nil {
		parent, parentKey = template, key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

func keyDER(t *testing.T, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func pemOf(typ string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}
