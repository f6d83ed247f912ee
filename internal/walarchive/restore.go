package walarchive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/zstd"

	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/postgres"
)

// ErrNotArchived is wrapped by Restore's error when the archive has no file
// of that name: the normal end of the archive for PostgreSQL (it asks for
// the next segment and for timeline history files that may not exist).
var ErrNotArchived = errors.New("not in the archive")

// ErrChecksumMismatch is wrapped by Restore's error when the restored
// content does not match the checksum stored with it: the archive is
// corrupt, and recovery must stop rather than replay it.
var ErrChecksumMismatch = errors.New("checksum mismatch")

// maxDecodedWindow bounds the memory a corrupt or hostile object can make
// the decoder take; Archive's frames use far less.
const maxDecodedWindow = 64 << 20

// Restore fetches the WAL file walName (restore_command's %f) into
// destPath (%p). destPath appears only once complete and verified.
func (a Archiver) Restore(ctx context.Context, walName, destPath string) error {
	key, err := Key(walName)
	if err != nil {
		// Archive never stores such a name, so it cannot be there.
		return fmt.Errorf("%w: %w", ErrNotArchived, err)
	}
	body, want, err := a.get(ctx, walName, key)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	return a.write(body, walName, key, destPath, want)
}

// get starts the download of key, the object of walName, and reads the
// checksum stored with it.
func (a Archiver) get(ctx context.Context, walName, key string) (io.ReadCloser, Sum, error) {
	body, info, err := a.Store.Get(ctx, key)
	if objectstore.IsNotFound(err) {
		return nil, Sum{}, fmt.Errorf("%s %w at %s%s", walName, ErrNotArchived, a.Store.Location(), key)
	}
	if err != nil {
		return nil, Sum{}, err
	}
	want, err := sumFromMetadata(info.Metadata)
	if err != nil {
		_ = body.Close()
		return nil, Sum{}, fmt.Errorf("while restoring %s from %s%s: %w", walName, a.Store.Location(), key, err)
	}
	return body, want, nil
}

// write writes the download body of walName to destPath, verified.
func (a Archiver) write(body io.Reader, walName, key, destPath string, want Sum) error {
	if err := writeVerified(body, destPath, want); err != nil {
		return fmt.Errorf("while restoring %s from %s%s: %w", walName, a.Store.Location(), key, err)
	}
	return nil
}

// writeVerified decompresses r into a temporary file beside dest, checks
// it against want, syncs it and renames it to dest.
func writeVerified(r io.Reader, dest string, want Sum) error {
	return writeAtomically(dest, func(f *os.File) error {
		got, err := decompress(f, r, want.Size)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%w: the archive's metadata says sha256 %s (%d bytes), the content is sha256 %s (%d bytes)",
				ErrChecksumMismatch, want.SHA256, want.Size, got.SHA256, got.Size)
		}
		return nil
	})
}

// decompress writes the zstd stream r to w and sums what it wrote; it
// stops past limit bytes (plus one, so an oversized file shows as such).
func decompress(w io.Writer, r io.Reader, limit int64) (Sum, error) {
	src := &errReader{r: r}
	dec, err := zstd.NewReader(src, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxDecodedWindow))
	if err != nil {
		return Sum{}, err
	}
	defer dec.Close()
	h := sha256.New()
	bound := min(limit, int64(postgres.MaxWALSegmentSize)) + 1
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(dec, bound))
	switch {
	case src.err != nil:
		return Sum{}, fmt.Errorf("while downloading: %w", src.err)
	case err != nil:
		return Sum{}, fmt.Errorf("%w: the archived object does not decompress: %w", ErrChecksumMismatch, err)
	}
	return Sum{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}, nil
}

// errReader remembers the error its reader returned other than io.EOF, to
// tell a download that failed from content that does not decompress.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		e.err = err
	}
	return n, err
}
