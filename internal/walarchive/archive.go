package walarchive

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/klauspost/compress/zstd"

	"tusk.dev/tusk/internal/objectstore"
)

// Archiver archives and restores one cluster's WAL files; its Store's
// path is the cluster's location.
type Archiver struct {
	Store *objectstore.Store
	// MaxInMemory is the largest file Archive reads into memory whole
	// (DefaultMaxInMemory when zero); larger ones are streamed.
	MaxInMemory int64
	// claim is the claim on the location (see Claim); nil claims nothing.
	claim *claim
}

// Result says what Archive did.
type Result struct {
	Key string
	Sum Sum
	// AlreadyArchived is true when the same content was already there and
	// nothing was uploaded.
	AlreadyArchived bool
	// Recorded is true when an earlier run archived it ahead (see
	// ArchiveAhead) and this one only checked the record.
	Recorded bool
}

// DefaultMaxInMemory is the largest WAL file Archive compresses into
// memory. Segments are 16 MiB unless initdb was told otherwise, history
// and backup history files are small: all are read once, summed and
// compressed in the same pass, and stored with one sized PUT. A larger
// file (initdb --wal-segsize allows up to 1 GiB) is streamed instead,
// reading it twice (once for its checksum, which the upload's metadata
// needs before the body, once to compress) rather than holding it in
// memory.
const DefaultMaxInMemory = 64 << 20

// Archive stores the WAL file at walPath (archive_command's %p). It returns
// once the object is complete in the store: PostgreSQL may then recycle the
// file. An error wrapping ErrDifferentContent means another file of that
// name is archived already; it is never overwritten.
func (a Archiver) Archive(ctx context.Context, walPath string) (Result, error) {
	name := filepath.Base(walPath)
	key, err := Key(name)
	if err != nil {
		return Result{}, err
	}
	if err := a.Claim(ctx); err != nil {
		return Result{Key: key}, err
	}
	f, err := os.Open(walPath) //nolint:gosec // the file PostgreSQL asks us to archive
	if err != nil {
		return Result{}, fmt.Errorf("while opening the WAL file to archive: %w", err)
	}
	defer func() { _ = f.Close() }()
	buf := getOutBuffer()
	defer putOutBuffer(buf) // after the upload, which reads compressed
	compressed, sum, err := readWAL(f, cmp.Or(a.MaxInMemory, DefaultMaxInMemory), buf)
	if err != nil {
		return Result{}, fmt.Errorf("while reading %s: %w", walPath, err)
	}
	res := Result{Key: key, Sum: sum}
	existing, err := a.Store.Stat(ctx, key)
	switch {
	case err == nil:
		if res.AlreadyArchived, err = alreadyArchived(sum, existing.Metadata); err != nil {
			return res, fmt.Errorf("refusing to archive %s to %s%s: %w; is another cluster archiving to the same location?",
				name, a.Store.Location(), key, err)
		}
		return res, nil
	case !objectstore.IsNotFound(err):
		return res, err
	}
	if compressed != nil {
		return res, a.Store.PutSized(ctx, key, compressed, sum.metadata())
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return res, err
	}
	return res, a.upload(ctx, key, f, sum)
}

// outBuffers keeps the buffers segments are compressed into. A process
// that archives one segment uses one; the instance manager's Watcher
// archives segment after segment, and reuses them instead of allocating
// (and having the runtime zero) a new one for each.
var outBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getOutBuffer() *bytes.Buffer { return outBuffers.Get().(*bytes.Buffer) }

func putOutBuffer(b *bytes.Buffer) {
	b.Reset()
	outBuffers.Put(b)
}

// readWAL sums the file f. A file of at most limit bytes is compressed in
// the same pass into out, and returned compressed (out's bytes, valid until
// out is used again): what is stored is exactly what was summed. A larger
// one is only summed (compressed is nil), and f is left at its end.
func readWAL(f *os.File, limit int64, out *bytes.Buffer) (compressed []byte, sum Sum, err error) {
	info, err := f.Stat()
	if err != nil {
		return nil, Sum{}, err
	}
	if info.Size() > limit {
		sum, err := sumOf(f)
		return nil, sum, err
	}
	enc := encoders.Get().(*zstd.Encoder)
	defer func() {
		enc.Reset(nil) // the pool keeps no reference to the output
		encoders.Put(enc)
	}()
	// Room for a quarter of the file up front (WAL compresses to a third or
	// less here), growing when it needs more: reserving the worst case (a
	// little over the file) kept a segment's size per buffer alive in a
	// long-lived process, and the runtime zeroes reused memory, so every
	// page of it was touched.
	out.Reset()
	out.Grow(int(info.Size()) / 4)
	enc.Reset(out)
	h := sha256.New()
	// One byte more than the size: a file that grew since it was measured
	// fails rather than being cut short.
	n, err := enc.ReadFrom(io.TeeReader(io.LimitReader(f, info.Size()+1), h))
	if err == nil {
		err = enc.Close()
	}
	switch {
	case err != nil:
		return nil, Sum{}, fmt.Errorf("while compressing: %w", err)
	case n > info.Size():
		return nil, Sum{}, fmt.Errorf("the file grew past its size of %d bytes while it was read", info.Size())
	}
	return out.Bytes(), Sum{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}, nil
}

// sumOf reads r to the end for its checksum and size.
func sumOf(r io.Reader) (Sum, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return Sum{}, err
	}
	return Sum{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}, nil
}

// encoderOptions are the zstd settings of every archived file. The fastest
// level is klauspost/compress's best speed for its ratio: the default
// level takes twice the CPU for a ratio better by a few points, and
// archiving competes for the CPU with PostgreSQL writing the WAL. One
// goroutine per encoder (the caller's): the work is already one file per
// goroutine, and the concurrent encoder's extra goroutines and buffers
// cost more than they win on a 16 MiB file. A 1 MiB window instead of the
// level's 4 MiB: WAL compressed 0.8% larger with it, and the process
// touches 6 MiB less memory, which in a process that lives for one
// segment is page faults the kernel does not have to serve
// (docs/benchmarks.md has the figures). Restore reads any window up to
// maxDecodedWindow.
var encoderOptions = []zstd.EOption{
	zstd.WithEncoderLevel(zstd.SpeedFastest),
	zstd.WithEncoderConcurrency(1),
	zstd.WithWindowSize(1 << 20),
}

// encoders keeps zstd encoders for reuse (Reset to each new output), so
// that ArchiveAhead's goroutines, and a long-lived caller's successive
// calls, allocate their tables once. It is filled on first use: commands
// that never archive pay nothing.
var encoders = sync.Pool{New: func() any {
	enc, err := zstd.NewWriter(nil, encoderOptions...)
	if err != nil {
		panic(fmt.Sprintf("zstd: %v", err)) // only invalid options fail
	}
	return enc
}}

// upload streams r through zstd into the store; it checks that what it
// compressed is what sum describes, so a file changed since it was summed
// is never archived under the wrong checksum.
func (a Archiver) upload(ctx context.Context, key string, r io.Reader, sum Sum) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(compress(pw, r, sum)) }()
	err := a.Store.Put(ctx, key, pr, sum.metadata())
	_ = pr.CloseWithError(err) // stops compress if Put gave up early
	return err
}

func compress(w io.Writer, r io.Reader, want Sum) error {
	enc, err := zstd.NewWriter(w, encoderOptions...)
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(enc, io.TeeReader(r, h))
	if err != nil {
		enc.Reset(nil)
		return fmt.Errorf("while compressing: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("while compressing: %w", err)
	}
	if got := (Sum{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}); got != want {
		return fmt.Errorf("the WAL file changed while it was archived (sha256 %s, %d bytes, then %s, %d bytes)",
			want.SHA256, want.Size, got.SHA256, got.Size)
	}
	return nil
}
