package walarchive

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWaitingArchiveCommand runs the command with /bin/sh as PostgreSQL
// does (in the data directory, %f and %p replaced), with a fallback that
// says it ran: the fallback runs unless a Watcher recorded the segment,
// and at once when no Watcher runs, when it marked a failure, or for a
// file that is not a plain segment.
func TestWaitingArchiveCommand(t *testing.T) {
	const segment = "000000010000000000000003"
	tests := []struct {
		name     string
		file     string
		spool    []string // files to create in pg_wal/tusk-spool
		fallback bool
	}{
		{"recorded", segment, []string{"watched", "archived/" + segment}, false},
		{"no Watcher runs", segment, []string{"archived/" + segment}, true},
		{"marked failed", segment, []string{"watched", "failed/" + segment}, true},
		{"neither, until the wait ends", segment, []string{"watched"}, true},
		{"a history file", "00000002.history", []string{"watched", "archived/00000002.history"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := t.TempDir()
			for _, f := range tt.spool {
				path := filepath.Join(data, "pg_wal", SpoolDirName, f)
				if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			command := WaitingArchiveCommand("echo fallback 100%% %p", 200*time.Millisecond)
			// PostgreSQL's substitution: %p, %f and %%.
			command = strings.NewReplacer("%p", "pg_wal/"+tt.file, "%f", tt.file, "%%", "%").Replace(command)
			cmd := exec.Command("/bin/sh", "-c", command)
			cmd.Dir = data
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v, %s", command, err, out)
			}
			want := ""
			if tt.fallback {
				want = "fallback 100% pg_wal/" + tt.file + "\n"
			}
			if string(out) != want {
				t.Errorf("output %q, want %q", out, want)
			}
		})
	}
}
