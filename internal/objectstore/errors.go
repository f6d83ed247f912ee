package objectstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"

	"github.com/minio/minio-go/v7"
)

// Kind is what went wrong, in the terms a user fixes it by.
type Kind int

// The kinds of object store failures.
const (
	// KindOther is anything not below (a server error, a bad request).
	KindOther Kind = iota
	// KindNotFound: the object does not exist (the bucket does).
	KindNotFound
	// KindNoSuchBucket: the bucket does not exist.
	KindNoSuchBucket
	// KindCredentials: the server refused the credentials (unknown access
	// key, wrong secret, expired token) or they lack permission.
	KindCredentials
	// KindUnreachable: no HTTP exchange with the endpoint was possible
	// (refused, DNS, timeout, connection reset).
	KindUnreachable
	// KindTLS: the endpoint's certificate is not trusted or does not match,
	// or it does not speak TLS at all.
	KindTLS
	// KindRefused: the Config's AddressCheck refused the endpoint's
	// address; nothing was sent.
	KindRefused
)

// String names the kind as the hint in messages does.
func (k Kind) String() string {
	switch k {
	case KindNotFound:
		return "object not found"
	case KindNoSuchBucket:
		return "bucket does not exist"
	case KindCredentials:
		return "access denied: wrong credentials or no permission on the bucket"
	case KindUnreachable:
		return "endpoint unreachable"
	case KindTLS:
		return "TLS failure: the endpoint's certificate is not trusted (set a CA bundle) or does not match its name"
	case KindRefused:
		return "endpoint refused: it is at an address the operator does not connect to (loopback, link-local, cloud metadata)"
	default:
		return "object store error"
	}
}

// Error is every error a Store's operations return: the operation, the key,
// the endpoint and bucket, what kind of failure it is, and the cause.
type Error struct {
	Op       string
	Key      string
	Endpoint string
	Bucket   string
	Kind     Kind
	Err      error
}

func (e *Error) Error() string {
	target := fmt.Sprintf("bucket %q at %s", e.Bucket, e.Endpoint)
	if e.Key != "" {
		target = fmt.Sprintf("%q in %s", e.Key, target)
	}
	return fmt.Sprintf("while %s %s: %s: %v", e.Op, target, e.Kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// IsNotFound says whether err means that the object does not exist (and
// only that: not a missing bucket).
func IsNotFound(err error) bool { return Classify(err) == KindNotFound }

// Classify tells what kind of failure err is: an *Error's Kind, or the kind
// of a minio-go or network error found in its chain.
func Classify(err error) Kind {
	if err == nil {
		return KindOther
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Kind
	}
	if kind, ok := classifyTransport(err); ok {
		return kind
	}
	return classifyResponse(minio.ToErrorResponse(err))
}

// classifyResponse maps the S3 error codes (or, for replies without a body
// such as HEAD's, the status) to a Kind.
func classifyResponse(r minio.ErrorResponse) Kind {
	switch r.Code {
	case minio.NoSuchKey, "NotFound":
		return KindNotFound
	case minio.NoSuchBucket:
		return KindNoSuchBucket
	case minio.AccessDenied, "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
		"ExpiredToken", "InvalidSecurity", "AccountProblem", "AllAccessDisabled":
		return KindCredentials
	}
	switch r.StatusCode {
	case 401, 403:
		return KindCredentials
	}
	return KindOther
}

// classifyTransport recognises failures below HTTP: TLS, then anything that
// kept the request from reaching the server.
func classifyTransport(err error) (Kind, bool) {
	if errors.Is(err, ErrAddressRefused) {
		return KindRefused, true
	}
	if isTLSError(err) {
		return KindTLS, true
	}
	if errors.Is(err, context.Canceled) {
		return KindOther, false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return KindUnreachable, true
	}
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return KindUnreachable, true
	}
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return KindUnreachable, true
	}
	if _, ok := errors.AsType[*url.Error](err); ok {
		return KindUnreachable, true
	}
	return KindOther, false
}

func isTLSError(err error) bool {
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.CertificateInvalidError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return true
	}
	return false
}
