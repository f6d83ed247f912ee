package postgres

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// WAL segment sizes PostgreSQL allows (initdb --wal-segsize): a power of
// two from 1 MiB to 1 GiB. DefaultWALSegmentSize is what initdb picks.
const (
	MinWALSegmentSize     uint64 = 1 << 20
	MaxWALSegmentSize     uint64 = 1 << 30
	DefaultWALSegmentSize uint64 = 16 << 20
)

// Suffixes of the files PostgreSQL keeps in pg_wal and hands to
// archive_command besides plain segments.
const (
	// PartialSuffix marks the last, incomplete segment of an old timeline,
	// archived at promotion so the WAL up to the switch point is kept.
	PartialSuffix = ".partial"
	// HistorySuffix ends a timeline history file, such as 00000002.history.
	HistorySuffix = ".history"
	// BackupSuffix ends a backup history file written by pg_backup_stop.
	BackupSuffix = ".backup"
)

// walNameHexDigits is the length of a segment file name: timeline, high
// and low part of the segment number, 8 hex digits each.
const walNameHexDigits = 24

// ErrWALFileName is wrapped by every error about a malformed WAL file name.
var ErrWALFileName = errors.New("not a WAL file name")

// ValidateWALSegmentSize checks that size is a WAL segment size PostgreSQL
// can use. Sizes come from pg_controldata or the archive's metadata; a
// wrong one would make every computed file name wrong, so it is an error
// rather than something to round.
func ValidateWALSegmentSize(size uint64) error {
	if size < MinWALSegmentSize || size > MaxWALSegmentSize || size&(size-1) != 0 {
		return fmt.Errorf("WAL segment size %d bytes is not a power of two from 1 MiB to 1 GiB", size)
	}
	return nil
}

// WALSegment identifies one WAL segment file: the timeline and the segment
// number (start LSN / segment size) with the segment size that gives the
// number its meaning.
type WALSegment struct {
	Timeline uint32
	Number   uint64
	Size     uint64
}

// SegmentOf returns the segment of the given timeline that holds lsn.
func SegmentOf(timeline uint32, lsn LSN, segSize uint64) (WALSegment, error) {
	if err := ValidateWALSegmentSize(segSize); err != nil {
		return WALSegment{}, err
	}
	if timeline == 0 {
		return WALSegment{}, errors.New("timeline 0 is not a timeline: PostgreSQL numbers them from 1")
	}
	return WALSegment{Timeline: timeline, Number: uint64(lsn) / segSize, Size: segSize}, nil
}

// WALFileName is the name of the segment file that holds lsn on timeline,
// as PostgreSQL names it in pg_wal and passes it to archive_command (%f):
// for example timeline 1, LSN 0/3000060 and 16 MiB segments give
// "000000010000000000000003".
func WALFileName(timeline uint32, lsn LSN, segSize uint64) (string, error) {
	seg, err := SegmentOf(timeline, lsn, segSize)
	if err != nil {
		return "", err
	}
	return seg.FileName(), nil
}

// segmentsPerXLogID is how many segments share the high 8 digits of a
// file name (PostgreSQL's XLogSegmentsPerXLogId).
func segmentsPerXLogID(segSize uint64) uint64 {
	return (1 << 32) / segSize
}

// FileName is the segment's file name, as XLogFileName in PostgreSQL
// writes it. s must come from SegmentOf or ParseWALFileName.
func (s WALSegment) FileName() string {
	per := segmentsPerXLogID(s.Size)
	return fmt.Sprintf("%08X%08X%08X", s.Timeline, s.Number/per, s.Number%per)
}

// StartLSN is the first byte position the segment holds.
func (s WALSegment) StartLSN() LSN {
	return LSN(s.Number * s.Size)
}

// ParseWALFileName reads a segment file name back, for a cluster whose
// segments are segSize bytes. It accepts only what PostgreSQL writes: 24
// uppercase hex digits, a timeline from 1, and a low part below the number
// of segments per 4 GiB (so every accepted name is one PostgreSQL could
// have produced, and FileName gives it back unchanged). Names with the
// ".partial" suffix are not segments: strip PartialSuffix first.
func ParseWALFileName(name string, segSize uint64) (WALSegment, error) {
	if err := ValidateWALSegmentSize(segSize); err != nil {
		return WALSegment{}, err
	}
	if !IsWALFileName(name) {
		return WALSegment{}, fmt.Errorf("%w: %q is not 24 uppercase hexadecimal digits", ErrWALFileName, name)
	}
	tli, _ := strconv.ParseUint(name[0:8], 16, 32)
	hi, _ := strconv.ParseUint(name[8:16], 16, 32)
	lo, _ := strconv.ParseUint(name[16:24], 16, 32)
	per := segmentsPerXLogID(segSize)
	if tli == 0 {
		return WALSegment{}, fmt.Errorf("%w: %q has timeline 0", ErrWALFileName, name)
	}
	if lo >= per {
		return WALSegment{}, fmt.Errorf("%w: %q has segment %X, but %d-byte segments number only 0 to %X", ErrWALFileName, name, lo, segSize, per-1)
	}
	return WALSegment{Timeline: uint32(tli), Number: hi*per + lo, Size: segSize}, nil
}

// IsWALFileName says whether name is a WAL segment file name (24 uppercase
// hex digits), as PostgreSQL's IsXLogFileName does. It does not need the
// segment size, so it cannot check the low part; ParseWALFileName does.
func IsWALFileName(name string) bool {
	return len(name) == walNameHexDigits && isUpperHex(name)
}

// isUpperHex says whether s is all digits and uppercase A-F: PostgreSQL
// writes file names with %X, and lowercase names are not its files.
func isUpperHex(s string) bool {
	return onlyBytesOf(s, "0123456789ABCDEF")
}

// WALFileKind is the kind of a file found in pg_wal or the WAL archive.
type WALFileKind int

// The kinds of WAL files, as archive_command and restore_command see them.
const (
	// WALFileUnknown is anything else (including archive_status/ and temp files).
	WALFileUnknown WALFileKind = iota
	// WALFileSegment is a complete segment, such as 000000010000000000000003.
	WALFileSegment
	// WALFilePartial is a segment cut short by a promotion (".partial").
	WALFilePartial
	// WALFileTimelineHistory is a timeline history file, such as 00000002.history.
	WALFileTimelineHistory
	// WALFileBackupHistory is a backup history file, such as
	// 000000010000000000000002.00000028.backup.
	WALFileBackupHistory
)

// String names the kind for logs.
func (k WALFileKind) String() string {
	switch k {
	case WALFileSegment:
		return "segment"
	case WALFilePartial:
		return "partial segment"
	case WALFileTimelineHistory:
		return "timeline history"
	case WALFileBackupHistory:
		return "backup history"
	default:
		return "unknown"
	}
}

// ClassifyWALFileName says what kind of WAL file name is. Archiving treats
// the kinds differently: history files are small and must never be
// overwritten with different content, partial segments must not be
// restored as if complete, and backup history files mark base backups.
func ClassifyWALFileName(name string) WALFileKind {
	switch {
	case IsWALFileName(name):
		return WALFileSegment
	case strings.HasSuffix(name, PartialSuffix) && IsWALFileName(strings.TrimSuffix(name, PartialSuffix)):
		return WALFilePartial
	case isTimelineHistoryFileName(name):
		return WALFileTimelineHistory
	case isBackupHistoryFileName(name):
		return WALFileBackupHistory
	default:
		return WALFileUnknown
	}
}

// isTimelineHistoryFileName matches "%08X.history".
func isTimelineHistoryFileName(name string) bool {
	stem, ok := strings.CutSuffix(name, HistorySuffix)
	return ok && len(stem) == 8 && isUpperHex(stem)
}

// isBackupHistoryFileName matches "%08X%08X%08X.%08X.backup": the segment
// where the backup started, then the start offset within it.
func isBackupHistoryFileName(name string) bool {
	stem, ok := strings.CutSuffix(name, BackupSuffix)
	if !ok {
		return false
	}
	seg, offset, ok := strings.Cut(stem, ".")
	return ok && IsWALFileName(seg) && len(offset) == 8 && isUpperHex(offset)
}

// TimelineHistoryFileName is the name of the history file PostgreSQL writes
// when timeline begins (at a promotion), such as "00000002.history".
func TimelineHistoryFileName(timeline uint32) string {
	return fmt.Sprintf("%08X%s", timeline, HistorySuffix)
}

// ParseTimelineHistoryFileName returns the timeline a history file name
// belongs to.
func ParseTimelineHistoryFileName(name string) (uint32, error) {
	if !isTimelineHistoryFileName(name) {
		return 0, fmt.Errorf("%w: %q is not a timeline history file name (8 uppercase hex digits and %q)", ErrWALFileName, name, HistorySuffix)
	}
	tli, _ := strconv.ParseUint(name[:8], 16, 32)
	if tli == 0 {
		return 0, fmt.Errorf("%w: %q has timeline 0", ErrWALFileName, name)
	}
	return uint32(tli), nil
}
