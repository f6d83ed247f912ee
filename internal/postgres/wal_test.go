package postgres

import (
	"errors"
	"math"
	"testing"
)

const mib = 1 << 20

func TestWALFileName(t *testing.T) {
	tests := []struct {
		timeline uint32
		lsn      LSN
		segSize  uint64
		want     string
	}{
		{1, 0x3000060, 16 * mib, "000000010000000000000003"},
		{1, 0, 16 * mib, "000000010000000000000000"},
		{2, 0x16_B374D848, 16 * mib, "0000000200000016000000B3"},
		{1, 0x1_00000000, 16 * mib, "000000010000000100000000"},
		{1, 0xFFFFFFFF, 16 * mib, "0000000100000000000000FF"},
		{0xA, 0x3000060, 1 * mib, "0000000A0000000000000030"},
		{1, 0x7FFFFFFF, 1024 * mib, "000000010000000000000001"},
		{1, 0x80000000, 1024 * mib, "000000010000000000000002"},
		{math.MaxUint32, math.MaxUint64, 16 * mib, "FFFFFFFFFFFFFFFF000000FF"},
		{1, math.MaxUint64, 1024 * mib, "00000001FFFFFFFF00000003"},
	}
	for _, tt := range tests {
		got, err := WALFileName(tt.timeline, tt.lsn, tt.segSize)
		if err != nil {
			t.Errorf("WALFileName(%d, %v, %d): %v", tt.timeline, tt.lsn, tt.segSize, err)
			continue
		}
		if got != tt.want {
			t.Errorf("WALFileName(%d, %v, %d) = %q, want %q", tt.timeline, tt.lsn, tt.segSize, got, tt.want)
		}
	}
}

func TestWALFileNameRejectsBadInput(t *testing.T) {
	for _, size := range []uint64{0, 1, mib - 1, mib / 2, 3 * mib, 2048 * mib, 16*mib + 1} {
		if _, err := WALFileName(1, 0, size); err == nil {
			t.Errorf("WALFileName with segment size %d: no error", size)
		}
	}
	if _, err := WALFileName(0, 0, 16*mib); err == nil {
		t.Error("WALFileName with timeline 0: no error")
	}
}

func TestParseWALFileName(t *testing.T) {
	seg, err := ParseWALFileName("0000000200000016000000B3", 16*mib)
	if err != nil {
		t.Fatal(err)
	}
	want := WALSegment{Timeline: 2, Number: 0x16*256 + 0xB3, Size: 16 * mib}
	if seg != want {
		t.Errorf("got %+v, want %+v", seg, want)
	}
	if got := seg.StartLSN(); got != 0x16_B3000000 {
		t.Errorf("StartLSN = %v, want 16/B3000000", got)
	}
	if got := seg.FileName(); got != "0000000200000016000000B3" {
		t.Errorf("FileName = %q", got)
	}
}

func TestParseWALFileNameRejects(t *testing.T) {
	tests := []struct {
		name    string
		segSize uint64
	}{
		{"", 16 * mib},
		{"00000001000000000000003", 16 * mib},   // 23 digits
		{"0000000100000000000000030", 16 * mib}, // 25 digits
		{"0000000100000000000000b3", 16 * mib},  // lowercase: not PostgreSQL's
		{"000000000000000000000003", 16 * mib},  // timeline 0
		{"000000010000000000000100", 16 * mib},  // only 0..FF segments per 4 GiB of 16 MiB
		{"000000010000000000000004", 1024 * mib},
		{"000000010000000000000003.partial", 16 * mib},
		{"00000002.history", 16 * mib},
	}
	for _, tt := range tests {
		if _, err := ParseWALFileName(tt.name, tt.segSize); !errors.Is(err, ErrWALFileName) {
			t.Errorf("ParseWALFileName(%q, %d) error = %v, want ErrWALFileName", tt.name, tt.segSize, err)
		}
	}
	if _, err := ParseWALFileName("000000010000000000000003", 3*mib); err == nil {
		t.Error("ParseWALFileName with a bad segment size: no error")
	}
}

func TestClassifyWALFileName(t *testing.T) {
	tests := []struct {
		name string
		want WALFileKind
	}{
		{"000000010000000000000003", WALFileSegment},
		{"000000010000000000000003.partial", WALFilePartial},
		{"00000002.history", WALFileTimelineHistory},
		{"0000000A.history", WALFileTimelineHistory},
		{"000000010000000000000002.00000028.backup", WALFileBackupHistory},
		{"0000000a.history", WALFileUnknown},
		{"0000002.history", WALFileUnknown},
		{"00000002.history.partial", WALFileUnknown},
		{"000000010000000000000002.0000028.backup", WALFileUnknown},
		{"000000010000000000000002.backup", WALFileUnknown},
		{"00000001000000000000002.00000028.backup", WALFileUnknown},
		{".partial", WALFileUnknown},
		{"archive_status", WALFileUnknown},
		{"000000010000000000000003.done", WALFileUnknown},
		{"xlogtemp.1234", WALFileUnknown},
		{"", WALFileUnknown},
	}
	for _, tt := range tests {
		if got := ClassifyWALFileName(tt.name); got != tt.want {
			t.Errorf("ClassifyWALFileName(%q) = %v, want %v", tt.name, got, tt.want)
		}
		if got := IsWALFileName(tt.name); got != (tt.want == WALFileSegment) {
			t.Errorf("IsWALFileName(%q) = %v", tt.name, got)
		}
	}
}

func TestWALFileKindString(t *testing.T) {
	seen := map[string]WALFileKind{}
	for k := WALFileUnknown; k <= WALFileBackupHistory; k++ {
		s := k.String()
		if prev, dup := seen[s]; dup {
			t.Errorf("kinds %d and %d both print %q", prev, k, s)
		}
		seen[s] = k
	}
	if got := WALFileKind(99).String(); got != "unknown" {
		t.Errorf("WALFileKind(99) = %q, want unknown", got)
	}
}

func TestTimelineHistoryFileName(t *testing.T) {
	if got := TimelineHistoryFileName(2); got != "00000002.history" {
		t.Errorf("TimelineHistoryFileName(2) = %q", got)
	}
	if got := TimelineHistoryFileName(0x1A); got != "0000001A.history" {
		t.Errorf("TimelineHistoryFileName(0x1A) = %q", got)
	}
	tli, err := ParseTimelineHistoryFileName("0000001A.history")
	if err != nil || tli != 0x1A {
		t.Errorf("ParseTimelineHistoryFileName = %d, %v; want 26", tli, err)
	}
	for _, bad := range []string{"00000000.history", "0000001a.history", "1A.history", "0000001A.histor", "000000010000000000000003"} {
		if _, err := ParseTimelineHistoryFileName(bad); !errors.Is(err, ErrWALFileName) {
			t.Errorf("ParseTimelineHistoryFileName(%q) error = %v, want ErrWALFileName", bad, err)
		}
	}
}

// FuzzWALFileNameRoundTrip checks that the file name of the segment
// holding any LSN parses back to a segment that holds that LSN, and that
// every name ParseWALFileName accepts is printed back unchanged.
func FuzzWALFileNameRoundTrip(f *testing.F) {
	f.Add(uint32(1), uint64(0x3000060), uint8(4), "000000010000000000000003")
	f.Add(uint32(0xFFFFFFFF), uint64(math.MaxUint64), uint8(10), "FFFFFFFFFFFFFFFF000000FF")
	f.Add(uint32(2), uint64(0), uint8(0), "000000020000000000000100")
	f.Add(uint32(0), uint64(1<<32), uint8(7), "00000001000000000000000G")
	f.Fuzz(func(t *testing.T, timeline uint32, lsn uint64, sizeExp uint8, name string) {
		segSize := MinWALSegmentSize << (sizeExp % 11)
		if timeline == 0 {
			timeline = 1
		}
		fileName, err := WALFileName(timeline, LSN(lsn), segSize)
		if err != nil {
			t.Fatal(err)
		}
		seg, err := ParseWALFileName(fileName, segSize)
		if err != nil {
			t.Fatalf("ParseWALFileName(%q) of our own name: %v", fileName, err)
		}
		start := uint64(seg.StartLSN())
		if seg.Timeline != timeline || lsn < start || lsn-start >= segSize {
			t.Fatalf("%q (from timeline %d, LSN %v) parsed as %+v", fileName, timeline, LSN(lsn), seg)
		}
		if parsed, err := ParseWALFileName(name, segSize); err == nil && parsed.FileName() != name {
			t.Fatalf("ParseWALFileName(%q) = %+v, which prints as %q", name, parsed, parsed.FileName())
		}
	})
}
