// Package objectstore reads and writes objects in one S3-compatible bucket
// under a path prefix: the place where WAL archives and base backups live.
//
// It wraps minio-go with what Tusk needs and nothing more (Put streams an
// object of unknown size, Get streams it back, Stat, List, Delete) and turns
// the library's errors into ones a user can act on: wrong credentials, a
// missing bucket, an unreachable endpoint and a TLS failure are told apart
// (see Classify).
package objectstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"
)

// DefaultPartSize is the size of the parts a Put of unknown size uploads,
// and so the memory one Put holds. An object of unknown size can have up to
// 10,000 parts: 16 MiB parts allow objects up to 156 GiB.
const DefaultPartSize = 16 << 20

// minPartSize is the smallest part S3 accepts (but for the last one).
const minPartSize = 5 << 20

// Config says where the bucket is and how to reach it. The operator mounts
// the credentials from a Secret, so each can come from a file.
type Config struct {
	// Endpoint is the server's URL: http://host:port or https://host.
	Endpoint string `json:"endpoint"`
	// Bucket is the bucket's name; it must exist.
	Bucket string `json:"bucket"`
	// Path is a prefix prepended to every key, without leading or
	// trailing slashes ("" for the bucket's top).
	Path string `json:"path,omitempty"`
	// Region is the bucket's region ("" lets the client ask the server).
	Region string `json:"region,omitempty"`

	// AccessKeyID and SecretAccessKey are the credentials, given directly
	// or as files holding them (trailing newlines are ignored). Both empty
	// means anonymous access.
	AccessKeyID         string `json:"accessKeyID,omitempty"`
	AccessKeyIDFile     string `json:"accessKeyIDFile,omitempty"`
	SecretAccessKey     string `json:"secretAccessKey,omitempty"`
	SecretAccessKeyFile string `json:"secretAccessKeyFile,omitempty"`

	// CAFile is a PEM bundle of certificate authorities trusted, besides
	// the system's, for an https endpoint.
	CAFile string `json:"caFile,omitempty"`
	// CA is a PEM bundle given in memory instead of CAFile (the operator
	// reads it from a Secret); never serialised.
	CA []byte `json:"-"`

	// PartSize is the part size of uploads (DefaultPartSize when zero).
	PartSize uint64 `json:"partSize,omitempty"`
	// MaxRetries is how many times a failed request is tried again
	// (3 when zero; retries back off, so an unreachable endpoint takes a
	// few seconds to report).
	MaxRetries int `json:"maxRetries,omitempty"`

	// AddressCheck, when set, is asked before every connection with the
	// address about to be dialled, after name resolution (so a name that
	// resolves, or is made to resolve, to a refused address is refused
	// too); an error refuses the connection (KindRefused). Connections then
	// go to the endpoint directly, never through a proxy from the
	// environment, whose address would be all the check sees. The operator
	// sets RefuseInternalAddresses: whoever writes a cluster's spec chooses
	// the endpoint, and must not make the operator reach what only it can.
	AddressCheck func(netip.Addr) error `json:"-"`
}

// endpoint is the parsed Endpoint.
type endpoint struct {
	host   string
	secure bool
}

func parseEndpoint(raw string) (endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return endpoint{}, fmt.Errorf("object store endpoint %q is not a URL: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return endpoint{}, fmt.Errorf("object store endpoint %q must start with http:// or https://", raw)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return endpoint{}, fmt.Errorf("object store endpoint %q must be scheme://host[:port] only: put the bucket and path in their own fields", raw)
	}
	return endpoint{host: u.Host, secure: u.Scheme == "https"}, nil
}

// normalizePath checks Path and strips surrounding slashes.
func normalizePath(p string) (string, error) {
	p = strings.Trim(p, "/")
	if p == "" {
		return "", nil
	}
	if path.Clean(p) != p || strings.HasPrefix(p, "../") || p == ".." {
		return "", fmt.Errorf("object store path %q is not a clean relative path", p)
	}
	return p, nil
}

// credentials returns the access key id and secret, read from their files
// when set there.
func (c Config) credentials() (id, secret string, err error) {
	if id, err = valueOrFile("access key id", c.AccessKeyID, c.AccessKeyIDFile); err != nil {
		return "", "", err
	}
	if secret, err = valueOrFile("secret access key", c.SecretAccessKey, c.SecretAccessKeyFile); err != nil {
		return "", "", err
	}
	if (id == "") != (secret == "") {
		return "", "", errors.New("object store credentials need both an access key id and a secret access key (or neither, for anonymous access)")
	}
	return id, secret, nil
}

func valueOrFile(what, value, file string) (string, error) {
	if value != "" && file != "" {
		return "", fmt.Errorf("the object store %s is given both directly and as file %s: give one", what, file)
	}
	if file == "" {
		return value, nil
	}
	data, err := os.ReadFile(file) //nolint:gosec // a mounted Secret the configuration names
	if err != nil {
		return "", fmt.Errorf("while reading the object store %s: %w", what, err)
	}
	return strings.TrimRight(string(data), "\r\n"), nil
}

// transport is an HTTP transport that trusts CAFile besides the system's
// authorities.
func (c Config) transport() (*http.Transport, error) {
	tr, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return nil, errors.New("http.DefaultTransport is not an *http.Transport")
	}
	tr = tr.Clone()
	tr.ResponseHeaderTimeout = 2 * time.Minute
	if c.AddressCheck != nil {
		tr.Proxy = nil
		tr.DialContext = checkedDialer(c.AddressCheck).DialContext
	}
	if c.CAFile != "" && len(c.CA) > 0 {
		return nil, errors.New("the object store CA bundle is given both directly and as a file: give one")
	}
	pem, source := c.CA, "given"
	if c.CAFile != "" {
		var err error
		if pem, err = os.ReadFile(c.CAFile); err != nil {
			return nil, fmt.Errorf("while reading the object store's CA bundle: %w", err)
		}
		source = c.CAFile
	}
	if len(pem) == 0 {
		return tr, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("object store CA bundle %s holds no PEM certificate", source)
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return tr, nil
}

// checkedDialer dials as http.DefaultTransport does, asking check about each
// address just before the connection is made: after resolution, and for
// every address a name resolves to.
func checkedDialer(check func(netip.Addr) error) *net.Dialer {
	return &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: %s is not an IP address and port", ErrAddressRefused, address)
			}
			return check(ap.Addr().Unmap())
		},
	}
}

// ErrAddressRefused is wrapped by the errors of an AddressCheck that
// refuses an address.
var ErrAddressRefused = errors.New("address refused")

// metadataServices are the cloud instance-metadata addresses outside
// the link-local range: Alibaba Cloud's, and AWS's over IPv6 (in the
// unique local range, which private networks use too, so it is refused by
// address rather than by range).
var metadataServices = []netip.Addr{
	netip.MustParseAddr("100.100.100.200"),
	netip.MustParseAddr("fd00:ec2::254"),
	// Azure's WireServer, which serves a VM's configuration and keys.
	netip.MustParseAddr("168.63.129.16"),
}

// NAT64 prefixes: a network with a NAT64 gateway translates an address of
// the well-known prefix to the IPv4 address in its last 32 bits, so
// 64:ff9b::a9fe:a9fe reaches 169.254.169.254; that embedded address is
// checked as itself. The local-use prefix embeds it at places that
// depend on the network's prefix length, which the operator cannot know:
// refused whole.
var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")
	nat64LocalUse  = netip.MustParsePrefix("64:ff9b:1::/48")
)

// RefuseInternalAddresses refuses the addresses no object store of a
// tenant can have, seen from the operator's pod: its own loopback (its
// metrics and probes), link-local ones (where most clouds serve instance
// metadata and credentials), the other known metadata services,
// unspecified and multicast addresses. Private and cluster addresses stay
// allowed: an object store often runs in the cluster.
func RefuseInternalAddresses(a netip.Addr) error {
	var what string
	switch {
	case nat64WellKnown.Contains(a):
		if err := RefuseInternalAddresses(embeddedIPv4(a)); err != nil {
			return fmt.Errorf("%w (through NAT64 from %s)", err, a)
		}
		return nil
	case nat64LocalUse.Contains(a):
		what = "a local-use NAT64 address (whose IPv4 address cannot be checked)"
	case a.IsLoopback():
		what = "a loopback address"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		what = "a link-local address (where clouds serve instance metadata)"
	case slices.Contains(metadataServices, a):
		what = "a cloud instance-metadata address"
	case a.IsUnspecified():
		what = "the unspecified address"
	case a.IsMulticast():
		what = "a multicast address"
	default:
		return nil
	}
	return fmt.Errorf("%w: the endpoint is at %s, %s, which the operator does not connect to for an object store", ErrAddressRefused, a, what)
}

// embeddedIPv4 is the IPv4 address in the last 32 bits of a.
func embeddedIPv4(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom4([4]byte(b[12:]))
}
