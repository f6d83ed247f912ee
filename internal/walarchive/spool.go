package walarchive

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"tusk.dev/tusk/internal/postgres"
)

// SpoolDirName is the directory, inside pg_wal, where the WAL commands keep
// what one run does for the next: records of segments archived ahead of
// PostgreSQL's request, and segments restored ahead of it.
//
// It sits in pg_wal, not in the data directory's parent, because:
//   - archive_command's %p and restore_command's %p are in pg_wal, so the
//     commands find it without being told where the data directory is, and
//     a prefetched segment reaches %p with a rename on the same filesystem
//     (also when pg_wal is a symbolic link to another volume);
//   - PostgreSQL itself touches only files with WAL names in pg_wal, and
//     base backups (pg_basebackup, hence `tusk instance backup` and clones)
//     never copy pg_wal's content, so the spool never leaks into a backup;
//   - the postgres OS user that runs the commands owns pg_wal.
//
// Nothing in it is trusted blindly: a record is used only for the same
// object location and the same checksum as the file PostgreSQL hands over,
// and a prefetched segment only when the archive still stores the same
// checksum and the file still has it. Removing the directory at any time
// is safe: it only costs a transfer again.
const SpoolDirName = "tusk-spool"

// Subdirectories of the spool.
const (
	archivedDir = "archived" // records of segments archived ahead
	failedDir   = "failed"   // markers of segments a Watcher failed to archive
	watchedMark = "watched"  // a file: a Watcher runs on this pg_wal
	prefetchDir = "prefetch" // segments restored ahead, as <name>.<sha256>
)

// DefaultParallel is how many WAL files one wal-archive or wal-restore run
// transfers at once, the one PostgreSQL asked for included.
const DefaultParallel = 4

// readySuffix ends the status file PostgreSQL writes in
// pg_wal/archive_status for a file waiting to be archived.
const readySuffix = ".ready"

// ClearSpool removes the spool in the pg_wal directory walDir. The
// instance manager calls it when a recovery starts or a replica is
// promoted, so that nothing from an earlier history is even looked at.
func ClearSpool(walDir string) error {
	return os.RemoveAll(filepath.Join(walDir, SpoolDirName))
}

// AheadSegments picks, from the names in pg_wal/archive_status, the
// segments to archive together with requested: the next ones waiting
// (".ready") after it, in name order, at most parallel-1 of them. Only
// plain segments are archived ahead; timeline history, backup history and
// partial files are archived only when PostgreSQL asks for them (it
// archives history files first, and a .partial must not get ahead of the
// timeline switch it belongs to).
func AheadSegments(requested string, statusFiles []string, parallel int) []string {
	if parallel <= 1 || postgres.ClassifyWALFileName(requested) != postgres.WALFileSegment {
		return nil
	}
	var next []string
	for _, f := range statusFiles {
		name, ok := strings.CutSuffix(f, readySuffix)
		if ok && postgres.ClassifyWALFileName(name) == postgres.WALFileSegment && name > requested {
			next = append(next, name)
		}
	}
	slices.Sort(next)
	return next[:min(len(next), parallel-1)]
}

// PrefetchSegments names the segments to restore ahead when PostgreSQL
// asks for segment name: the next count-1 segments of the same timeline,
// for segments of segSize bytes (the low part of the name wraps into the
// high part as PostgreSQL numbers them). Anything but a plain segment, or
// an invalid size, gives none: history files are never prefetched.
func PrefetchSegments(name string, segSize uint64, count int) []string {
	if count <= 1 || postgres.ClassifyWALFileName(name) != postgres.WALFileSegment {
		return nil
	}
	seg, err := postgres.ParseWALFileName(name, segSize)
	if err != nil {
		return nil
	}
	names := make([]string, 0, count-1)
	for i := 1; i < count; i++ {
		next := seg
		next.Number += uint64(i)
		names = append(names, next.FileName())
	}
	return names
}
