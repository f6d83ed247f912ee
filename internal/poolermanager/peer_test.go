package poolermanager

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The peer file includes the mounted configuration by its absolute path
// and sets peer_id after it, so the id is the last word on it.
func TestWritePeerConfig(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	path, err := writePeerConfig(dir, "pgbouncer.ini", 3)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	include := "%include " + filepath.Join(dir, "pgbouncer.ini") + "\n"
	if got := string(b); path != filepath.Join(dir, PeerConfigName) || !strings.Contains(got, include) ||
		!strings.HasSuffix(got, "\npeer_id = 3\n") || strings.Index(got, include) > strings.Index(got, "peer_id =") {
		t.Errorf("%s:\n%s\nwant %q, then peer_id = 3 last", path, got, include)
	}
}
