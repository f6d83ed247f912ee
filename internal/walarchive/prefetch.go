package walarchive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"tusk.dev/tusk/internal/postgres"
)

// PrefetchResult says what RestorePrefetch did with one segment it
// fetched ahead.
type PrefetchResult struct {
	Name string
	// Fetched is true when the segment is in the spool, verified.
	Fetched bool
	// Err is why it is not, other than its absence from the archive (the
	// normal end of it); the later call for it downloads it again.
	Err error
}

// RestoreResult says how RestorePrefetch served the request.
type RestoreResult struct {
	// FromSpool is true when an earlier run had fetched the file ahead.
	FromSpool bool
	// Prefetched are the segments this run fetched ahead.
	Prefetched []PrefetchResult
}

// RestorePrefetch restores walName into destPath as Restore does. For a
// segment not fetched ahead by an earlier run, it also fetches the next
// parallel-1 segments of the same timeline, at once with it, into the
// spool beside destPath (pg_wal/tusk-spool/prefetch), each verified and
// stored under its name and checksum. A later call for one of them checks
// that the archive still stores that checksum for it and that the file
// still has it, then renames it to destPath instead of downloading.
//
// History, backup history and partial files are never prefetched. Only
// the requested file's error is returned.
func (a Archiver) RestorePrefetch(ctx context.Context, walName, destPath string, parallel int) (RestoreResult, error) {
	if parallel <= 1 || postgres.ClassifyWALFileName(walName) != postgres.WALFileSegment {
		return RestoreResult{}, a.Restore(ctx, walName, destPath)
	}
	spool := filepath.Join(filepath.Dir(destPath), SpoolDirName, prefetchDir)
	if a.takePrefetched(ctx, spool, walName, destPath) {
		return RestoreResult{FromSpool: true}, nil
	}
	// What is there was fetched for another position in the history.
	_ = os.RemoveAll(spool)
	key, err := Key(walName)
	if err != nil {
		return RestoreResult{}, err
	}
	body, want, err := a.get(ctx, walName, key)
	if err != nil {
		return RestoreResult{}, err
	}
	defer func() { _ = body.Close() }()
	names := PrefetchSegments(walName, uint64(want.Size), parallel) //nolint:gosec // a size checked by sumFromMetadata
	res := RestoreResult{Prefetched: make([]PrefetchResult, len(names))}
	if len(names) > 0 {
		if err := os.MkdirAll(spool, 0o700); err != nil {
			res.Prefetched = []PrefetchResult{{Name: names[0], Err: fmt.Errorf("while creating the WAL spool: %w", err)}}
			names = nil
		}
	}
	var wg sync.WaitGroup
	for i, next := range names {
		wg.Go(func() { res.Prefetched[i] = a.prefetch(ctx, spool, next) })
	}
	err = a.write(body, walName, key, destPath, want)
	wg.Wait()
	return res, err
}

// prefetch fetches the segment name into the spool as <name>.<sha256>.
func (a Archiver) prefetch(ctx context.Context, spool, name string) PrefetchResult {
	key, err := Key(name)
	if err != nil {
		return PrefetchResult{Name: name, Err: err}
	}
	body, want, err := a.get(ctx, name, key)
	switch {
	case errors.Is(err, ErrNotArchived):
		return PrefetchResult{Name: name}
	case err != nil:
		return PrefetchResult{Name: name, Err: err}
	}
	defer func() { _ = body.Close() }()
	if err := a.write(body, name, key, filepath.Join(spool, name+"."+want.SHA256), want); err != nil {
		return PrefetchResult{Name: name, Err: err}
	}
	return PrefetchResult{Name: name, Fetched: true}
}

// takePrefetched moves walName from the spool to destPath when it is there
// and still what the archive stores: the same checksum in the object's
// metadata and in the file. A file that is not is removed.
func (a Archiver) takePrefetched(ctx context.Context, spool, walName, destPath string) bool {
	names, _ := readDirNames(spool)
	for _, n := range names {
		sha, ok := strings.CutPrefix(n, walName+".")
		if !ok || strings.HasPrefix(n, ".") {
			continue
		}
		path := filepath.Join(spool, n)
		if a.stillArchived(ctx, walName, sha, path) && os.Rename(path, destPath) == nil {
			return true
		}
		_ = os.Remove(path)
	}
	return false
}

// stillArchived says whether the archive stores walName with checksum sha
// and the file at path has that content.
func (a Archiver) stillArchived(ctx context.Context, walName, sha, path string) bool {
	key, err := Key(walName)
	if err != nil {
		return false
	}
	info, err := a.Store.Stat(ctx, key)
	if err != nil {
		return false
	}
	stored, err := sumFromMetadata(info.Metadata)
	if err != nil || stored.SHA256 != sha {
		return false
	}
	f, err := os.Open(path) //nolint:gosec // our spool in pg_wal
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	local, err := sumOf(f)
	return err == nil && local == stored
}
