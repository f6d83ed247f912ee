//go:build integration

package objectstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/pki"
	"tusk.dev/tusk/internal/testenv"
)

func config(s3 *testenv.S3) objectstore.Config {
	return objectstore.Config{
		Endpoint: s3.Endpoint, Bucket: s3.Bucket, Path: "clusters/", Region: "us-east-1",
		AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey, CAFile: s3.CAFile,
		PartSize: 5 << 20,
	}
}

func newStore(t *testing.T, cfg objectstore.Config) *objectstore.Store {
	t.Helper()
	st, err := objectstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// randomData is n bytes that do not compress, from a fixed seed.
func randomData(n int) []byte {
	r := rand.New(rand.NewChaCha8([32]byte{1}))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// onlyReader hides everything but Read, so the client cannot learn the size.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestPutGetStatListDelete(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	st := newStore(t, config(s3))
	c := ctx(t)
	if err := st.Check(c); err != nil {
		t.Fatal(err)
	}
	// 12 MiB in 5 MiB parts: a multipart upload of unknown size.
	big := randomData(12 << 20)
	objects := map[string][]byte{"a/wal/1": []byte("first"), "a/wal/2": {}, "a/base/x": big, "b/wal/1": []byte("other")}
	for key, data := range objects {
		if err := st.Put(c, key, onlyReader{bytes.NewReader(data)}, map[string]string{"Tusk-Sha256": sum(data)}); err != nil {
			t.Fatal(err)
		}
	}
	// 23 MiB streamed in five parts of 5 MiB, two in flight.
	stream := randomData(23 << 20)
	if err := st.PutStream(c, "a/base/stream", onlyReader{bytes.NewReader(stream)},
		map[string]string{"Tusk-Sha256": sum(stream)}, int64(len(stream))); err != nil {
		t.Fatal(err)
	}
	objects["a/base/stream"] = stream
	// 20 MiB in one PUT, more than the 16 MiB minio-go would split into
	// parts, and an empty object.
	sized := randomData(20 << 20)
	for key, data := range map[string][]byte{"a/sized/big": sized, "a/sized/empty": {}} {
		if err := st.PutSized(c, key, data, map[string]string{"Tusk-Sha256": sum(data)}); err != nil {
			t.Fatal(err)
		}
		objects[key] = data
	}
	for key, data := range objects {
		checkGet(t, st, key, data)
	}
	// A multipart object's ETag ends with -<parts>; one PUT's does not.
	if raw, err := s3.Client().StatObject(c, s3.Bucket, "clusters/a/sized/big", minio.StatObjectOptions{}); err != nil || strings.Contains(raw.ETag, "-") {
		t.Errorf("PutSized of 20 MiB: ETag %q, %v; want one PUT", raw.ETag, err)
	}
	if raw, err := s3.Client().StatObject(c, s3.Bucket, "clusters/a/base/x", minio.StatObjectOptions{}); err != nil || !strings.Contains(raw.ETag, "-") {
		t.Errorf("Put of 12 MiB: ETag %q, %v; want a multipart upload (the check above tells them apart)", raw.ETag, err)
	}
	info, err := st.Stat(c, "a/base/x")
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(big)) || info.Metadata["tusk-sha256"] != sum(big) || info.Key != "a/base/x" {
		t.Errorf("Stat = %+v, want size %d and the checksum in metadata", info, len(big))
	}
	if got := listKeys(t, st, "a/"); !slices.Equal(got, []string{"a/base/stream", "a/base/x", "a/sized/big", "a/sized/empty", "a/wal/1", "a/wal/2"}) {
		t.Errorf("List(a/) = %v", got)
	}
	// The keys really are under the configured path in the bucket.
	raw, err := s3.Client().StatObject(c, s3.Bucket, "clusters/b/wal/1", minio.StatObjectOptions{})
	if err != nil || raw.Size != 5 {
		t.Errorf("raw object clusters/b/wal/1: %+v, %v", raw, err)
	}
	if err := st.Delete(c, "a/wal/1"); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.Exists(c, "a/wal/1"); ok || err != nil {
		t.Errorf("Exists after Delete = %v, %v; want false, nil", ok, err)
	}
	if ok, err := st.Exists(c, "a/wal/2"); !ok || err != nil {
		t.Errorf("Exists(a/wal/2) = %v, %v; want true, nil", ok, err)
	}
	if err := st.Delete(c, "a/wal/1"); err != nil {
		t.Errorf("deleting a missing object: %v", err)
	}
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func checkGet(t *testing.T, st *objectstore.Store, key string, want []byte) {
	t.Helper()
	r, info, err := st.Get(ctx(t), key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	defer func() { _ = r.Close() }()
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	if !bytes.Equal(got, want) || info.Size != int64(len(want)) || info.Metadata["tusk-sha256"] != sum(want) {
		t.Errorf("Get(%s): %d bytes (equal: %v), info %+v; want %d bytes", key, len(got), bytes.Equal(got, want), info, len(want))
	}
}

func listKeys(t *testing.T, st *objectstore.Store, prefix string) []string {
	t.Helper()
	var keys []string
	for obj, err := range st.List(ctx(t), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, obj.Key)
	}
	return keys
}

func TestCredentialsFromFiles(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	dir := t.TempDir()
	cfg := config(s3)
	cfg.AccessKeyIDFile, cfg.SecretAccessKeyFile = filepath.Join(dir, "id"), filepath.Join(dir, "secret")
	cfg.AccessKeyID, cfg.SecretAccessKey = "", ""
	// Secrets mounted from Kubernetes often end with a newline.
	for file, value := range map[string]string{cfg.AccessKeyIDFile: s3.AccessKey + "\n", cfg.SecretAccessKeyFile: s3.SecretKey} {
		if err := os.WriteFile(file, []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st := newStore(t, cfg)
	if err := st.Put(ctx(t), "k", strings.NewReader("v"), map[string]string{"tusk-sha256": sum([]byte("v"))}); err != nil {
		t.Fatal(err)
	}
	checkGet(t, st, "k", []byte("v"))
}

func TestMissingObjectIsNotFound(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	st := newStore(t, config(s3))
	_, _, err := st.Get(ctx(t), "nothing/here")
	if !objectstore.IsNotFound(err) {
		t.Errorf("Get of a missing object: %v (kind %v); want not found", err, objectstore.Classify(err))
	}
	_, err = st.Stat(ctx(t), "nothing/here")
	if !objectstore.IsNotFound(err) {
		t.Errorf("Stat of a missing object: %v; want not found", err)
	}
}

// TestBadInput checks that each mistake a user can make is told apart, by
// every operation, with a message naming it.
func TestBadInput(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	cases := []struct {
		name   string
		change func(*objectstore.Config)
		want   objectstore.Kind
		hint   string
	}{
		{"wrong secret", func(c *objectstore.Config) { c.SecretAccessKey = "not-the-secret" }, objectstore.KindCredentials, "wrong credentials"},
		{"unknown access key", func(c *objectstore.Config) { c.AccessKeyID = "nobody" }, objectstore.KindCredentials, "wrong credentials"},
		{"missing bucket", func(c *objectstore.Config) { c.Bucket = "no-such-bucket" }, objectstore.KindNoSuchBucket, "bucket does not exist"},
		{"unreachable endpoint", func(c *objectstore.Config) { c.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)) }, objectstore.KindUnreachable, "unreachable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(s3)
			tc.change(&cfg)
			st := newStore(t, cfg)
			c := ctx(t)
			_, _, getErr := st.Get(c, "k")
			ops := map[string]error{
				"Check": st.Check(c),
				"Put":   st.Put(c, "k", strings.NewReader("v"), nil),
				"Get":   getErr,
			}
			for op, err := range ops {
				if got := objectstore.Classify(err); got != tc.want {
					t.Errorf("%s: kind %v, want %v (error: %v)", op, got, tc.want, err)
				}
				if err == nil || !strings.Contains(err.Error(), tc.hint) || !strings.Contains(err.Error(), cfg.Endpoint) {
					t.Errorf("%s: error %q should say %q and name %s", op, err, tc.hint, cfg.Endpoint)
				}
			}
		})
	}
	// Nothing was written by any of them.
	st := newStore(t, config(s3))
	if keys := listKeys(t, st, ""); len(keys) != 0 {
		t.Errorf("objects after failed operations: %v", keys)
	}
}

func TestTLSEndpointWithCABundle(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("tusk test S3 CA", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	server, err := pki.IssueServer(ca, "127.0.0.1", nil, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	s3 := testenv.StartS3(t, testenv.S3Options{CertPEM: server.CertPEM, KeyPEM: server.KeyPEM, CAPEM: ca.CertPEM})
	if !strings.HasPrefix(s3.Endpoint, "https://") {
		t.Fatalf("endpoint %s is not https", s3.Endpoint)
	}
	st := newStore(t, config(s3))
	if err := st.Put(ctx(t), "k", strings.NewReader("over TLS"), map[string]string{"tusk-sha256": sum([]byte("over TLS"))}); err != nil {
		t.Fatal(err)
	}
	checkGet(t, st, "k", []byte("over TLS"))

	inMemory := config(s3) // as the operator reads it from a Secret
	inMemory.CAFile, inMemory.CA = "", ca.CertPEM
	checkGet(t, newStore(t, inMemory), "k", []byte("over TLS"))

	untrusting := config(s3)
	untrusting.CAFile = ""
	err = newStore(t, untrusting).Check(ctx(t))
	if objectstore.Classify(err) != objectstore.KindTLS || !strings.Contains(err.Error(), "CA bundle") {
		t.Errorf("without the CA bundle: %v (kind %v); want a TLS failure that suggests a CA bundle", err, objectstore.Classify(err))
	}
}
