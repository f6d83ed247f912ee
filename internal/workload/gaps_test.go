package workload

import (
	"testing"
	"time"
)

func TestGaps(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cases := []struct {
		name        string
		acks        []time.Time
		longest     float64 // seconds; -1 for none
		longestFrom time.Time
		over        int
	}{
		{name: "none", acks: nil, longest: -1},
		{name: "one", acks: []time.Time{at(0)}, longest: -1},
		{name: "steady", acks: []time.Time{at(0), at(10), at(20), at(30)}, longest: 0.01, longestFrom: at(0)},
		{name: "unordered, across clients", acks: []time.Time{at(30), at(0), at(2500), at(20)}, longest: 2.47, longestFrom: at(30), over: 1},
		{name: "two gaps over the threshold", acks: []time.Time{at(0), at(1500), at(1600), at(4600)}, longest: 3, longestFrom: at(1600), over: 2},
		{name: "exactly the threshold is not over", acks: []time.Time{at(0), at(1000)}, longest: 1, longestFrom: at(0), over: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := Gaps(tc.acks, time.Second)
			if tc.longest < 0 {
				if rep.Longest != nil || len(rep.Over) != 0 {
					t.Fatalf("got %+v, want no gap", rep)
				}
				return
			}
			if rep.Longest == nil || !approx(rep.Longest.Seconds, tc.longest) || !rep.Longest.Start.Equal(tc.longestFrom) {
				t.Fatalf("longest gap %+v, want %.3fs from %s", rep.Longest, tc.longest, tc.longestFrom)
			}
			if len(rep.Over) != tc.over {
				t.Fatalf("gaps over 1s: %+v, want %d", rep.Over, tc.over)
			}
		})
	}
}

func approx(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
