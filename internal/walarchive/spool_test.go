package walarchive

import (
	"slices"
	"testing"
)

func TestAheadSegments(t *testing.T) {
	status := []string{
		"000000010000000000000005.ready",
		"000000010000000000000003.done",
		"000000010000000000000004.ready", // the requested one
		"000000010000000000000007.ready",
		"000000010000000000000006.ready",
		"000000010000000000000008.ready",
		"00000002.history.ready",
		"000000010000000000000004.00000028.backup.ready",
		"000000010000000000000009.partial.ready",
		"000000010000000000000002.ready", // before the requested one
		"00000001000000000000000a.ready", // lowercase: not PostgreSQL's
		".000000010000000000000005.ready.tmp",
	}
	tests := []struct {
		name      string
		requested string
		status    []string
		parallel  int
		want      []string
	}{
		{"next three waiting, in order", "000000010000000000000004", status, 4,
			[]string{"000000010000000000000005", "000000010000000000000006", "000000010000000000000007"}},
		{"bounded by parallel", "000000010000000000000004", status, 2, []string{"000000010000000000000005"}},
		{"parallel 1 takes none", "000000010000000000000004", status, 1, nil},
		{"parallel 0 takes none", "000000010000000000000004", status, 0, nil},
		{"fewer waiting than parallel", "000000010000000000000007", status, 8, []string{"000000010000000000000008"}},
		{"nothing after the last", "000000010000000000000008", status, 4, []string{}},
		{"a history file asked for takes none", "00000002.history", status, 4, nil},
		{"a backup history file asked for takes none", "000000010000000000000004.00000028.backup", status, 4, nil},
		{"a partial asked for takes none", "000000010000000000000009.partial", status, 4, nil},
		{"across the log boundary and onto a new timeline", "0000000100000000000000FF",
			[]string{"000000010000000100000000.ready", "0000000100000000000000FF.ready", "000000020000000100000001.ready", "000000010000000100000001.ready"}, 4,
			[]string{"000000010000000100000000", "000000010000000100000001", "000000020000000100000001"}},
		{"no status files", "000000010000000000000004", nil, 4, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AheadSegments(tt.requested, tt.status, tt.parallel)
			if !slices.Equal(got, tt.want) {
				t.Errorf("AheadSegments(%s, parallel %d) = %q, want %q", tt.requested, tt.parallel, got, tt.want)
			}
		})
	}
}

func TestPrefetchSegments(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name    string
		wal     string
		segSize uint64
		count   int
		want    []string
	}{
		{"next three of the timeline", "000000010000000000000004", 16 * mib, 4,
			[]string{"000000010000000000000005", "000000010000000000000006", "000000010000000000000007"}},
		{"wraps at the log boundary (16 MiB)", "0000000100000000000000FE", 16 * mib, 4,
			[]string{"0000000100000000000000FF", "000000010000000100000000", "000000010000000100000001"}},
		{"from the last of a log (16 MiB)", "0000000100000000000000FF", 16 * mib, 2, []string{"000000010000000100000000"}},
		{"wraps later with 1 MiB segments", "0000000100000000000000FF", 1 * mib, 3,
			[]string{"000000010000000000000100", "000000010000000000000101"}},
		{"wraps at 0x3F with 64 MiB segments", "00000003000000050000003F", 64 * mib, 2, []string{"000000030000000600000000"}},
		{"keeps the timeline", "0000000A000000020000001F", 16 * mib, 2, []string{"0000000A0000000200000020"}},
		{"count 1 fetches none", "000000010000000000000004", 16 * mib, 1, nil},
		{"a history file is never prefetched", "00000002.history", 16 * mib, 4, nil},
		{"a partial segment is never prefetched", "000000010000000000000004.partial", 16 * mib, 4, nil},
		{"a backup history file is never prefetched", "000000010000000000000004.00000028.backup", 16 * mib, 4, nil},
		{"a size that is no segment size gives none", "000000010000000000000004", 3 * mib, 4, nil},
		{"a name impossible for the size gives none", "000000010000000000000100", 16 * mib, 4, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PrefetchSegments(tt.wal, tt.segSize, tt.count); !slices.Equal(got, tt.want) {
				t.Errorf("PrefetchSegments(%s, %d, %d) = %q, want %q", tt.wal, tt.segSize, tt.count, got, tt.want)
			}
		})
	}
}
