package controller

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/events"

	"tusk.dev/tusk/internal/pki"
)

// TestCertificatesOfAnEndingCAAreNotReissuedEachPass: a user's CA with 20
// days left issues a certificate that ends with it; every later pass keeps
// that certificate (a new one could last no longer) instead of issuing one
// per pass.
func TestCertificatesOfAnEndingCAAreNotReissuedEachPass(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ending CA"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(20 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ca := pki.KeyPair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
	issued := 0
	issue := func() (pki.KeyPair, error) {
		issued++
		return pki.IssueClient(ca, replicationUser, leafValidity, time.Now())
	}
	data := map[string][]byte{}
	for range 3 {
		kp, err := keepOrIssue(data, keyTLSCert, keyTLSKey, ca, nil, issue)
		if err != nil {
			t.Fatal(err)
		}
		data[keyTLSCert], data[keyTLSKey] = kp.CertPEM, kp.KeyPEM
	}
	if issued != 1 {
		t.Errorf("issued %d certificates in 3 passes, want 1", issued)
	}
}

// TestExpiringCAIsWarnedAbout: a CA with less than 30 days left gets a
// Warning Event saying how to renew it, at most once an hour; one with
// more gets none.
func TestExpiringCAIsWarnedAbout(t *testing.T) {
	now := time.Now()
	ending, err := pki.NewCA("ending", 20*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	lasting, err := pki.NewCA("lasting", caValidity, now)
	if err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(10)
	r := &ClusterReconciler{Recorder: rec, keys: keyStore{namespace: "tusk-system"}}
	c := defaultCluster()
	r.warnExpiringCA(c, lasting, now)
	r.warnExpiringCA(c, ending, now)
	r.warnExpiringCA(c, ending, now.Add(time.Minute))
	r.warnExpiringCA(c, ending, now.Add(caWarnEvery+time.Minute))
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	if len(got) != 2 || !strings.Contains(got[0], "Warning CAExpiring") || !strings.Contains(got[0], "delete the Secret "+keysSecretName(c.Namespace, c.Name)+" in the operator's namespace tusk-system") {
		t.Errorf("events %q, want two CAExpiring warnings an hour apart saying how to renew", got)
	}
}
