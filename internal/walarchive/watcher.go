package walarchive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"tusk.dev/tusk/internal/postgres"
)

// Defaults of a Watcher.
const (
	DefaultWatchInterval = 100 * time.Millisecond
	DefaultRetryAfter    = 5 * time.Second
	// DefaultWaitForWatcher is how long the waiting archive_command (see
	// WaitingArchiveCommand) waits for the watcher's record before it
	// archives the file itself.
	DefaultWaitForWatcher = 10 * time.Second
	// batchTimeout bounds one batch, as wal-archive's default --timeout
	// bounds one run: a store that stops answering must not stop the
	// Watcher for good.
	batchTimeout = 5 * time.Minute
)

// Watcher archives WAL segments from a long-lived process (the instance
// manager) as soon as PostgreSQL marks them ready, and records each one
// stored and verified in the spool. PostgreSQL's archive_command (see
// WaitingArchiveCommand) then only waits for the record, which costs a
// shell, not a start of the tusk binary: the start alone was half the CPU
// of archiving a segment, and archiving shares the cores with PostgreSQL.
//
// A record is trusted without checking the file's checksum again, which is
// sound because:
//   - PostgreSQL never changes a segment while it waits in archive_status
//     as ".ready", and a Watcher archives and records only such segments;
//   - a segment's content can change under the same name only while
//     postgres is stopped (pg_rewind, a restore), and Reset, called before
//     every start of postgres, removes every record and makes archiving
//     that began before it record nothing;
//   - the store never overwrites an object with different content
//     (Archive refuses), so a record always matches the store.
type Watcher struct {
	// WALDir is pg_wal.
	WALDir string
	// NewArchiver gives the Archiver to use. It is called for every batch,
	// so that the credentials are the current ones, as they are for every
	// run of the archive command: ArchiverSource makes one again only when
	// its files changed.
	NewArchiver func() (Archiver, error)
	// Parallel is how many segments are archived at once
	// (DefaultParallel when zero).
	Parallel int
	// Interval is how often archive_status is read (DefaultWatchInterval
	// when zero); RetryAfter how long to wait after a failure
	// (DefaultRetryAfter when zero).
	Interval, RetryAfter time.Duration
	// Report, when set, is told what each batch did; ReportCatchUp what
	// each catch-up did.
	Report        func([]AheadResult)
	ReportCatchUp func(timeline uint32, res CatchUpResult, err error)

	mu         sync.Mutex
	generation uint64
	catchUp    chan catchUpRequest // see CatchUpBefore
	initOnce   sync.Once
}

func (w *Watcher) init() {
	w.initOnce.Do(func() { w.catchUp = make(chan catchUpRequest, 1) })
}

// catchUpRequest asks for a CatchUp before timeline; attempt counts the
// failed ones before.
type catchUpRequest struct {
	timeline uint32
	attempt  int
}

// catchUpAttempts bounds the retries of a failing catch-up.
const catchUpAttempts = 5

// CatchUpBefore asks Run to archive what pg_wal holds of the timelines
// before timeline and the archive lacks (see CatchUp). Call it once
// postgres runs on timeline as a primary after a promotion. It does not
// wait; a request not yet served is replaced.
func (w *Watcher) CatchUpBefore(timeline uint32) {
	w.requestCatchUp(catchUpRequest{timeline: timeline})
}

func (w *Watcher) requestCatchUp(req catchUpRequest) {
	w.init()
	for {
		select {
		case w.catchUp <- req:
			return
		default:
		}
		select {
		case <-w.catchUp: // the older request; this one covers it
		default:
		}
	}
}

// Reset removes every record and failure marker, and makes what is being
// archived now record nothing. Call it before postgres starts.
func (w *Watcher) Reset() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.generation++
	return errors.Join(
		os.RemoveAll(filepath.Join(w.WALDir, SpoolDirName, archivedDir)),
		os.RemoveAll(filepath.Join(w.WALDir, SpoolDirName, failedDir)))
}

// Run archives ready segments until ctx is done.
func (w *Watcher) Run(ctx context.Context) {
	w.init()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-w.catchUp:
			w.runCatchUp(ctx, req)
			continue
		case <-timer.C:
		}
		wait := cmp.Or(w.Interval, DefaultWatchInterval)
		if names := w.pending(); len(names) > 0 {
			results := w.archiveBatch(ctx, names)
			if w.Report != nil {
				w.Report(results)
			}
			wait = 0 // more may be waiting
			if slices.ContainsFunc(results, func(r AheadResult) bool { return r.Err != nil }) {
				wait = cmp.Or(w.RetryAfter, DefaultRetryAfter)
			}
		}
		timer.Reset(wait)
	}
}

// runCatchUp runs CatchUp. What it could not archive, PostgreSQL will not
// ask for (those segments are not .ready): a failure is retried a few
// times, later each time, then left to the report.
func (w *Watcher) runCatchUp(ctx context.Context, req catchUpRequest) {
	ctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	a, err := w.NewArchiver()
	var res CatchUpResult
	if err == nil {
		res, err = CatchUp(ctx, a, w.WALDir, req.timeline)
	}
	if w.ReportCatchUp != nil {
		w.ReportCatchUp(req.timeline, res, err)
	}
	if err != nil && ctx.Err() == nil && req.attempt+1 < catchUpAttempts {
		next := catchUpRequest{timeline: req.timeline, attempt: req.attempt + 1}
		time.AfterFunc(time.Duration(next.attempt)*cmp.Or(w.RetryAfter, DefaultRetryAfter), func() { w.requestCatchUp(next) })
	}
}

// pending prunes records and failure markers of files no longer waiting,
// and returns the oldest ready segments not recorded yet, at most Parallel
// of them: PostgreSQL archives in name order, so those are what it asks
// for next.
func (w *Watcher) pending() []string {
	if _, err := os.Stat(filepath.Join(w.WALDir, "archive_status")); err != nil {
		return nil // no data directory yet
	}
	w.markWatched()
	status, err := readDirNames(filepath.Join(w.WALDir, "archive_status"))
	if err != nil {
		return nil
	}
	ready := make(map[string]bool, len(status))
	var names []string
	for _, f := range status {
		name, ok := strings.CutSuffix(f, readySuffix)
		if ok && postgres.ClassifyWALFileName(name) == postgres.WALFileSegment {
			ready[name] = true
			names = append(names, name)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	recorded := w.pruneLocked(archivedDir, ready)
	w.pruneLocked(failedDir, ready)
	names = slices.DeleteFunc(names, func(n string) bool { return recorded[n] })
	slices.Sort(names)
	return names[:min(len(names), cmp.Or(w.Parallel, DefaultParallel))]
}

// markWatched makes the spool say that a Watcher runs, which is what makes
// the archive command wait for it: a postgres on another data directory
// (a bootstrap's, before it moves into place) finds no such mark and
// archives by itself at once. Clearing the spool removes the mark; the
// next look at archive_status puts it back.
func (w *Watcher) markWatched() {
	path := filepath.Join(w.WALDir, SpoolDirName, watchedMark)
	if _, err := os.Stat(path); err == nil {
		return
	}
	if err := os.Mkdir(filepath.Dir(path), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return
	}
	_ = os.WriteFile(path, nil, 0o600)
}

// pruneLocked removes the entries of the spool's subdirectory sub that are
// not ready any more, and returns those that are.
func (w *Watcher) pruneLocked(sub string, ready map[string]bool) map[string]bool {
	dir := filepath.Join(w.WALDir, SpoolDirName, sub)
	names, _ := readDirNames(dir)
	kept := make(map[string]bool, len(names))
	for _, n := range names {
		if ready[n] {
			kept[n] = true
		} else {
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
	return kept
}

// archiveBatch archives names at once and records each one stored and
// verified, unless Reset was called meanwhile.
func (w *Watcher) archiveBatch(ctx context.Context, names []string) []AheadResult {
	results := make([]AheadResult, len(names))
	w.mu.Lock()
	generation := w.generation
	w.mu.Unlock()
	a, err := w.NewArchiver()
	if err != nil {
		err = fmt.Errorf("while setting up WAL archiving: %w", err)
		for i, n := range names {
			results[i] = AheadResult{Name: n, Err: err}
		}
		w.markFailed(generation, names)
		return results
	}
	ctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			results[i] = w.archiveOne(ctx, a, generation, name)
		})
	}
	wg.Wait()
	return results
}

// archiveOne archives the segment name; a failure for a file PostgreSQL
// has archived meanwhile (it no longer waits) is none.
func (w *Watcher) archiveOne(ctx context.Context, a Archiver, generation uint64, name string) AheadResult {
	res, rec, err := a.archiveVerified(ctx, w.WALDir, name)
	w.mu.Lock()
	defer w.mu.Unlock()
	if generation != w.generation || !w.stillReady(name) {
		return AheadResult{Name: name, Result: res, Superseded: true}
	}
	if err == nil {
		err = a.writeRecord(w.WALDir, name, rec)
	}
	if err != nil {
		_ = w.writeMarker(failedDir, name)
	}
	return AheadResult{Name: name, Result: res, Err: err}
}

// markFailed tells waiting archive commands not to wait for names.
func (w *Watcher) markFailed(generation uint64, names []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if generation != w.generation {
		return
	}
	for _, n := range names {
		_ = w.writeMarker(failedDir, n)
	}
}

func (w *Watcher) writeMarker(sub, name string) error {
	dir := filepath.Join(w.WALDir, SpoolDirName, sub)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), nil, 0o600)
}

func (w *Watcher) stillReady(name string) bool {
	_, err := os.Stat(filepath.Join(w.WALDir, "archive_status", name+readySuffix))
	return err == nil
}

// WaitingArchiveCommand is the archive_command to use beside a Watcher:
// for a plain segment, when a Watcher runs on the data directory, it waits
// up to wait for the Watcher's record and succeeds when it appears; it runs
// archiveCommand itself (which must end in %p) when no Watcher runs, when
// the Watcher marks the segment failed, or when the wait ends.
// History, backup history and partial files (names with a dot) go to
// archiveCommand at once: a Watcher archives only segments.
//
// PostgreSQL runs the command with /bin/sh in the data directory, where
// %p is pg_wal/%f.
func WaitingArchiveCommand(archiveCommand string, wait time.Duration) string {
	const step = 50 * time.Millisecond
	tries := max(1, int(wait/step))
	spool := "pg_wal/" + SpoolDirName + "/"
	return fmt.Sprintf(`case %%f in *.*) ;; *) if [ -f %s%s ]; then i=0; while [ $i -lt %d ]; do `+
		`[ -f %s%s/%%f ] && exit 0; [ -f %s%s/%%f ] && break; sleep %.2f; i=$((i+1)); done; fi;; esac; exec %s`,
		spool, watchedMark, tries, spool, archivedDir, spool, failedDir, step.Seconds(), archiveCommand)
}
