package instance

import (
	"errors"
	"testing"
)

func TestCouldNotConnect(t *testing.T) {
	tests := []struct {
		output string
		want   bool
	}{
		{`pg_rewind failed (exit status 1): pg_rewind: error: connection to server at "pg-rw" (10.214.0.84), port 5432 failed: Connection refused / 	Is the server running on that host and accepting TCP/IP connections?`, true},
		{`pg_rewind failed (exit status 1): pg_rewind: error: connection to server at "pg-rw" (10.214.0.84), port 5432 failed: timeout expired`, true},
		// Connected, then lost: the target may be half-rewound.
		{`pg_rewind failed (exit status 1): pg_rewind: error: could not fetch remote file "base/5/1259": server closed the connection unexpectedly`, false},
		{`pg_rewind failed (exit status 1): pg_rewind: fatal: could not find common ancestor of the source and target cluster's timelines`, false},
	}
	for _, tc := range tests {
		if got := couldNotConnect(errors.New(tc.output)); got != tc.want {
			t.Errorf("couldNotConnect(%q) = %v, want %v", tc.output, got, tc.want)
		}
	}
}
