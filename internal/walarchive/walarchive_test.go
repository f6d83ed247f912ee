package walarchive

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"tusk.dev/tusk/internal/objectstore"
)

func TestKey(t *testing.T) {
	cases := []struct {
		name, want string
	}{
		{"000000010000000000000003", "wal/0000000100000000/000000010000000000000003.zst"},
		{"0000000A000000FF000000FE", "wal/0000000A000000FF/0000000A000000FF000000FE.zst"},
		{"000000010000000200000003.partial", "wal/0000000100000002/000000010000000200000003.partial.zst"},
		{"000000010000000000000002.00000028.backup", "wal/0000000100000000/000000010000000000000002.00000028.backup.zst"},
		{"00000002.history", "wal/00000002.history.zst"},
		// Not WAL files: never archived, so never keys.
		{"RECOVERYXLOG", ""},
		{"archive_status", ""},
		{"00000001000000000000000g", ""},
		{"0000000100000000000000030", ""},
		{"../00000002.history", ""},
		{"", ""},
	}
	for _, tc := range cases {
		got, err := Key(tc.name)
		if tc.want == "" {
			if !errors.Is(err, ErrUnknownFileName) {
				t.Errorf("Key(%q) = %q, %v; want ErrUnknownFileName", tc.name, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Key(%q) = %q, %v; want %q", tc.name, got, err, tc.want)
		}
		if !strings.HasPrefix(got, WALPrefix) {
			t.Errorf("Key(%q) = %q is outside %q", tc.name, got, WALPrefix)
		}
	}
}

func TestValidateClusterName(t *testing.T) {
	for name, ok := range map[string]bool{"orders": true, "a.b-c": true, "": false, "a/b": false, "..": false, ".": false, `a\b`: false} {
		if err := validateClusterName(name); (err == nil) != ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

const (
	shaA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	shaB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// TestIdempotenceRules is the decision archive_command makes when the key
// already holds an object.
func TestIdempotenceRules(t *testing.T) {
	local := Sum{SHA256: shaA, Size: 16 << 20}
	cases := []struct {
		name     string
		existing map[string]string
		skip     bool
		errHas   string
	}{
		{"same content", Sum{SHA256: shaA, Size: 16 << 20}.metadata(), true, ""},
		{"different content", Sum{SHA256: shaB, Size: 16 << 20}.metadata(), false, "archived sha256 " + shaB},
		{"same checksum, different size", Sum{SHA256: shaA, Size: 1 << 20}.metadata(), false, "1048576 bytes"},
		{"no metadata (not ours)", map[string]string{}, false, "not written by tusk wal-archive"},
		{"other compression", map[string]string{metaSHA256: shaA, metaSize: "16777216", metaCompression: "gzip"}, false, `"gzip"`},
		{"malformed checksum", map[string]string{metaSHA256: "abc", metaSize: "16777216", metaCompression: "zstd"}, false, "no valid checksum"},
		{"malformed size", map[string]string{metaSHA256: shaA, metaSize: "-1", metaCompression: "zstd"}, false, "no valid checksum"},
	}
	for _, tc := range cases {
		skip, err := alreadyArchived(local, tc.existing)
		if skip != tc.skip {
			t.Errorf("%s: skip = %v, want %v", tc.name, skip, tc.skip)
		}
		if tc.errHas == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrDifferentContent) || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("%s: error %v, want ErrDifferentContent mentioning %q", tc.name, err, tc.errHas)
		}
	}
}

func compressed(t *testing.T, data []byte) []byte {
	t.Helper()
	sum, err := sumOf(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := compress(&buf, bytes.NewReader(data), sum); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCompressRefusesAFileThatChanged(t *testing.T) {
	var buf bytes.Buffer
	err := compress(&buf, strings.NewReader("now"), Sum{SHA256: shaA, Size: 3})
	if err == nil || !strings.Contains(err.Error(), "changed while it was archived") {
		t.Errorf("compress with a stale sum: %v", err)
	}
}

func TestWriteVerified(t *testing.T) {
	data := bytes.Repeat([]byte("wal record "), 100000)
	good := compressed(t, data)
	sum, _ := sumOf(bytes.NewReader(data))
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)/2] ^= 0xff
	other := compressed(t, []byte("other content"))
	cases := []struct {
		name string
		obj  []byte
		want error
	}{
		{"good", good, nil},
		{"other content under the checksum", other, ErrChecksumMismatch},
		{"corrupt stream", corrupt, ErrChecksumMismatch},
		{"not zstd", data[:1000], ErrChecksumMismatch},
		{"truncated", good[:len(good)/2], ErrChecksumMismatch},
	}
	for _, tc := range cases {
		dest := filepath.Join(t.TempDir(), "RECOVERYXLOG")
		err := writeVerified(bytes.NewReader(tc.obj), dest, sum)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		entries, _ := os.ReadDir(filepath.Dir(dest))
		if tc.want != nil {
			if len(entries) != 0 {
				t.Errorf("%s: left %v behind", tc.name, entries)
			}
			continue
		}
		got, err := os.ReadFile(dest)
		if err != nil || !bytes.Equal(got, data) || len(entries) != 1 {
			t.Errorf("%s: restored %d bytes (equal %v), %v; dir %v", tc.name, len(got), bytes.Equal(got, data), err, entries)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	write(t, good, `{"cluster": "orders", "objectStore": {"endpoint": "http://127.0.0.1:9000", "bucket": "b", "path": "p",
		"accessKeyIDFile": "/x/id", "secretAccessKeyFile": "/x/secret", "caFile": "/x/ca.crt"}}`)
	cfg, err := LoadConfig(good)
	if err != nil || cfg.Cluster != "orders" || cfg.ObjectStore.Bucket != "b" || cfg.ObjectStore.CAFile != "/x/ca.crt" {
		t.Errorf("LoadConfig = %+v, %v", cfg, err)
	}
	t.Setenv(ConfigEnv, good)
	if cfg, err := LoadConfig(""); err != nil || cfg.Cluster != "orders" {
		t.Errorf("LoadConfig from $%s = %+v, %v", ConfigEnv, cfg, err)
	}
	typo := filepath.Join(dir, "typo.json")
	write(t, typo, `{"cluster": "orders", "objectStore": {"endpiont": "http://x"}}`)
	if _, err := LoadConfig(typo); err == nil || !strings.Contains(err.Error(), "endpiont") {
		t.Errorf("a misspelt field: %v", err)
	}
	t.Setenv(ConfigEnv, "")
	if _, err := LoadConfig(""); err == nil || !strings.Contains(err.Error(), ConfigEnv) {
		t.Errorf("no configuration: %v", err)
	}
	if _, err := NewArchiver(Config{Cluster: "a/b"}); err == nil {
		t.Error("NewArchiver accepted a cluster name with a slash")
	}
	if _, err := NewArchiver(Config{Cluster: "a"}); err == nil || !strings.Contains(err.Error(), "endpoint") {
		t.Errorf("NewArchiver without an endpoint: %v", err)
	}
	// The location is the path, or the cluster's name without one.
	for path, want := range map[string]string{"": "s3://b/orders/", "/": "s3://b/orders/", "prod/orders-2": "s3://b/prod/orders-2/"} {
		a, err := NewArchiver(Config{Cluster: "orders", ObjectStore: objectstore.Config{Endpoint: "http://127.0.0.1:9000", Bucket: "b", Path: path}})
		if err != nil || a.Store.Location() != want {
			t.Errorf("path %q: %v, location %v; want %s", path, err, a.Store, want)
		}
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestEveryFormatRestores checks that restore reads, byte for byte, what
// Archive stores for files compressed in memory, what it streams for
// larger files, and what versions before in-memory archiving stored (the
// streaming encoder with its default concurrency and window).
func TestEveryFormatRestores(t *testing.T) {
	walLike := bytes.Repeat([]byte("wal record with some payload "), 700000) // 20 MB: many blocks
	random := make([]byte, 3<<20)
	_, _ = rand.Read(random)
	for name, data := range map[string][]byte{"wal-like": walLike, "random": random, "small": []byte("00000002.history content\n"), "empty": {}} {
		sum, _ := sumOf(bytes.NewReader(data))
		objects := map[string][]byte{"in memory": inMemory(t, data), "streamed": compressed(t, data), "previous": previousFormat(t, data)}
		for format, obj := range objects {
			dest := filepath.Join(t.TempDir(), "RECOVERYXLOG")
			if err := writeVerified(bytes.NewReader(obj), dest, sum); err != nil {
				t.Errorf("%s, %s: %v", name, format, err)
				continue
			}
			if got, err := os.ReadFile(dest); err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s, %s: restored %d bytes (equal %v), %v", name, format, len(got), bytes.Equal(got, data), err)
			}
		}
	}
}

// inMemory is what Archive stores for data in a file it compresses in
// memory.
func inMemory(t *testing.T, data []byte) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "000000010000000000000001")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	obj, sum, err := readWAL(f, DefaultMaxInMemory, new(bytes.Buffer))
	if want, _ := sumOf(bytes.NewReader(data)); err != nil || obj == nil || sum != want {
		t.Fatalf("readWAL: %d bytes, %v, %v; want the compressed file and %v", len(obj), sum, err, want)
	}
	return obj
}

// previousFormat compresses data as wal-archive did before it compressed
// in memory.
func previousFormat(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(enc, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestReadWAL(t *testing.T) {
	dir := t.TempDir()
	content := bytes.Repeat([]byte{1, 2, 3}, 1000)
	path := filepath.Join(dir, "000000010000000000000001")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	want, _ := sumOf(bytes.NewReader(content))
	for _, tc := range []struct {
		limit    int64
		inMemory bool
	}{{int64(len(content)), true}, {int64(len(content)) - 1, false}} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got, sum, err := readWAL(f, tc.limit, new(bytes.Buffer))
		_ = f.Close()
		if err != nil || sum != want {
			t.Errorf("limit %d: sum %v, %v; want %v", tc.limit, sum, err, want)
		}
		if tc.inMemory != (got != nil) {
			t.Errorf("limit %d: compressed %d bytes in memory, want in memory %v", tc.limit, len(got), tc.inMemory)
		}
	}
}
