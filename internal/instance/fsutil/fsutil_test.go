package fsutil

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteFileAtomically: the directory is made, the file holds the new
// content with mode 0600, and no temporary file stays.
func TestWriteFileAtomically(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "state.json")
	for _, content := range []string{"one", "two"} {
		if err := WriteFileAtomically(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		if data, err := os.ReadFile(path); err != nil || string(data) != content {
			t.Fatalf("file holds %q (%v), want %q", data, err, content)
		}
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want 0600", info.Mode().Perm(), err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}
