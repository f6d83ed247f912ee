package retention

import (
	"slices"
	"testing"
	"time"

	"tusk.dev/tusk/internal/postgres"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

const week = 7 * 24 * time.Hour

func seg(tl uint32, n uint64) postgres.WALSegment {
	return postgres.WALSegment{Timeline: tl, Number: n, Size: postgres.DefaultWALSegmentSize}
}

// done is a complete backup that ended daysAgo days before now.
func done(name string, daysAgo float64, begin postgres.WALSegment) Backup {
	return Backup{Name: name, State: Complete, End: now.Add(-time.Duration(daysAgo * float64(24*time.Hour))), Begin: begin}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name        string
		backups     []Backup
		period      time.Duration
		delete      []string
		keep        []string
		interrupted []string
		wal         *WALBoundary
		frpDaysAgo  float64 // -1: no first recoverability point
	}{{
		name:       "no backups: nothing",
		period:     week,
		frpDaysAgo: -1,
	}, {
		name:       "no complete backup: nothing, not even old interrupted attempts",
		backups:    []Backup{{Name: "a", State: Incomplete, End: now.Add(-30 * 24 * time.Hour)}},
		period:     week,
		frpDaysAgo: -1,
	}, {
		name:       "one old backup is the newest: kept",
		backups:    []Backup{done("a", 30, seg(1, 10))},
		period:     week,
		keep:       []string{"a"},
		wal:        &WALBoundary{Before: 10, MaxTimeline: 1, SegmentSize: postgres.DefaultWALSegmentSize},
		frpDaysAgo: 30,
	}, {
		name: "the newest before the window is kept, older ones go",
		backups: []Backup{
			done("d", 1, seg(1, 40)), done("a", 20, seg(1, 10)), done("b", 10, seg(1, 20)),
			done("c", 8, seg(1, 30)),
		},
		period:     week,
		delete:     []string{"a", "b"},
		keep:       []string{"c", "d"},
		wal:        &WALBoundary{Before: 30, MaxTimeline: 1, SegmentSize: postgres.DefaultWALSegmentSize},
		frpDaysAgo: 8,
	}, {
		name: "a backup ending exactly at the window's start covers the whole window: older ones go",
		backups: []Backup{
			done("a", 9, seg(1, 10)), done("b", 7, seg(1, 20)), done("c", 1, seg(1, 30)),
		},
		period:     week,
		delete:     []string{"a"},
		keep:       []string{"b", "c"},
		wal:        &WALBoundary{Before: 20, MaxTimeline: 1, SegmentSize: postgres.DefaultWALSegmentSize},
		frpDaysAgo: 7,
	}, {
		name: "all within the window: all kept",
		backups: []Backup{
			done("a", 6, seg(1, 10)), done("b", 1, seg(1, 20)),
		},
		period:     week,
		keep:       []string{"a", "b"},
		wal:        &WALBoundary{Before: 10, MaxTimeline: 1, SegmentSize: postgres.DefaultWALSegmentSize},
		frpDaysAgo: 6,
	}, {
		name: "incomplete attempts are not backups: an old one is cleaned, a recent one left",
		backups: []Backup{
			done("a", 20, seg(1, 10)), {Name: "failed", State: Incomplete, End: now.Add(-15 * 24 * time.Hour)},
			done("b", 10, seg(1, 20)), {Name: "writing-its-record", State: Incomplete, End: now.Add(-time.Minute)},
		},
		period:      week,
		delete:      []string{"a"},
		keep:        []string{"b"},
		interrupted: []string{"failed"},
		wal:         &WALBoundary{Before: 20, MaxTimeline: 1, SegmentSize: postgres.DefaultWALSegmentSize},
		frpDaysAgo:  10,
	}, {
		name: "a record this version cannot read: that backup is kept and so is all WAL",
		backups: []Backup{
			done("a", 20, seg(1, 10)), {Name: "future", State: Unreadable}, done("b", 10, seg(1, 20)),
		},
		period:     week,
		delete:     []string{"a"},
		keep:       []string{"b"},
		frpDaysAgo: 10,
	}, {
		name: "timelines: the boundary is the lowest segment number of the kept, on the highest timeline",
		backups: []Backup{
			done("a", 20, seg(1, 10)), done("b", 10, seg(1, 20)), done("c", 5, seg(3, 35)), done("d", 1, seg(2, 30)),
		},
		period:     week,
		delete:     []string{"a"},
		keep:       []string{"b", "c", "d"},
		wal:        &WALBoundary{Before: 20, MaxTimeline: 3, SegmentSize: postgres.DefaultWALSegmentSize},
		frpDaysAgo: 10,
	}, {
		name: "kept backups of different segment sizes: unsure, all WAL kept",
		backups: []Backup{
			done("a", 10, postgres.WALSegment{Timeline: 1, Number: 20, Size: 64 << 20}), done("b", 1, seg(1, 30)),
		},
		period:     week,
		keep:       []string{"a", "b"},
		frpDaysAgo: 10,
	}, {
		name:       "no retention period: nothing deleted, the first point still known",
		backups:    []Backup{done("a", 400, seg(1, 1)), done("b", 1, seg(1, 30))},
		keep:       []string{"a", "b"},
		frpDaysAgo: 400,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Decide(tt.backups, now, tt.period)
			if !slices.Equal(p.Delete, tt.delete) || !slices.Equal(p.Keep, tt.keep) || !slices.Equal(p.Interrupted, tt.interrupted) {
				t.Errorf("delete %v keep %v interrupted %v, want %v %v %v", p.Delete, p.Keep, p.Interrupted, tt.delete, tt.keep, tt.interrupted)
			}
			if (p.WAL == nil) != (tt.wal == nil) || p.WAL != nil && *p.WAL != *tt.wal {
				t.Errorf("WAL boundary %+v, want %+v", p.WAL, tt.wal)
			}
			var want time.Time
			if tt.frpDaysAgo >= 0 {
				want = done("", tt.frpDaysAgo, seg(1, 1)).End
			}
			if !p.FirstRecoverabilityPoint.Equal(want) {
				t.Errorf("first recoverability point %v, want %v", p.FirstRecoverabilityPoint, want)
			}
		})
	}
}

func TestWALBoundaryDeletes(t *testing.T) {
	w := &WALBoundary{Before: 0x100 + 5, MaxTimeline: 2, SegmentSize: postgres.DefaultWALSegmentSize}
	tests := []struct {
		name string
		want bool
	}{
		{"000000020000000100000004", true},         // just below, same timeline
		{"000000020000000100000005", false},        // the boundary segment itself
		{"000000010000000100000004", true},         // older timeline, below
		{"0000000100000000000000FF", true},         // lower log id
		{"000000010000000100000006", false},        // older timeline, above: name order would say otherwise
		{"000000030000000000000001", false},        // a newer timeline than any kept backup: unsure
		{"000000010000000100000003.partial", true}, // partial segment below
		{"000000020000000100000005.partial", false},
		{"000000010000000100000002.00000028.backup", true},
		{"000000020000000100000005.00000028.backup", false},
		{"00000002.history", false},
		{"00000001.history", false},
		{"garbage", false},
		{"000000020000000100000004.tmp", false},
	}
	for _, tt := range tests {
		if got := w.Deletes(tt.name); got != tt.want {
			t.Errorf("Deletes(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestParsePeriod(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"7d", week, false},
		{"4w", 4 * week, false},
		{"1d", 24 * time.Hour, false},
		{"36600d", 36600 * 24 * time.Hour, false},
		{"36601d", 0, true},
		{"99999999999999999999d", 0, true},
		{"0d", 0, true},
		{"7h", 0, true},
		{"d", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		got, err := ParsePeriod(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParsePeriod(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
