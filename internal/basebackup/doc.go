// Package basebackup takes base backups of a PostgreSQL instance into an
// object store and restores them: what `tusk instance backup` and `tusk
// instance restore` run.
//
// A backup is pg_basebackup's tar stream (-Ft -D - -X none, which carries
// the backup manifest as its last member), compressed with zstd and
// streamed into the store as it is produced, never copied locally. While it
// streams, every file's checksum is computed and compared with the
// manifest; only a backup that matched it gets its record, backup.json,
// which is written last and so marks the backup complete. Restoring checks
// the same on what it extracts. The WAL the backup needs comes from the
// cluster's WAL archive (internal/walarchive). docs/backup.md describes the
// layout.
package basebackup

import (
	"fmt"
	"regexp"
)

// Object keys of one backup, relative to the cluster's location.
const (
	// Prefix holds one directory per backup: base/<name>/.
	Prefix = "base/"
	// DataObject is the compressed tar stream.
	DataObject = "base.tar.zst"
	// RecordObject is the backup's record, written last.
	RecordObject = "backup.json"
)

// namePattern is what a backup's name may be: a Kubernetes object name
// (PostgresBackup objects will name them), so a key segment and no more;
// maxNameLength bounds it. The bound is not a {0,251} in the pattern: that
// repetition compiles to a program of hundreds of instructions, which
// every run of the binary (every archive_command) paid for at start-up.
var namePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// maxNameLength is the longest Kubernetes object name.
const maxNameLength = 253

// ValidateName checks that name can name a backup.
func ValidateName(name string) error {
	if len(name) > maxNameLength || !namePattern.MatchString(name) || name == "." || name == ".." {
		return fmt.Errorf("backup name %q is not valid: use lowercase letters, digits, '-' and '.', "+
			"starting and ending with a letter or digit (as Kubernetes names)", name)
	}
	return nil
}

// DataKey is the key of the backup's tar stream.
func DataKey(name string) string { return Prefix + name + "/" + DataObject }

// RecordKey is the key of the backup's record.
func RecordKey(name string) string { return Prefix + name + "/" + RecordObject }
