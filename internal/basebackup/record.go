package basebackup

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/postgres"
)

// RecordFormat is the version of backup.json this package writes.
const RecordFormat = 1

// Record is backup.json: what a backup is and needs. It is written after
// the data object is complete and verified, so its presence marks a usable
// backup.
type Record struct {
	Format int    `json:"format"`
	Name   string `json:"name"`
	// BeginLSN is where recovery starts (the backup's checkpoint's redo
	// point); EndLSN is where the restored copy becomes consistent: WAL up
	// to it must be in the archive. Timeline is BeginLSN's timeline.
	BeginLSN postgres.LSN `json:"beginLSN"`
	EndLSN   postgres.LSN `json:"endLSN"`
	Timeline uint32       `json:"timeline"`
	// BeginWAL is the first WAL segment recovery reads; WAL older than it
	// is not needed by this backup (for retention).
	BeginWAL       string `json:"beginWAL"`
	WALSegmentSize uint64 `json:"walSegmentSize"`
	// StartTime is when pg_basebackup started; EndTime when it had
	// finished (after the server had ended the backup), by the clock of
	// the host that took it. Recovery cannot stop at a time before EndTime.
	StartTime time.Time `json:"startTime"`
	EndTime   time.Time `json:"endTime"`
	// Size is the tar stream's size; CompressedSize the stored object's.
	Size           int64 `json:"size"`
	CompressedSize int64 `json:"compressedSize"`
	Files          int   `json:"files"`
	// PostgreSQLVersion is server_version; PostgreSQLVersionNum its
	// server_version_num.
	PostgreSQLVersion    string `json:"postgresqlVersion"`
	PostgreSQLVersionNum int    `json:"postgresqlVersionNum"`
	// SystemIdentifier is the cluster's database system identifier (a
	// string: it does not fit a JSON number).
	SystemIdentifier string `json:"systemIdentifier"`
	// ManifestChecksum is the backup manifest's own SHA-256
	// (its Manifest-Checksum); ManifestChecksumAlgorithm the algorithm of
	// its files' checksums.
	ManifestChecksum          string `json:"manifestChecksum"`
	ManifestChecksumAlgorithm string `json:"manifestChecksumAlgorithm"`
	// Object is the data object's key relative to the backup's directory,
	// and Compression its compression.
	Object      string `json:"object"`
	Compression string `json:"compression"`
}

// maxRecordSize bounds what LoadRecord reads.
const maxRecordSize = 1 << 20

// LoadRecord reads backup name's record. A backup that does not exist (or
// never completed) is an error that names the backups there are.
func LoadRecord(ctx context.Context, store *objectstore.Store, name string) (*Record, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	body, _, err := store.Get(ctx, RecordKey(name))
	if objectstore.IsNotFound(err) {
		return nil, fmt.Errorf("backup %q does not exist at %s%s (%s)", name, store.Location(), Prefix, listedBackups(ctx, store))
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = body.Close() }()
	data, err := io.ReadAll(io.LimitReader(body, maxRecordSize))
	if err != nil {
		return nil, fmt.Errorf("while reading the record of backup %q: %w", name, err)
	}
	var rec Record
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("while parsing the record of backup %q: %w", name, err)
	}
	if rec.Format != RecordFormat || rec.Name != name || rec.Compression != compressionZstd {
		return nil, fmt.Errorf("the record of backup %q (format %d, name %q, compression %q) is not one this version of tusk reads",
			name, rec.Format, rec.Name, rec.Compression)
	}
	return &rec, nil
}

// listedBackups says which complete backups the store has, for messages.
func listedBackups(ctx context.Context, store *objectstore.Store) string {
	names, err := ListBackups(ctx, store)
	switch {
	case err != nil:
		return fmt.Sprintf("listing the backups there failed: %v", err)
	case len(names) == 0:
		return "there are no backups there"
	case len(names) > 10:
		return fmt.Sprintf("backups there: %v and %d more", names[:10], len(names)-10)
	}
	return fmt.Sprintf("backups there: %v", names)
}

// ListBackups names the complete backups (those with a record), in key
// order.
func ListBackups(ctx context.Context, store *objectstore.Store) ([]string, error) {
	var names []string
	for obj, err := range store.List(ctx, Prefix) {
		if err != nil {
			return nil, err
		}
		rest := obj.Key[len(Prefix):]
		if len(rest) > len(RecordObject) && rest[len(rest)-len(RecordObject)-1:] == "/"+RecordObject {
			names = append(names, rest[:len(rest)-len(RecordObject)-1])
		}
	}
	return names, nil
}

// save writes the record.
func (r *Record) save(ctx context.Context, store *objectstore.Store) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return store.Put(ctx, RecordKey(r.Name), bytes.NewReader(append(data, '\n')), nil)
}
