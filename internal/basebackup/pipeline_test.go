package basebackup

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"

	"github.com/klauspost/compress/zstd"
)

// pipelineInput is a few chunks and a bit of data that compresses a
// little: runs of random bytes.
func pipelineInput() []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 3*chunkSize+12345)
	for i := range data {
		if i%64 < 32 {
			data[i] = byte(rng.Uint32())
		}
	}
	return data
}

// readInPieces reads r to its end as tar.Reader does, in small reads.
func readInPieces(t *testing.T, r io.Reader) []byte {
	t.Helper()
	var got bytes.Buffer
	p := make([]byte, 8<<10)
	for {
		n, err := r.Read(p)
		got.Write(p[:n])
		if errors.Is(err, io.EOF) {
			return got.Bytes()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestChunkTeeCompressesWhatTheCheckerReads(t *testing.T) {
	data := pipelineInput()
	var out bytes.Buffer
	c, err := startCompressor(&out)
	if err != nil {
		t.Fatal(err)
	}
	// Odd-sized reads from the source, as from a pipe.
	tee := newChunkTee(iotest.HalfReader(bytes.NewReader(data)), c.in, c.free)
	if got := readInPieces(t, tee); !bytes.Equal(got, data) {
		t.Fatalf("the checker read %d bytes, not the %d written", len(got), len(data))
	}
	tee.flush()
	if err := c.finish(); err != nil {
		t.Fatal(err)
	}
	if c.w.n != int64(out.Len()) {
		t.Errorf("counted %d compressed bytes, wrote %d", c.w.n, out.Len())
	}
	dec, err := zstd.NewReader(&out)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	got, err := io.ReadAll(dec)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("decompressed %d bytes that differ from the %d read", len(got), len(data))
	}
}

type failingWriter struct{}

var errUploadStopped = errors.New("the upload stopped")

func (failingWriter) Write([]byte) (int, error) { return 0, errUploadStopped }

func TestCompressorFailureNeverBlocksTheChecker(t *testing.T) {
	data := pipelineInput()
	c, err := startCompressor(failingWriter{})
	if err != nil {
		t.Fatal(err)
	}
	tee := newChunkTee(bytes.NewReader(data), c.in, c.free)
	if got := readInPieces(t, tee); len(got) != len(data) {
		t.Fatalf("the checker read %d bytes, not %d", len(got), len(data))
	}
	tee.flush()
	if err := c.finish(); !errors.Is(err, errUploadStopped) {
		t.Fatalf("finish returned %v, want the writer's error", err)
	}
}
