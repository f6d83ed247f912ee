// Package walarchive archives PostgreSQL's WAL files to an object store and
// restores them: what `tusk instance wal-archive` (archive_command) and
// `tusk instance wal-restore` (restore_command) run.
//
// Each file is compressed with zstd and stored with the SHA-256 of its
// uncompressed content as object metadata. Archiving is idempotent: the same
// content again succeeds, different content under a name already archived
// is refused. Restoring verifies the checksum before the file reaches
// PostgreSQL. docs/backup.md describes the layout.
package walarchive

import (
	"errors"
	"fmt"

	"tusk.dev/tusk/internal/postgres"
)

// Extension ends every archived WAL object's key: the compression.
const Extension = ".zst"

// ErrUnknownFileName is wrapped by the error for a name that is not a WAL
// file PostgreSQL archives.
var ErrUnknownFileName = errors.New("not a WAL file name")

// WALPrefix is the prefix of every WAL object, relative to the cluster's
// location (the object store path, which defaults to the cluster's name).
const WALPrefix = "wal/"

// Key is the object key of a WAL file, relative to the cluster's location,
// given the name PostgreSQL passes as %f (or the base name of %p):
//
//   - segments, partial segments and backup history files go into a
//     directory per timeline and 4 GiB of WAL (the first 16 hex digits of
//     the name), so listing one range stays cheap:
//     wal/0000000100000002/000000010000000200000003.zst
//   - timeline history files sit at the top: wal/00000002.history.zst
func Key(walName string) (string, error) {
	switch postgres.ClassifyWALFileName(walName) {
	case postgres.WALFileSegment, postgres.WALFilePartial, postgres.WALFileBackupHistory:
		return WALPrefix + walName[:16] + "/" + walName + Extension, nil
	case postgres.WALFileTimelineHistory:
		return WALPrefix + walName + Extension, nil
	default:
		return "", fmt.Errorf("%w: %q (PostgreSQL archives segments, .partial segments, .history and .backup files)", ErrUnknownFileName, walName)
	}
}
