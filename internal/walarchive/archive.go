package walarchive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"

	"tusk.dev/tusk/internal/objectstore"
)

// Archiver archives and restores one cluster's WAL files; its Store's
// path is the cluster's location.
type Archiver struct {
	Store *objectstore.Store
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
	f, err := os.Open(walPath) //nolint:gosec // the file PostgreSQL asks us to archive
	if err != nil {
		return Result{}, fmt.Errorf("while opening the WAL file to archive: %w", err)
	}
	defer func() { _ = f.Close() }()
	sum, err := sumOf(f)
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
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return res, err
	}
	return res, a.upload(ctx, key, f, sum)
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
	enc, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest))
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
