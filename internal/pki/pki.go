// Package pki makes the TLS material of one PostgreSQL cluster: a
// self-signed CA, server certificates for the instances and client
// certificates for roles, and checks on existing certificates (expiry,
// issuer, names). It is a leaf package (standard library only): the
// operator issues with it, tests use it, and it imports nothing of Tusk's.
//
// Keys Tusk makes are ECDSA P-256, PEM-encoded as "PRIVATE KEY" (PKCS#8),
// which both PostgreSQL and Go read. A user's CA may have an RSA, ECDSA or
// Ed25519 key, in PKCS#8, PKCS#1 or SEC 1.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"
)

// ClockSkew is how far before now certificates become valid, so a peer
// whose clock is a little behind accepts them at once.
const ClockSkew = 5 * time.Minute

// PEM block types.
const (
	certificateBlock = "CERTIFICATE"
	privateKeyBlock  = "PRIVATE KEY"
)

// KeyPair is a certificate and its private key, both PEM-encoded.
type KeyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a self-signed certificate authority valid from now-ClockSkew
// for validity (plus the skew).
func NewCA(commonName string, validity time.Duration, now time.Time) (KeyPair, error) {
	template := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	kp, err := issue(template, nil, nil, validity, now)
	if err != nil {
		return KeyPair{}, fmt.Errorf("while making the CA %q: %w", commonName, err)
	}
	return kp, nil
}

// IssueServer makes a server certificate signed by ca for the given DNS
// names and IP addresses.
func IssueServer(ca KeyPair, commonName string, dnsNames []string, ips []net.IP, validity time.Duration, now time.Time) (KeyPair, error) {
	template := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		DNSNames:    slices.Clone(dnsNames),
		IPAddresses: slices.Clone(ips),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	kp, err := issueSigned(ca, template, validity, now)
	if err != nil {
		return KeyPair{}, fmt.Errorf("while issuing the server certificate %q: %w", commonName, err)
	}
	return kp, nil
}

// IssueClient makes a client certificate signed by ca. PostgreSQL's cert
// authentication maps the CommonName to the role, so commonName is the
// role's name.
func IssueClient(ca KeyPair, commonName string, validity time.Duration, now time.Time) (KeyPair, error) {
	template := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	kp, err := issueSigned(ca, template, validity, now)
	if err != nil {
		return KeyPair{}, fmt.Errorf("while issuing the client certificate %q: %w", commonName, err)
	}
	return kp, nil
}

// IssueIdentityClient is IssueClient with identity as the certificate's
// one URI subject alternative name. IssueClient never sets a URI, so a
// certificate made for a role, whatever its CommonName, cannot carry an
// identity: a server that requires one tells its peer from any role.
func IssueIdentityClient(ca KeyPair, commonName, identity string, validity time.Duration, now time.Time) (KeyPair, error) {
	uri, err := url.Parse(identity)
	if err != nil {
		return KeyPair{}, fmt.Errorf("while reading the identity %q: %w", identity, err)
	}
	if uri.Scheme == "" {
		return KeyPair{}, fmt.Errorf("the identity %q is not an absolute URI", identity)
	}
	template := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		URIs:        []*url.URL{uri},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	kp, err := issueSigned(ca, template, validity, now)
	if err != nil {
		return KeyPair{}, fmt.Errorf("while issuing the client certificate %q of %s: %w", commonName, identity, err)
	}
	return kp, nil
}

// HasIdentity says whether cert names identity among its URI subject
// alternative names.
func HasIdentity(cert *x509.Certificate, identity string) bool {
	return slices.ContainsFunc(cert.URIs, func(u *url.URL) bool { return u.String() == identity })
}

// issueSigned signs template with the CA's key.
func issueSigned(ca KeyPair, template *x509.Certificate, validity time.Duration, now time.Time) (KeyPair, error) {
	caCert, err := ParseCertificate(ca.CertPEM)
	if err != nil {
		return KeyPair{}, fmt.Errorf("while reading the CA certificate: %w", err)
	}
	if !caCert.IsCA {
		return KeyPair{}, errors.New("the CA certificate is not a certificate authority")
	}
	caKey, err := parseSigningKey(ca.KeyPEM)
	if err != nil {
		return KeyPair{}, fmt.Errorf("while reading the CA key: %w", err)
	}
	if !publicKeysEqual(caKey.Public(), caCert.PublicKey) {
		return KeyPair{}, errors.New("the CA key does not belong to the CA certificate")
	}
	// A certificate must not outlive its issuer: a CA that expires sooner
	// makes the certificate expire with it (and be renewed before).
	validity = min(validity, caCert.NotAfter.Sub(now))
	return issue(template, caCert, caKey, validity, now)
}

// parseSigningKey reads a CA's private key: PKCS#8 ("PRIVATE KEY"), PKCS#1
// ("RSA PRIVATE KEY") or SEC 1 ("EC PRIVATE KEY"), of an ECDSA, RSA or
// Ed25519 key, as CAs made by openssl, cfssl or cert-manager come.
func parseSigningKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM-encoded private key found")
	}
	var key any
	var err error
	switch block.Type {
	case privateKeyBlock:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("a PEM block of type %q is not a private key Tusk reads (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)", block.Type)
	}
	if err != nil {
		return nil, err
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey, *rsa.PrivateKey, ed25519.PrivateKey:
		return k.(crypto.Signer), nil
	}
	return nil, fmt.Errorf("the key is a %T, not an ECDSA, RSA or Ed25519 key", key)
}

// publicKeysEqual compares two public keys of the kinds crypto/x509 parses.
func publicKeysEqual(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}

// issue makes a new key and a certificate for it from template, signed by
// parent (self-signed when parent is nil).
func issue(template, parent *x509.Certificate, parentKey crypto.Signer, validity time.Duration, now time.Time) (KeyPair, error) {
	if validity <= 0 {
		if parent != nil {
			return KeyPair{}, fmt.Errorf("the CA expired at %s: renew it", parent.NotAfter.UTC().Format(time.RFC3339))
		}
		return KeyPair{}, fmt.Errorf("validity %s is not positive", validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("while generating a key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return KeyPair{}, fmt.Errorf("while generating a serial number: %w", err)
	}
	template.SerialNumber = serial
	template.NotBefore = now.Add(-ClockSkew).UTC()
	template.NotAfter = now.Add(validity).UTC()
	if parent == nil {
		parent, parentKey = template, key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, &key.PublicKey, parentKey)
	if err != nil {
		return KeyPair{}, fmt.Errorf("while signing: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("while encoding the key: %w", err)
	}
	return KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: certificateBlock, Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: privateKeyBlock, Bytes: keyDER}),
	}, nil
}

// ParseCertificate reads the first certificate of a PEM bundle.
func ParseCertificate(certPEM []byte) (*x509.Certificate, error) {
	for rest := certPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no PEM-encoded certificate found")
		}
		if block.Type == certificateBlock {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}

// NeedsRenewal says whether the certificate expires within before of now,
// or is not valid yet, or cannot be read (a broken certificate is replaced
// too). The error says why it cannot be read.
func NeedsRenewal(certPEM []byte, now time.Time, before time.Duration) (bool, error) {
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return true, err
	}
	return now.Before(cert.NotBefore) || !now.Add(before).Before(cert.NotAfter), nil
}

// SignedBy checks that certPEM chains to the CA in caCertPEM (for any
// usage), to notice a CA that changed or a user-supplied certificate that
// does not belong to it. Expiry is not checked: NeedsRenewal does that.
func SignedBy(certPEM, caCertPEM []byte) error {
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return fmt.Errorf("while reading the certificate: %w", err)
	}
	ca, err := ParseCertificate(caCertPEM)
	if err != nil {
		return fmt.Errorf("while reading the CA certificate: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err = cert.Verify(x509.VerifyOptions{
		Roots:       roots,
		CurrentTime: cert.NotBefore.Add(time.Second),
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return fmt.Errorf("the certificate %q is not signed by the CA %q: %w", cert.Subject.CommonName, ca.Subject.CommonName, err)
	}
	return nil
}

// SANsMatch says whether the certificate names every one of dnsNames among
// its DNS subject alternative names (it may name more). Names compare
// exactly, ignoring case; wildcards are not expanded. An unreadable
// certificate matches nothing.
func SANsMatch(certPEM []byte, dnsNames []string) bool {
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return false
	}
	for _, want := range dnsNames {
		if !slices.ContainsFunc(cert.DNSNames, func(have string) bool { return strings.EqualFold(have, want) }) {
			return false
		}
	}
	return true
}
