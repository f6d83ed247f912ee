package instance

import (
	"testing"
	"time"
)

func TestCrashLoop(t *testing.T) {
	short, long := time.Second, crashLoopStableRun
	tests := []struct {
		name        string
		uptimes     []time.Duration
		wantLooping []bool
		wantStable  []bool
	}{
		{"one crash after a long run", []time.Duration{long}, []bool{false}, []bool{true}},
		{"short runs in a row make a loop at the limit", []time.Duration{long, short, short, short},
			[]bool{false, false, true, true}, []bool{true, false, false, false}},
		{"a crash right at start counts", []time.Duration{0, 0, 0}, []bool{false, false, true}, []bool{false, false, false}},
		{"a stable run ends the streak", []time.Duration{short, short, long, short},
			[]bool{false, false, false, false}, []bool{false, false, true, false}},
		{"just below the stable run is short", []time.Duration{long - time.Millisecond, long - time.Millisecond, long - time.Millisecond},
			[]bool{false, false, true}, []bool{false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c crashLoop
			for i, up := range tt.uptimes {
				looping, stable := c.crashed(up)
				if looping != tt.wantLooping[i] || stable != tt.wantStable[i] {
					t.Fatalf("crash %d after %s: looping %t, after a stable run %t; want %t, %t",
						i+1, up, looping, stable, tt.wantLooping[i], tt.wantStable[i])
				}
			}
		})
	}
}
