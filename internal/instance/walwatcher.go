package instance

import (
	"context"
	"path/filepath"
	"sync/atomic"

	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/walarchive"
)

// walWatcher archives ready WAL segments from the manager's process, so
// that PostgreSQL's archive_command only waits for its record (see
// walarchive.Watcher). Its counters feed the metrics.
type walWatcher struct {
	*walarchive.Watcher
	archived, failed atomic.Int64
	lastErr          atomic.Pointer[string] // the kind of the last failure logged
}

// newWALWatcher returns nil when the manager does not archive.
func (m *Manager) newWALWatcher() *walWatcher {
	wa := m.opts.WALArchive
	if wa == nil {
		return nil
	}
	w := &walWatcher{}
	w.Watcher = &walarchive.Watcher{
		WALDir:      filepath.Join(m.opts.DataDir, "pg_wal"),
		NewArchiver: walarchive.ArchiverSource(m.walArchiveConfigPath()),
		Report:      func(results []walarchive.AheadResult) { m.reportArchivedAhead(w, results) },
		ReportCatchUp: func(timeline uint32, res walarchive.CatchUpResult, err error) {
			m.reportCatchUp(w, timeline, res, err)
		},
	}
	return w
}

// reportCatchUp logs what the archive lacked of the timelines before a
// promotion and now holds, and what failed: a segment missing there is a
// hole no recovery can replay through.
func (m *Manager) reportCatchUp(w *walWatcher, timeline uint32, res walarchive.CatchUpResult, err error) {
	w.archived.Add(int64(len(res.Archived)))
	if err != nil {
		w.failed.Add(1)
		m.log.Error(err, "Archiving the WAL of the timelines before the promotion that the archive lacked",
			"timeline", timeline, "archived", res.Archived, "alreadyArchived", res.Present)
		return
	}
	m.log.Info("Archived the WAL of the timelines before the promotion that the archive lacked",
		"timeline", timeline, "archived", res.Archived, "alreadyArchived", res.Present, "recycledMeanwhile", res.Skipped)
}

// reportArchivedAhead counts what a batch did and logs a failure when it
// is of another kind than the last one logged: a store that stays
// unreachable is retried every few seconds, and PostgreSQL's own attempts
// report it too.
func (m *Manager) reportArchivedAhead(w *walWatcher, results []walarchive.AheadResult) {
	for _, r := range results {
		if r.Superseded {
			continue
		}
		if r.Err == nil {
			w.archived.Add(1)
			if w.lastErr.Swap(nil) != nil {
				m.log.Info("Archiving WAL ahead works again", "segment", r.Name)
			}
			continue
		}
		w.failed.Add(1)
		kind := failureKind(r.Err)
		if last := w.lastErr.Swap(&kind); last == nil || *last != kind {
			m.log.Error(r.Err, "Archiving a WAL segment ahead failed; PostgreSQL's archive_command tries itself", "segment", r.Name)
		}
	}
}

// lastFailure is the kind of the last failure archiving ahead, "" when
// the last attempt worked (or there is no watcher).
func (w *walWatcher) lastFailure() string {
	if w == nil {
		return ""
	}
	if kind := w.lastErr.Load(); kind != nil {
		return *kind
	}
	return ""
}

// catchUpArchive has the Watcher archive what this new primary holds of
// the timelines before timeline and the archive lacks: a standby marks
// what it streamed as archived, though the old primary may not have
// archived it yet.
func (m *Manager) catchUpArchive(timeline uint32) {
	if m.walWatcher != nil && timeline > 1 {
		m.walWatcher.CatchUpBefore(timeline)
	}
}

// failureKind is what tells failures apart for logging: the store's kind
// of error (each segment's message names its own object), or the message
// for anything else.
func failureKind(err error) string {
	if kind := objectstore.Classify(err); kind != objectstore.KindOther {
		return kind.String()
	}
	return err.Error()
}

// runWALWatcher archives WAL ahead until ctx is done.
func (m *Manager) runWALWatcher(ctx context.Context) {
	if m.walWatcher != nil {
		m.walWatcher.Run(ctx)
	}
}

// resetWALWatcher forgets every segment archived ahead before postgres
// starts: only while postgres runs is a ready segment's content sure not
// to change (see walarchive.Watcher).
func (m *Manager) resetWALWatcher() {
	if m.walWatcher == nil {
		return
	}
	if err := m.walWatcher.Reset(); err != nil {
		m.log.Error(err, "Clearing the records of WAL archived ahead")
	}
}
