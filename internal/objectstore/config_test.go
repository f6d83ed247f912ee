package objectstore

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/minio/minio-go/v7"
)

func TestParseEndpoint(t *testing.T) {
	cases := []struct {
		in      string
		want    endpoint
		wantErr string
	}{
		{"http://127.0.0.1:9000", endpoint{host: "127.0.0.1:9000"}, ""},
		{"https://s3.example.com", endpoint{host: "s3.example.com", secure: true}, ""},
		{"https://s3.example.com/", endpoint{host: "s3.example.com", secure: true}, ""},
		{"s3.example.com", endpoint{}, "must start with http:// or https://"},
		{"ftp://s3.example.com", endpoint{}, "must start with http:// or https://"},
		{"https://s3.example.com/bucket", endpoint{}, "put the bucket and path in their own fields"},
		{"https://user:pw@s3.example.com", endpoint{}, "scheme://host[:port] only"},
		{"https://", endpoint{}, "scheme://host[:port] only"},
	}
	for _, tc := range cases {
		got, err := parseEndpoint(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseEndpoint(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseEndpoint(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestNormalizePath(t *testing.T) {
	cases := map[string]string{"": "", "/": "", "backups": "backups", "/a/b/": "a/b", "a//b": "!", "a/../b": "!", "..": "!", "../x": "!"}
	for in, want := range cases {
		got, err := normalizePath(in)
		if want == "!" {
			if err == nil {
				t.Errorf("normalizePath(%q) = %q, want an error", in, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("normalizePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestCredentials(t *testing.T) {
	dir := t.TempDir()
	idFile, secretFile := filepath.Join(dir, "id"), filepath.Join(dir, "secret")
	if err := os.WriteFile(idFile, []byte("AKID\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secretFile, []byte("s3cr3t\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name           string
		cfg            Config
		id, secret, er string
	}{
		{"values", Config{AccessKeyID: "a", SecretAccessKey: "b"}, "a", "b", ""},
		{"files, newlines trimmed", Config{AccessKeyIDFile: idFile, SecretAccessKeyFile: secretFile}, "AKID", "s3cr3t", ""},
		{"mixed", Config{AccessKeyID: "a", SecretAccessKeyFile: secretFile}, "a", "s3cr3t", ""},
		{"anonymous", Config{}, "", "", ""},
		{"id without secret", Config{AccessKeyID: "a"}, "", "", "need both"},
		{"both value and file", Config{AccessKeyID: "a", AccessKeyIDFile: idFile, SecretAccessKey: "b"}, "", "", "given both directly and as file"},
		{"missing file", Config{AccessKeyIDFile: filepath.Join(dir, "nope"), SecretAccessKey: "b"}, "", "", "while reading the object store access key id"},
	}
	for _, tc := range cases {
		id, secret, err := tc.cfg.credentials()
		if tc.er != "" {
			if err == nil || !strings.Contains(err.Error(), tc.er) {
				t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.er)
			}
			continue
		}
		if err != nil || id != tc.id || secret != tc.secret {
			t.Errorf("%s: got %q, %q, %v; want %q, %q", tc.name, id, secret, err, tc.id, tc.secret)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := Config{Endpoint: "http://127.0.0.1:9000", Bucket: "b"}
	cases := map[string]func(*Config){
		"names no bucket":           func(c *Config) { c.Bucket = "" },
		"holds no PEM certificate":  func(c *Config) { c.CAFile = notPEM },
		"bundle given holds no PEM": func(c *Config) { c.CA = []byte("not a certificate") },
		"both directly and as a file": func(c *Config) {
			c.CAFile, c.CA = notPEM, []byte("x")
		},
		"below S3's minimum": func(c *Config) { c.PartSize = 1 << 20 },
		"not a clean":        func(c *Config) { c.Path = "a/../../b" },
	}
	for want, change := range cases {
		cfg := base
		change(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New with a config that %s: %v", want, err)
		}
	}
	st, err := New(Config{Endpoint: "https://s3.example.com", Bucket: "b", Path: "/x/y/"})
	if err != nil || st.Location() != "s3://b/x/y/" {
		t.Errorf("New: %v, location %v", err, st)
	}
}

func TestClassify(t *testing.T) {
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name string
		err  error
		want Kind
	}{
		{"NoSuchKey", minio.ErrorResponse{Code: minio.NoSuchKey, StatusCode: 404}, KindNotFound},
		{"NoSuchBucket", minio.ErrorResponse{Code: minio.NoSuchBucket, StatusCode: 404}, KindNoSuchBucket},
		{"InvalidAccessKeyId", minio.ErrorResponse{Code: "InvalidAccessKeyId", StatusCode: 403}, KindCredentials},
		{"SignatureDoesNotMatch", minio.ErrorResponse{Code: "SignatureDoesNotMatch", StatusCode: 403}, KindCredentials},
		{"bare 403", minio.ErrorResponse{StatusCode: 403}, KindCredentials},
		{"server error", minio.ErrorResponse{Code: "InternalError", StatusCode: 500}, KindOther},
		{"connection refused", &url.Error{Op: "Get", URL: "http://x", Err: opErr}, KindUnreachable},
		{"DNS", &url.Error{Op: "Get", URL: "http://x", Err: &net.DNSError{Err: "no such host", Name: "x"}}, KindUnreachable},
		{"deadline", fmt.Errorf("while x: %w", context.DeadlineExceeded), KindUnreachable},
		{"canceled", context.Canceled, KindOther},
		{"unknown CA", &url.Error{Op: "Get", URL: "https://x", Err: x509.UnknownAuthorityError{}}, KindTLS},
		{"wrapped Error", fmt.Errorf("while archiving: %w", &Error{Kind: KindNoSuchBucket, Err: errors.New("x")}), KindNoSuchBucket},
		{"plain", errors.New("something"), KindOther},
		{"nil", nil, KindOther},
	}
	for _, tc := range cases {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	err := &Error{Op: "reading", Key: "k", Endpoint: "http://h:1", Bucket: "b", Kind: KindNoSuchBucket, Err: errors.New("cause")}
	want := `while reading "k" in bucket "b" at http://h:1: bucket does not exist: cause`
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
}
