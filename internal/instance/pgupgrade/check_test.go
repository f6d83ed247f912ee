package pgupgrade

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestVersionsAreAskedThroughRun: the programs' majors are asked through
// Plan.Run, like every other child of an upgrade. In the instance manager
// (PID 1) Run goes through the reaper; a child started any other way could
// be reaped before it was waited for, and failed the upgrade with "waitid:
// no child processes". The bin directories here hold no programs at all,
// so anything that runs `postgres --version` itself fails; and the new
// server's share directory is found by its major (the Debian layout).
func TestVersionsAreAskedThroughRun(t *testing.T) {
	root := t.TempDir()
	dataDir := filepath.Join(root, "data")
	oldBin := filepath.Join(root, "old", "bin")
	newBin := filepath.Join(root, "usr", "lib", "postgresql", "17", "bin")
	share := filepath.Join(root, "usr", "share", "postgresql", "17")
	for _, dir := range []string{dataDir, oldBin, newBin, filepath.Join(share, "extension")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dataDir, "PG_VERSION"), []byte("15\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	versions := map[string]int{filepath.Join(oldBin, "postgres"): 15, filepath.Join(newBin, "postgres"): 17}
	var asked []string
	run := func(_ context.Context, _ string, _ []string, program string, args ...string) (string, error) {
		asked = append(asked, program)
		major, ok := versions[program]
		if !ok || !slices.Equal(args, []string{"--version"}) {
			return "", fmt.Errorf("unexpected %s %v", program, args)
		}
		return fmt.Sprintf("postgres (PostgreSQL) %d.3 (Debian %d.3-1)\n", major, major), nil
	}
	p := Plan{DataDir: dataDir, OldBinDir: oldBin, NewBinDir: newBin, Run: run}

	from, to, err := p.majors(context.Background())
	if err != nil || from != 15 || to != 17 {
		t.Fatalf("majors() = %d, %d, %v; want 15, 17", from, to, err)
	}
	dir, err := p.newShareDir(context.Background())
	if err != nil || dir != share {
		t.Fatalf("newShareDir() = %q, %v; want %q", dir, err, share)
	}
	if want := 3; len(asked) != want {
		t.Errorf("Run was asked %d times (%v), want %d", len(asked), asked, want)
	}

	failing := func(context.Context, string, []string, string, ...string) (string, error) {
		return "", fmt.Errorf("waitid: no child processes")
	}
	p.Run = failing
	if _, err := p.newShareDir(context.Background()); err == nil {
		t.Error("newShareDir() without the new server's version succeeded; it would look in the wrong share directory")
	}
}
