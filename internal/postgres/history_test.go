package postgres

import (
	"maps"
	"testing"
)

func TestParseTimelineHistory(t *testing.T) {
	tests := []struct {
		name, text string
		want       map[uint32]LSN
		wantErr    bool
	}{
		{"one ancestor", "1\t0/3000000\tno recovery target specified\n", map[uint32]LSN{1: 0x3000000}, false},
		{"several, comments and blank lines", "# comment\n1\t0/3000000\tno recovery target specified\n\n2\t1/A0000028\tbefore 2026-11-23 18:00:00+00\n",
			map[uint32]LSN{1: 0x3000000, 2: 0x1A0000028}, false},
		{"empty", "", map[uint32]LSN{}, false},
		{"no LSN", "1\n", nil, true},
		{"timeline not a number", "one\t0/3000000\treason\n", nil, true},
		{"timeline 0", "0\t0/3000000\treason\n", nil, true},
		{"LSN invalid", "1\t3000000\treason\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTimelineHistory(tt.text)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error: %v", err, tt.wantErr)
			}
			if !tt.wantErr && !maps.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
