//go:build integration

package backup

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"

	"tusk.dev/tusk/internal/testenv"
	"tusk.dev/tusk/internal/walarchive"
)

// TestPreviousFormatRestores stores a segment as wal-archive did before it
// compressed in memory (the streaming encoder with its default concurrency
// and window, a multipart upload of unknown size), then checks that the
// built binary restores it byte for byte and treats it as archived: the
// same content again succeeds without upload, other content is refused.
func TestPreviousFormatRestores(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	dir := workDir(t)
	cfg := archiveConfig(t, dir, s3, nil)
	const name = "000000010000000000000005"
	seg := fakeSegment(t, dir, name, 5, 8)
	content, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	var old bytes.Buffer
	enc, err := zstd.NewWriter(&old, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	meta := map[string]string{"tusk-sha256": sha256Hex(content), "tusk-size": "16777216", "tusk-compression": "zstd"}
	if _, err := s3.Client().PutObject(context.Background(), s3.Bucket, walKey(name), &old, -1,
		minio.PutObjectOptions{UserMetadata: meta, PartSize: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	before, err := s3.Client().StatObject(context.Background(), s3.Bucket, walKey(name), minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}

	dest := filepath.Join(dir, "RECOVERYXLOG")
	if code, out := tusk(t, "instance", "wal-restore", "--config", cfg, name, dest); code != 0 {
		t.Fatalf("restoring the previous format: exit %d, %s", code, out)
	}
	if got := sha(t, dest); got != sha256Hex(content) {
		t.Errorf("restored sha256 %s, want %s", got, sha256Hex(content))
	}
	code, out := tusk(t, "instance", "wal-archive", "--config", cfg, seg)
	if code != 0 || !strings.Contains(out, "already archived with the same content") {
		t.Errorf("archiving the same segment over the previous format: exit %d, %q; want 0 and a notice", code, out)
	}
	fakeSegment(t, dir, name, 6, 8)
	if code, out := tusk(t, "instance", "wal-archive", "--config", cfg, seg); code != 1 || !strings.Contains(out, "a different file of the same name is already archived") {
		t.Errorf("archiving other content over the previous format: exit %d, %q; want 1 and a refusal", code, out)
	}
	after, err := s3.Client().StatObject(context.Background(), s3.Bucket, walKey(name), minio.StatObjectOptions{})
	if err != nil || after.ETag != before.ETag {
		t.Errorf("the previous format's object changed: ETag %q, then %q, %v", before.ETag, after.ETag, err)
	}
}

// TestStreamedArchive archives a segment through the streamed path that
// files larger than MaxInMemory take (lowered here so that a 16 MiB
// segment takes it), restores it with the built binary byte for byte, and
// checks the idempotence rules across the two paths.
func TestStreamedArchive(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	dir := workDir(t)
	cfgPath := archiveConfig(t, dir, s3, nil)
	cfg, err := walarchive.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	streamed, err := walarchive.NewArchiver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	streamed.MaxInMemory = 1 << 20
	inMemory := streamed
	inMemory.MaxInMemory = 0

	const name = "000000010000000000000007"
	seg := fakeSegment(t, dir, name, 7, 8)
	original := sha(t, seg)
	ctx := context.Background()
	if res, err := streamed.Archive(ctx, seg); err != nil || res.AlreadyArchived || res.Sum.SHA256 != original {
		t.Fatalf("streamed archive: %+v, %v; want a new upload of sha256 %s", res, err, original)
	}
	md, data := rawObject(t, s3, walKey(name))
	if md["tusk-sha256"] != original || sha256Hex(data) != original {
		t.Fatalf("streamed object: metadata %v, content sha256 %s; want %s", md, sha256Hex(data), original)
	}
	dest := filepath.Join(dir, "RECOVERYXLOG")
	if code, out := tusk(t, "instance", "wal-restore", "--config", cfgPath, name, dest); code != 0 || sha(t, dest) != original {
		t.Fatalf("restoring the streamed segment: exit %d, %s", code, out)
	}
	if res, err := inMemory.Archive(ctx, seg); err != nil || !res.AlreadyArchived {
		t.Errorf("archiving the same content in memory over the streamed object: %+v, %v; want already archived", res, err)
	}
	fakeSegment(t, dir, name, 8, 8)
	for which, a := range map[string]walarchive.Archiver{"streamed": streamed, "in memory": inMemory} {
		if _, err := a.Archive(ctx, seg); !errors.Is(err, walarchive.ErrDifferentContent) {
			t.Errorf("archiving other content %s: %v; want ErrDifferentContent", which, err)
		}
	}
	if md, _ := rawObject(t, s3, walKey(name)); md["tusk-sha256"] != original {
		t.Errorf("the archived object was overwritten: metadata %v", md)
	}
}
