package workload

import (
	"slices"
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
