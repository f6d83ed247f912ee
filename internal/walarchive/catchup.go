package walarchive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/postgres"
)

// CatchUpResult says what CatchUp did.
type CatchUpResult struct {
	// Archived are the segments the archive lacked and now holds; Present
	// counts those it held already.
	Archived []string
	Present  int
	// Skipped are segments left alone: PostgreSQL recycled them while they
	// were read, or they are larger than an in-memory archive takes.
	Skipped []string
}

// CatchUp archives the plain segments in pg_wal of timeline's ancestors,
// up to where each ended (timeline's history file says), that the archive
// lacks. A standby marks the segments it
// streamed as archived, so after its promotion the WAL the old primary had
// not archived yet (its archiver was behind, or it failed) would be
// missing from the archive, and no recovery could replay through that
// hole. What this instance still has of it is archived here.
//
// A segment may be recycled (renamed to a future name and overwritten)
// while it is read: it is archived only when the name still refers to the
// file that was read, once read whole, so what is stored is the segment's
// content from before any recycling. Different content already archived
// under a name is the old primary's own copy (a switched segment's unused
// end can differ between primary and standby) and is left as it is.
func CatchUp(ctx context.Context, a Archiver, walDir string, timeline uint32) (CatchUpResult, error) {
	var res CatchUpResult
	names, err := ancestorSegments(walDir, timeline)
	if err != nil {
		return res, err
	}
	var errs []error
	for _, name := range names {
		archived, err := a.archiveIfMissing(ctx, filepath.Join(walDir, name))
		switch {
		case errors.Is(err, errRecycled) || errors.Is(err, errTooLarge):
			res.Skipped = append(res.Skipped, name)
		case err != nil:
			errs = append(errs, err)
		case archived:
			res.Archived = append(res.Archived, name)
		default:
			res.Present++
		}
	}
	return res, errors.Join(errs...)
}

// ancestorSegments lists, in name order, the plain segments in walDir that
// belong to timeline's history as its history file tells it: segments of
// an ancestor timeline that end at or before the LSN where that timeline
// ended. Anything else of an older timeline (a segment recycled under a
// future name, a branch that is no ancestor) is not this timeline's WAL.
func ancestorSegments(walDir string, timeline uint32) ([]string, error) {
	historyPath := filepath.Join(walDir, postgres.TimelineHistoryFileName(timeline))
	data, err := os.ReadFile(historyPath) //nolint:gosec // the history file in pg_wal
	if err != nil {
		return nil, fmt.Errorf("while reading timeline %d's history: %w", timeline, err)
	}
	ends, err := postgres.ParseTimelineHistory(string(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", historyPath, err)
	}
	names, err := readDirNames(walDir)
	if err != nil {
		return nil, fmt.Errorf("while listing %s: %w", walDir, err)
	}
	names = slices.DeleteFunc(names, func(n string) bool {
		return !segmentEndsBy(walDir, n, ends)
	})
	slices.Sort(names)
	return names, nil
}

// segmentEndsBy tells whether name is a plain segment of one of the
// timelines in ends that ends at or before that timeline's end. The
// segment size is the file's.
func segmentEndsBy(walDir, name string, ends map[uint32]postgres.LSN) bool {
	if postgres.ClassifyWALFileName(name) != postgres.WALFileSegment {
		return false
	}
	tli, err := strconv.ParseUint(name[:8], 16, 32)
	if err != nil {
		return false
	}
	end, ok := ends[uint32(tli)]
	if !ok {
		return false
	}
	info, err := os.Stat(filepath.Join(walDir, name))
	if err != nil || !info.Mode().IsRegular() || info.Size() <= 0 {
		return false
	}
	size := uint64(info.Size()) //nolint:gosec // positive, checked above
	seg, err := postgres.ParseWALFileName(name, size)
	return err == nil && uint64(seg.StartLSN())+size <= uint64(end)
}

var (
	errRecycled = errors.New("the file was recycled while it was read")
	errTooLarge = errors.New("the file is larger than an in-memory archive takes")
)

// archiveIfMissing archives the segment at path when the store has no
// object for it, reading it whole into memory and checking that path still
// names the file read.
func (a Archiver) archiveIfMissing(ctx context.Context, path string) (bool, error) {
	key, err := Key(filepath.Base(path))
	if err != nil {
		return false, err
	}
	if err := a.Claim(ctx); err != nil {
		return false, err
	}
	if _, err := a.Store.Stat(ctx, key); err == nil {
		return false, nil
	} else if !objectstore.IsNotFound(err) {
		return false, err
	}
	f, err := os.Open(path) //nolint:gosec // a segment in pg_wal
	if errors.Is(err, os.ErrNotExist) {
		return false, errRecycled
	}
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }()
	limit := cmp.Or(a.MaxInMemory, DefaultMaxInMemory)
	buf := getOutBuffer()
	defer putOutBuffer(buf) // after the upload, which reads compressed
	compressed, sum, err := readWAL(f, limit, buf)
	switch {
	case err != nil:
		return false, fmt.Errorf("while reading %s: %w", path, err)
	case compressed == nil:
		return false, errTooLarge
	}
	read, err1 := f.Stat()
	now, err2 := os.Stat(path)
	if err1 != nil || err2 != nil || !os.SameFile(read, now) {
		return false, errRecycled
	}
	if err := a.Store.PutSized(ctx, key, compressed, sum.metadata()); err != nil {
		return false, err
	}
	return true, nil
}
