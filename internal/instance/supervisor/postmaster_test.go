package supervisor

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

func TestPostmasterLogAnalysis(t *testing.T) {
	const forked = "2026-11-23 07:09:43.355 GMT [22] LOG:  new timeline 3 forked off current database system timeline 2 before current recovery point 0/41E11C0"
	tests := []struct {
		name         string
		lines        []string
		wantDiverged string
		wantMismatch string
		wantError    string
	}{
		{
			name:  "a standby that streams says nothing of a divergence",
			lines: []string{"2026-11-23 07:10:04.885 GMT [220] LOG:  started streaming WAL from primary at 0/4000000 on timeline 3"},
		},
		{
			name: "a standby that cannot follow the new timeline",
			lines: []string{
				"2026-11-23 07:09:43.321 GMT [180] LOG:  started streaming WAL from primary at 0/4000000 on timeline 2",
				forked,
				"2026-11-23 07:09:43.372 GMT [22] LOG:  waiting for WAL to become available at 0/4002000",
			},
			wantDiverged: "LOG:  new timeline 3 forked off current database system timeline 2 before current recovery point 0/41E11C0",
		},
		{
			name: "a FATAL is explained by the earlier lines of its process",
			lines: []string{
				`2026-11-23 07:00:00.000 GMT [7] LOG:  invalid value for parameter "work_mem": "x"`,
				"2026-11-23 07:00:00.001 GMT [8] LOG:  unrelated",
				"2026-11-23 07:00:00.002 GMT [7] FATAL:  configuration file contains errors",
			},
			wantError: `LOG:  invalid value for parameter "work_mem": "x" / FATAL:  configuration file contains errors`,
		},
		{
			name: "clients turned away during recovery do not hide why the server stopped",
			lines: []string{
				"2026-11-23 07:04:53.100 GMT [213] LOG:  starting backup recovery with redo LSN 0/20000D8",
				"2026-11-23 07:04:53.200 GMT [213] FATAL:  requested timeline 3 does not contain minimum recovery point 0/41E11C0 on timeline 2",
				"2026-11-23 07:04:53.300 GMT [214] FATAL:  the database system is in recovery mode",
				"2026-11-23 07:04:53.400 GMT [215] FATAL:  the database system is starting up",
			},
			wantMismatch: "FATAL:  requested timeline 3 does not contain minimum recovery point 0/41E11C0 on timeline 2",
			wantError:    "LOG:  starting backup recovery with redo LSN 0/20000D8 / FATAL:  requested timeline 3 does not contain minimum recovery point 0/41E11C0 on timeline 2",
		},
		{
			name: "a last checkpoint past the fork of the requested timeline",
			lines: []string{
				"2026-11-23 07:04:53.200 GMT [213] FATAL:  requested timeline 2 is not a child of this server's history",
				"2026-11-23 07:04:53.201 GMT [213] DETAIL:  Latest checkpoint is at 0/5000060 on timeline 1, but in the history of the requested timeline, the server forked off from that timeline at 0/4000110.",
			},
			wantMismatch: "FATAL:  requested timeline 2 is not a child of this server's history",
			wantError:    "FATAL:  requested timeline 2 is not a child of this server's history",
		},
		{
			name: "the same words logged, not as the startup process's FATAL",
			lines: []string{
				"2026-11-23 07:04:53.200 GMT [300] ERROR:  relation \"does not contain minimum recovery point\" does not exist",
			},
			wantError: "ERROR:  relation \"does not contain minimum recovery point\" does not exist",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &Postmaster{log: logr.Discard(), out: logr.Discard()}
			p.forwardLog(strings.NewReader(strings.Join(tc.lines, "\n")))
			if got := p.Diverged(); got != tc.wantDiverged {
				t.Errorf("Diverged() = %q, want %q", got, tc.wantDiverged)
			}
			if got := p.HistoryMismatch(); got != tc.wantMismatch {
				t.Errorf("HistoryMismatch() = %q, want %q", got, tc.wantMismatch)
			}
			if got := p.LastError(); got != tc.wantError {
				t.Errorf("LastError() = %q, want %q", got, tc.wantError)
			}
		})
	}
}
