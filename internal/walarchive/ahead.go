package walarchive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// AheadResult says what ArchiveAhead did with one segment it archived
// before PostgreSQL asked for it.
type AheadResult struct {
	Name string
	Result
	// Err is why it was not archived and recorded; PostgreSQL asks for it
	// later, and that call tries again.
	Err error
	// Superseded (Watcher only): the outcome no longer counts, archived or
	// not, because PostgreSQL archived the file meanwhile or postgres was
	// restarted (Reset); nothing was recorded.
	Superseded bool
}

// archivedRecord is the spool's record of a segment archived ahead: the
// object it went to and the checksum stored there.
type archivedRecord struct {
	Object string `json:"object"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// ArchiveAhead archives the WAL file at walPath (archive_command's %p) as
// Archive does, and with it up to parallel-1 of the next segments waiting
// in pg_wal/archive_status, all at once. It returns once all are done:
// each of those stored and verified in the store is recorded in the spool,
// so that PostgreSQL's later call for it returns without uploading again.
//
// A call for a recorded file succeeds at once only when the record is for
// the same object location and the file still has the recorded checksum;
// otherwise it archives as Archive does, which refuses different content
// under a name already archived. Only the requested file's error is
// returned; the others are in the AheadResults.
func (a Archiver) ArchiveAhead(ctx context.Context, walPath string, parallel int) (Result, []AheadResult, error) {
	walDir, name := filepath.Split(walPath)
	walDir = filepath.Clean(walDir)
	key, err := Key(name)
	if err != nil {
		return Result{}, nil, err
	}
	if res, ok := a.takeRecord(walDir, name, key, walPath); ok {
		return res, nil, nil
	}
	status, _ := readDirNames(filepath.Join(walDir, "archive_status"))
	a.pruneRecords(walDir, status)
	ahead := AheadSegments(name, status, parallel)
	results := make([]AheadResult, len(ahead))
	var wg sync.WaitGroup
	for i, next := range ahead {
		results[i].Name = next
		if _, err := os.Stat(a.recordPath(walDir, next)); err == nil {
			results[i].AlreadyArchived = true // archived ahead by an earlier run
			continue
		}
		wg.Go(func() { results[i].Result, results[i].Err = a.archiveAndRecord(ctx, walDir, next) })
	}
	res, err := a.Archive(ctx, walPath)
	wg.Wait()
	return res, results, err
}

// archiveAndRecord archives the segment name in walDir, checks what the
// store holds for it, and records it in the spool.
func (a Archiver) archiveAndRecord(ctx context.Context, walDir, name string) (Result, error) {
	res, rec, err := a.archiveVerified(ctx, walDir, name)
	if err != nil {
		return res, err
	}
	return res, a.writeRecord(walDir, name, rec)
}

// archiveVerified archives the segment name in walDir and checks that the
// store holds what was summed: the record to write for it.
func (a Archiver) archiveVerified(ctx context.Context, walDir, name string) (Result, archivedRecord, error) {
	res, err := a.Archive(ctx, filepath.Join(walDir, name))
	if err != nil {
		return res, archivedRecord{}, err
	}
	info, err := a.Store.Stat(ctx, res.Key)
	if err != nil {
		return res, archivedRecord{}, fmt.Errorf("while checking the archived %s: %w", name, err)
	}
	if same, err := alreadyArchived(res.Sum, info.Metadata); err != nil || !same {
		return res, archivedRecord{}, fmt.Errorf("the archive does not hold what was uploaded for %s: %w", name, err)
	}
	return res, archivedRecord{Object: a.Store.Location() + res.Key, SHA256: res.Sum.SHA256, Size: res.Sum.Size}, nil
}

// takeRecord answers a call from the spool: true when name was archived
// ahead to this location with the content walPath has now. The record is
// used once and removed either way.
func (a Archiver) takeRecord(walDir, name, key, walPath string) (Result, bool) {
	path := a.recordPath(walDir, name)
	data, err := os.ReadFile(path) //nolint:gosec // our spool in pg_wal
	if err != nil {
		return Result{}, false
	}
	_ = os.Remove(path)
	var rec archivedRecord
	if json.Unmarshal(data, &rec) != nil || rec.Object != a.Store.Location()+key {
		return Result{}, false
	}
	f, err := os.Open(walPath) //nolint:gosec // the file PostgreSQL asks us to archive
	if err != nil {
		return Result{}, false
	}
	defer func() { _ = f.Close() }()
	sum, err := sumOf(f)
	if err != nil || sum != (Sum{SHA256: rec.SHA256, Size: rec.Size}) {
		return Result{}, false
	}
	return Result{Key: key, Sum: sum, AlreadyArchived: true, Recorded: true}, true
}

func (a Archiver) recordPath(walDir, name string) string {
	return filepath.Join(walDir, SpoolDirName, archivedDir, name)
}

// writeRecord writes the record atomically: a temporary file, synced, then
// renamed. A crash leaves no record, or a whole one.
func (a Archiver) writeRecord(walDir, name string, rec archivedRecord) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	dir := filepath.Join(walDir, SpoolDirName, archivedDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("while creating the WAL spool: %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, name), data)
}

// pruneRecords removes records of files no longer waiting to be archived:
// PostgreSQL is done with them (or removed them), so no call will use them.
func (a Archiver) pruneRecords(walDir string, statusFiles []string) {
	dir := filepath.Join(walDir, SpoolDirName, archivedDir)
	names, _ := readDirNames(dir)
	ready := make(map[string]bool, len(statusFiles))
	for _, f := range statusFiles {
		if n, ok := strings.CutSuffix(f, readySuffix); ok {
			ready[n] = true
		}
	}
	for _, n := range names {
		if !ready[n] {
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
}

// readDirNames lists a directory's names; a missing directory has none.
func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir) //nolint:gosec // pg_wal or our spool
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return f.Readdirnames(-1)
}

// writeFileAtomic writes data to a temporary file beside path, syncs it and
// renames it to path.
func writeFileAtomic(path string, data []byte) error {
	return writeAtomically(path, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// writeAtomically has fill write a temporary file beside path, then syncs
// it and renames it to path: a reader sees the whole file or none. The
// temporary file is removed when anything fails.
func writeAtomically(path string, fill func(*os.File) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tusk-*")
	if err != nil {
		return err
	}
	defer func() {
		_ = tmp.Close()
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := fill(tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
