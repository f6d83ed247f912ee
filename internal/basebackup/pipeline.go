package basebackup

import (
	"bufio"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// The backup's tar stream goes through two stages, each on its own
// goroutine, so that they overlap: the checker reads pg_basebackup's output
// in chunks and checks it against the manifest; each chunk it has read goes
// on to the compressor, which writes the compressed stream to the upload.
// A few chunks in flight decouple the two; the free list bounds the memory
// and stops the reading when the compressor (or the upload behind it)
// falls behind.
//
// Measured (docs/benchmarks.md): the single goroutine this replaces did
// the reading, checking and the encoder's input copies, and the zstd
// encoder's own concurrency started a goroutine per 128 KiB block and
// handed each block's output through the upload's pipe, so that scheduling
// and futex wake-ups cost about as much CPU as the compression itself.
const (
	// chunkSize is the unit handed from the checker to the compressor.
	chunkSize = 1 << 20
	// chunksInFlight bounds the chunks read but not yet compressed.
	chunksInFlight = 4
	// compressedBuffer collects the compressed stream before it goes
	// through the pipe to the upload, so that a handoff moves a MiB, not
	// one zstd block.
	compressedBuffer = 1 << 20
	// pipeSize is what pg_basebackup can write ahead of the reader (the
	// Linux default of 64 KiB makes it wait at every wake-up of ours);
	// 1 MiB is the default pipe-max-size for unprivileged processes.
	pipeSize = 1 << 20
)

// chunkTee is the reader the checker reads pg_basebackup's output
// through: it reads src into chunks and, once the checker has read a
// chunk, sends it to the compressor.
type chunkTee struct {
	src  io.Reader
	out  chan<- []byte // chunks read, to compress
	free chan []byte   // empty chunks
	buf  []byte        // the current chunk: len is what was read into it
	off  int           // what of buf the checker has read
	err  error         // src's error, returned once buf is read
}

func newChunkTee(src io.Reader, out chan<- []byte, free chan []byte) *chunkTee {
	return &chunkTee{src: src, out: out, free: free, buf: (<-free)[:0]}
}

func (t *chunkTee) Read(p []byte) (int, error) {
	if t.off == len(t.buf) {
		if len(t.buf) == cap(t.buf) {
			t.flush()
		}
		if t.err != nil {
			return 0, t.err
		}
		n, err := t.src.Read(t.buf[len(t.buf):cap(t.buf)])
		t.buf, t.err = t.buf[:len(t.buf)+n], err
		if n == 0 {
			return 0, err
		}
	}
	n := copy(p, t.buf[t.off:])
	t.off += n
	return n, nil
}

// flush sends what was read of the current chunk to the compressor and
// starts a new one.
func (t *chunkTee) flush() {
	if len(t.buf) > 0 {
		t.out <- t.buf
		t.buf = (<-t.free)[:0]
	}
	t.off = 0
}

// compressor compresses the chunks it receives into w, on its own
// goroutine, and gives each chunk back to the free list.
type compressor struct {
	in   chan []byte
	free chan []byte
	done chan struct{}
	w    *countingWriter
	err  error // set before done closes
}

func startCompressor(w io.Writer) (*compressor, error) {
	bw := bufio.NewWriterSize(w, compressedBuffer)
	c := &compressor{in: make(chan []byte, chunksInFlight), free: make(chan []byte, chunksInFlight+1),
		done: make(chan struct{}), w: &countingWriter{w: bw}}
	// One encoder goroutine: the encoder's own concurrency would only
	// add goroutines per block, as a zstd frame is encoded block by block.
	// No frame checksum: every file is checked against the manifest's
	// checksums on restore, and the manifest against its own.
	enc, err := zstd.NewWriter(c.w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, err
	}
	for range chunksInFlight + 1 {
		c.free <- make([]byte, chunkSize)
	}
	go c.run(enc, bw)
	return c, nil
}

func (c *compressor) run(enc *zstd.Encoder, bw *bufio.Writer) {
	defer close(c.done)
	for chunk := range c.in {
		if c.err == nil {
			_, c.err = enc.Write(chunk)
		}
		c.free <- chunk // after a failure too: the reader must never block
	}
	if c.err != nil {
		enc.Reset(nil)
		return
	}
	if err := enc.Close(); err != nil {
		c.err = fmt.Errorf("while compressing: %w", err)
		return
	}
	c.err = bw.Flush()
}

// finish waits for the compressor to have written everything it was
// sent, and returns its error.
func (c *compressor) finish() error {
	close(c.in)
	<-c.done
	return c.err
}
