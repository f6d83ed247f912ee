package basebackup

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"slices"
	"strings"

	"tusk.dev/tusk/internal/postgres"
)

// ManifestName is the backup manifest's name in the tar stream and in the
// data directory.
const ManifestName = "backup_manifest"

// maxManifestSize bounds the memory a manifest may take (PostgreSQL's are
// about 150 bytes per file).
const maxManifestSize = 256 << 20

// ErrVerification is wrapped by every error saying that a backup's content
// does not match its manifest (or the manifest its own checksum).
var ErrVerification = errors.New("backup verification failed")

// Manifest is what this package reads of PostgreSQL's backup manifest
// (PostgreSQL 13+).
type Manifest struct {
	// Version is 1 (PostgreSQL 13 to 16) or 2 (17 on, which adds
	// SystemIdentifier).
	Version          int            `json:"PostgreSQL-Backup-Manifest-Version"`
	SystemIdentifier uint64         `json:"System-Identifier,omitempty"`
	Files            []ManifestFile `json:"Files"`
	WALRanges        []WALRange     `json:"WAL-Ranges"`
	Checksum         string         `json:"Manifest-Checksum"`
}

// ManifestFile is one file of the backup.
type ManifestFile struct {
	Path      string `json:"Path"`
	Size      int64  `json:"Size"`
	Algorithm string `json:"Checksum-Algorithm"`
	Checksum  string `json:"Checksum"`
}

// WALRange is the WAL a backup needs on one timeline.
type WALRange struct {
	Timeline uint32       `json:"Timeline"`
	Start    postgres.LSN `json:"Start-LSN"`
	End      postgres.LSN `json:"End-LSN"`
}

// ParseManifest reads a backup manifest and checks its own checksum: the
// SHA-256 of everything up to the line that holds it.
func ParseManifest(data []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: the backup manifest does not parse: %w", ErrVerification, err)
	}
	if m.Version != 1 && m.Version != 2 {
		return nil, fmt.Errorf("%w: backup manifest version %d (this version of tusk reads versions 1 and 2)", ErrVerification, m.Version)
	}
	end := bytes.LastIndex(data, []byte("\n\"Manifest-Checksum\""))
	if end < 0 {
		return nil, fmt.Errorf("%w: the backup manifest has no checksum", ErrVerification)
	}
	sum := sha256.Sum256(data[:end+1])
	if got := hex.EncodeToString(sum[:]); got != m.Checksum {
		return nil, fmt.Errorf("%w: the backup manifest's checksum is %s, its content's %s", ErrVerification, m.Checksum, got)
	}
	if len(m.WALRanges) == 0 {
		return nil, fmt.Errorf("%w: the backup manifest names no WAL range", ErrVerification)
	}
	return &m, nil
}

// newHash returns a hash for one of the manifest's checksum algorithms.
func newHash(algorithm string) (hash.Hash, error) {
	switch strings.ToUpper(algorithm) {
	case "CRC32C":
		return crc32cLE{crc32.New(crc32.MakeTable(crc32.Castagnoli))}, nil
	case "SHA224":
		return sha256.New224(), nil
	case "SHA256":
		return sha256.New(), nil
	case "SHA384":
		return sha512.New384(), nil
	case "SHA512":
		return sha512.New(), nil
	}
	return nil, fmt.Errorf("checksum algorithm %q is not one this version of tusk verifies", algorithm)
}

// crc32cLE is CRC-32C as PostgreSQL writes it in manifests: the bytes of
// the 32-bit value in memory, little-endian on every platform it runs on
// here, where hash/crc32 gives them big-endian.
type crc32cLE struct{ hash.Hash32 }

func (c crc32cLE) Sum(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(b, c.Sum32())
}

// fileSum is what a backup's stream held of one file.
type fileSum struct {
	size     int64
	checksum string
}

// compare checks the files a stream held against the manifest: the same
// set of files, each with the manifest's size and checksum. It names up to
// a few differences.
func (m *Manifest) compare(algorithm string, files map[string]fileSum) error {
	var problems []string
	listed := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		listed[f.Path] = true
		got, ok := files[f.Path]
		switch {
		case !ok:
			problems = append(problems, f.Path+" is missing")
		case !strings.EqualFold(f.Algorithm, algorithm):
			problems = append(problems, fmt.Sprintf("%s has a %s checksum, not %s", f.Path, f.Algorithm, algorithm))
		case got.size != f.Size:
			problems = append(problems, fmt.Sprintf("%s is %d bytes, the manifest says %d", f.Path, got.size, f.Size))
		case got.checksum != strings.ToLower(f.Checksum):
			problems = append(problems, fmt.Sprintf("%s has checksum %s, the manifest says %s", f.Path, got.checksum, f.Checksum))
		}
	}
	for path := range files {
		if !listed[path] {
			problems = append(problems, path+" is not in the manifest")
		}
	}
	if len(problems) == 0 {
		return nil
	}
	slices.Sort(problems)
	more := ""
	if len(problems) > 5 {
		more = fmt.Sprintf(" (and %d more)", len(problems)-5)
		problems = problems[:5]
	}
	return fmt.Errorf("%w: %s%s", ErrVerification, strings.Join(problems, "; "), more)
}

// span is the WAL the backup needs: from the earliest start (and its
// timeline) to the latest end. A backup taken on the primary has one range;
// one taken on a standby promoted meanwhile has one per timeline.
func (m *Manifest) span() (begin, end postgres.LSN, timeline uint32) {
	begin, timeline = m.WALRanges[0].Start, m.WALRanges[0].Timeline
	for _, r := range m.WALRanges {
		if r.Start < begin {
			begin, timeline = r.Start, r.Timeline
		}
		end = max(end, r.End)
	}
	return begin, end, timeline
}
