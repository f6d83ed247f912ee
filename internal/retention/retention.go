// Package retention decides which base backups and archived WAL of a
// cluster's location are no longer needed, and deletes them.
//
// The rule: keep every backup that ended within the retention window, plus
// the newest one that ended before the window starts, so that every point
// in the window stays recoverable; never delete the newest complete
// backup; with no complete backup delete nothing. WAL older than the first
// segment the oldest kept backup reads goes too. Decide is the rule, a pure
// function; Prune carries a plan out against the store.
package retention

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"tusk.dev/tusk/internal/postgres"
)

// Backup is what retention knows of one backup directory in the store.
type Backup struct {
	// Name is the backup's name (its directory under base/).
	Name string
	// State says whether the backup is complete, incomplete or unreadable.
	State State
	// End is a complete backup's end time (its record's endTime); for an
	// incomplete one, the time its newest object was written.
	End time.Time
	// Begin is the first WAL segment a complete backup reads.
	Begin postgres.WALSegment
}

// State is what a backup directory holds.
type State int

// The states of a backup directory.
const (
	// Complete: backup.json is there and readable.
	Complete State = iota
	// Incomplete: objects but no backup.json, an attempt that was
	// interrupted (or one that is writing its record right now, or a
	// half-pruned backup).
	Incomplete
	// Unreadable: backup.json is there but this version of Tusk cannot
	// read it. Retention keeps it and, unsure which WAL it needs, keeps
	// all WAL.
	Unreadable
)

// Plan is what retention deletes.
type Plan struct {
	// Delete are the complete backups to delete, oldest first.
	Delete []string
	// Keep are the complete backups kept, oldest first.
	Keep []string
	// Interrupted are incomplete backup directories to delete: their
	// newest object is older than the window (no backup writes its data
	// for that long without writing its record).
	Interrupted []string
	// WAL says which archived WAL to delete; nil keeps all of it.
	WAL *WALBoundary
	// FirstRecoverabilityPoint is the end of the oldest kept backup: the
	// earliest time a recovery can reach. Zero without complete backups.
	FirstRecoverabilityPoint time.Time
}

// WALBoundary says which archived WAL goes: a segment (or .partial segment, or backup
// history file) is deleted when its segment number is below Before and its
// timeline is at most MaxTimeline. Segment numbers, not names, are
// compared: a name starts with its timeline, so name order is not WAL
// order across timelines. Timeline history files are never deleted.
type WALBoundary struct {
	Before      uint64
	MaxTimeline uint32
	SegmentSize uint64
}

// Decide applies the rule to the backups of one location at now, with a
// window of period (0: keep every backup, prune nothing).
func Decide(backups []Backup, now time.Time, period time.Duration) Plan {
	var complete []Backup
	unsure := false
	for _, b := range backups {
		switch b.State {
		case Complete:
			complete = append(complete, b)
		case Unreadable:
			unsure = true
		}
	}
	var p Plan
	if len(complete) == 0 {
		return p
	}
	slices.SortFunc(complete, func(a, b Backup) int {
		return cmp.Or(a.End.Compare(b.End), cmp.Compare(a.Name, b.Name))
	})
	first := 0
	if period > 0 {
		windowStart := now.Add(-period)
		// The newest backup that ended before the window starts, or
		// exactly at its start, is kept: recovering to any time in the
		// window starts from it; older ones are not needed.
		for i, b := range complete {
			if !b.End.After(windowStart) {
				first = i
			}
		}
		for _, b := range backups {
			if b.State == Incomplete && b.End.Before(windowStart) {
				p.Interrupted = append(p.Interrupted, b.Name)
			}
		}
		slices.Sort(p.Interrupted)
	}
	for _, b := range complete[:first] {
		p.Delete = append(p.Delete, b.Name)
	}
	kept := complete[first:]
	for _, b := range kept {
		p.Keep = append(p.Keep, b.Name)
	}
	p.FirstRecoverabilityPoint = kept[0].End
	if period > 0 && !unsure {
		p.WAL = walBoundary(kept)
	}
	return p
}

// walBoundary is the WAL no kept backup reads: segments below the lowest
// first segment of the kept backups, on the timelines they are on or
// older. nil (keep all WAL) when the kept backups disagree on the segment
// size.
func walBoundary(kept []Backup) *WALBoundary {
	w := &WALBoundary{Before: kept[0].Begin.Number, MaxTimeline: kept[0].Begin.Timeline, SegmentSize: kept[0].Begin.Size}
	for _, b := range kept[1:] {
		if b.Begin.Size != w.SegmentSize {
			return nil
		}
		w.Before = min(w.Before, b.Begin.Number)
		w.MaxTimeline = max(w.MaxTimeline, b.Begin.Timeline)
	}
	if postgres.ValidateWALSegmentSize(w.SegmentSize) != nil {
		return nil
	}
	return w
}

// errNotWAL says a WAL object's name is not one retention understands.
var errNotWAL = errors.New("not an archived WAL file")

// Deletes says whether the archived WAL file name (without the store's
// .zst extension) is below the boundary. Timeline history files and
// anything it does not recognise are kept.
func (w *WALBoundary) Deletes(name string) bool {
	seg, err := w.segmentOf(name)
	if err != nil {
		return false
	}
	return seg.Number < w.Before && seg.Timeline <= w.MaxTimeline
}

// segmentOf is the segment a segment, .partial segment or backup history
// file name is about.
func (w *WALBoundary) segmentOf(name string) (postgres.WALSegment, error) {
	switch postgres.ClassifyWALFileName(name) {
	case postgres.WALFileSegment:
		return postgres.ParseWALFileName(name, w.SegmentSize)
	case postgres.WALFilePartial:
		return postgres.ParseWALFileName(strings.TrimSuffix(name, postgres.PartialSuffix), w.SegmentSize)
	case postgres.WALFileBackupHistory:
		seg, _, _ := strings.Cut(name, ".")
		return postgres.ParseWALFileName(seg, w.SegmentSize)
	default:
		return postgres.WALSegment{}, fmt.Errorf("%w: %q", errNotWAL, name)
	}
}

// ParsePeriod reads spec.backup.retention: a whole number of days or weeks,
// such as 7d or 4w.
func ParsePeriod(s string) (time.Duration, error) {
	const maxDays = 100 * 366
	if len(s) < 2 {
		return 0, fmt.Errorf("retention %q is not a number of days or weeks, such as 7d or 4w", s)
	}
	unit := map[byte]int64{'d': 1, 'w': 7}[s[len(s)-1]]
	n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
	if unit == 0 || err != nil || n < 1 {
		return 0, fmt.Errorf("retention %q is not a number of days or weeks, such as 7d or 4w", s)
	}
	if n > maxDays/unit {
		return 0, fmt.Errorf("retention %q is longer than 100 years; leave spec.backup.retention unset to keep backups forever", s)
	}
	return time.Duration(n*unit) * 24 * time.Hour, nil
}
