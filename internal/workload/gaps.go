package workload

import (
	"slices"
	"sort"
	"time"
)

// Gap is a stretch of time without any acknowledged write.
type Gap struct {
	Start   time.Time `json:"start"` // the acknowledgement before the gap
	End     time.Time `json:"end"`   // the first acknowledgement after it
	Seconds float64   `json:"seconds"`
}

// GapReport is the longest gap and every gap longer than a threshold.
type GapReport struct {
	Longest *Gap  `json:"longest,omitempty"`
	Over    []Gap `json:"over,omitempty"`
	// Threshold is the threshold of Over, in seconds.
	Threshold float64 `json:"thresholdSeconds"`
}

// Gaps sorts the acknowledgement times of all clients and measures the time
// between consecutive ones.
func Gaps(acks []time.Time, threshold time.Duration) GapReport {
	sorted := slices.Clone(acks)
	slices.SortFunc(sorted, func(a, b time.Time) int { return a.Compare(b) })
	g := newGapTracker(threshold)
	for _, t := range sorted {
		g.add(t)
	}
	return g.report()
}

// gapTracker measures gaps online, from acknowledgement times given in
// order; the writer feeds it under a lock so memory stays constant.
type gapTracker struct {
	threshold time.Duration
	last      time.Time
	rep       GapReport
}

func newGapTracker(threshold time.Duration) *gapTracker {
	return &gapTracker{threshold: threshold, rep: GapReport{Threshold: threshold.Seconds()}}
}

func (g *gapTracker) add(t time.Time) {
	if !g.last.IsZero() {
		d := t.Sub(g.last)
		gap := Gap{Start: g.last, End: t, Seconds: d.Seconds()}
		if g.rep.Longest == nil || d.Seconds() > g.rep.Longest.Seconds {
			g.rep.Longest = &gap
		}
		if d > g.threshold {
			g.rep.Over = append(g.rep.Over, gap)
		}
	}
	g.last = t
}

func (g *gapTracker) report() GapReport { return g.rep }

// ackTimes is the writer-side time of every acknowledgement in a ledger.
func ackTimes(recs []Record) []time.Time {
	var ts []time.Time
	for _, r := range recs {
		if r.Kind == KindAck {
			ts = append(ts, r.At)
		}
	}
	return ts
}

// gapState is where an incremental check left the gaps: the report of the
// acknowledgements up to Anchor (the last of them), and the times of those
// after it, between which a later check's may still fall.
type gapState struct {
	Before GapReport   `json:"before"`
	Anchor time.Time   `json:"anchor,omitzero"`
	After  []time.Time `json:"after,omitempty"`
}

// extend adds acks, the acknowledgement times read since, and returns the
// report of all of them and the state for the next check, which keeps the
// times within slack of the last one open. ok is false when one of acks
// falls before Anchor: only the full computation places it.
func (g gapState) extend(acks []time.Time, threshold, slack time.Duration) (rep GapReport, next gapState, ok bool) {
	if slices.ContainsFunc(acks, func(t time.Time) bool { return t.Before(g.Anchor) }) {
		return GapReport{}, g, false
	}
	times := slices.Concat(g.After, acks)
	slices.SortFunc(times, time.Time.Compare)
	cut := 0
	if n := len(times); n > 0 {
		limit := times[n-1].Add(-slack)
		cut = sort.Search(n, func(i int) bool { return times[i].After(limit) })
	}
	tr := newGapTracker(threshold)
	tr.last = g.Anchor
	for _, t := range times[:cut] {
		tr.add(t)
	}
	next = gapState{Before: joinGaps(g.Before, tr.report()), Anchor: g.Anchor, After: times[cut:]}
	if cut > 0 {
		next.Anchor = times[cut-1]
	}
	for _, t := range times[cut:] {
		tr.add(t)
	}
	return joinGaps(g.Before, tr.report()), next, true
}

// joinGaps is the report of the gaps of before and then of after: the
// longest of both (before's on a tie, as Gaps keeps the first), and all
// those over the threshold, in order.
func joinGaps(before, after GapReport) GapReport {
	out := GapReport{Longest: before.Longest, Over: slices.Concat(before.Over, after.Over), Threshold: after.Threshold}
	if after.Longest != nil && (out.Longest == nil || after.Longest.Seconds > out.Longest.Seconds) {
		out.Longest = after.Longest
	}
	return out
}
