package instance

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The files of a mounted kubernetes.io/tls Secret with its CA, and of the
// copies the manager makes of them.
const (
	tlsCertFile = "tls.crt"
	tlsKeyFile  = "tls.key"
	tlsCAFile   = "ca.crt"
)

// TLSOptions turn TLS on for PostgreSQL, replication and the HTTP API.
// Empty directories leave it off.
type TLSOptions struct {
	// Dir holds the server certificate (tls.crt, tls.key) and the cluster's
	// CA (ca.crt), as mounted from a Secret.
	Dir string
	// ReplicationDir holds the replication role's client certificate (CN
	// tusk_replication) and the CA. Replicas then authenticate with it
	// instead of a password. It needs Dir.
	ReplicationDir string
	// APIClientCN is the CommonName a client certificate must have to read
	// /status and send commands; empty means
	// instanceapi.DefaultAPIClientCN.
	APIClientCN string
}

// certFiles is one mounted certificate directory and the private copies
// the manager keeps of it in the run directory: PostgreSQL and libpq refuse
// keys that others may read, and mounted Secret files often are.
type certFiles struct {
	// what names the certificate in logs and errors.
	what string
	// src is the mounted directory, dst the directory of the copies.
	src, dst string
	// hash is the content last copied, to notice changes.
	hash [sha256.Size]byte
}

// certMaterial is the content of one certFiles, parsed.
type certMaterial struct {
	cert tls.Certificate
	leaf *x509.Certificate
	ca   *x509.CertPool
}

func (c *certFiles) certPath() string { return filepath.Join(c.dst, tlsCertFile) }
func (c *certFiles) keyPath() string  { return filepath.Join(c.dst, tlsKeyFile) }
func (c *certFiles) caPath() string   { return filepath.Join(c.dst, tlsCAFile) }

// noClientCertPath is a file that never exists, for sslcert when a
// connection has no client certificate: libpq would otherwise try
// ~/.postgresql/postgresql.crt, and fail the connection when the home
// directory is not readable (a missing file it ignores).
func (c *certFiles) noClientCertPath() string { return filepath.Join(c.dst, "no-client-certificate") }

// sync copies the mounted files when their content changed since the last
// call, and returns what they hold; nil material means nothing changed. A
// set that does not belong together (a key that does not match the
// certificate, as while the kubelet swaps the files) is an error, and the
// previous copies stay.
func (c *certFiles) sync() (*certMaterial, error) {
	var content [3][]byte
	for i, name := range []string{tlsCertFile, tlsKeyFile, tlsCAFile} {
		data, err := os.ReadFile(filepath.Join(c.src, name)) //nolint:gosec // a mounted Secret named on the command line
		if err != nil {
			return nil, fmt.Errorf("while reading the %s: %w", c.what, err)
		}
		content[i] = data
	}
	hash := sha256.Sum256(bytes.Join(content[:], []byte{0}))
	if hash == c.hash {
		return nil, nil
	}
	material, err := parseCertMaterial(content[0], content[1], content[2])
	if err != nil {
		return nil, fmt.Errorf("while reading the %s in %s: %w", c.what, c.src, err)
	}
	if err := os.MkdirAll(c.dst, 0o700); err != nil {
		return nil, fmt.Errorf("while creating %s: %w", c.dst, err)
	}
	for i, path := range []string{c.certPath(), c.keyPath(), c.caPath()} {
		if err := writeFileAtomic(path, content[i]); err != nil {
			return nil, err
		}
	}
	c.hash = hash
	return material, nil
}

func parseCertMaterial(certPEM, keyPEM, caPEM []byte) (*certMaterial, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the certificate and key do not make a pair: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, err
	}
	ca := x509.NewCertPool()
	if !ca.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("ca.crt holds no PEM-encoded certificate")
	}
	return &certMaterial{cert: cert, leaf: leaf, ca: ca}, nil
}

// httpsConfig is the HTTP API's TLS configuration for one server
// certificate: client certificates are verified against the cluster's CA
// when given, and required by requireClientCert where it matters. Probes
// present none.
func httpsConfig(mat *certMaterial) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{mat.cert},
		ClientCAs:    mat.ca,
		ClientAuth:   tls.VerifyClientCertIfGiven,
	}
}

// syncCertificates copies changed certificate files into the run directory
// and makes the HTTP API serve the new server certificate. It reports
// whether PostgreSQL's server files changed (and postgres must reload).
func (m *Manager) syncCertificates() (bool, error) {
	if m.serverCerts == nil {
		return false, nil
	}
	var errs []error
	serverChanged := false
	mat, err := m.serverCerts.sync()
	switch {
	case err != nil:
		errs = append(errs, err)
	case mat != nil:
		m.https.Store(httpsConfig(mat))
		m.log.Info("Using the server certificate", "serial", mat.leaf.SerialNumber.Text(16), "notAfter", mat.leaf.NotAfter)
		serverChanged = true
	}
	if m.replicationCerts != nil {
		mat, err := m.replicationCerts.sync()
		switch {
		case err != nil:
			errs = append(errs, err)
		case mat != nil:
			m.log.Info("Using the replication client certificate", "serial", mat.leaf.SerialNumber.Text(16), "notAfter", mat.leaf.NotAfter)
		}
	}
	return serverChanged, errors.Join(errs...)
}
