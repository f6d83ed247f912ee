package instance

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
)

func TestRoleAtStart(t *testing.T) {
	const primary, replica = instanceapi.RolePrimary, instanceapi.RoleReplica
	for _, tc := range []struct {
		name       string
		asked      instanceapi.Role
		standby    bool
		holdsLease bool
		want       instanceapi.Role
	}{
		{"a primary as labelled", primary, false, true, primary},
		{"a primary labelled so without the Lease (fenced later)", primary, false, false, primary},
		{"a new primary read a stale replica label", replica, false, true, primary},
		{"a former primary asked to be a replica", replica, false, false, replica},
		{"a replica labelled primary waits for promote", primary, true, true, replica},
		{"a replica as labelled", replica, true, false, replica},
	} {
		if got := roleAtStart(tc.asked, tc.standby, tc.holdsLease); got != tc.want {
			t.Errorf("%s: roleAtStart(%s, standby=%v, holds=%v) = %s, want %s", tc.name, tc.asked, tc.standby, tc.holdsLease, got, tc.want)
		}
	}
}

// TestRoomForCopy: a reclone needs the data directory's size again and a
// tenth more; short of that it is refused with the figures.
func TestRoomForCopy(t *testing.T) {
	const mib = 1 << 20
	if err := roomForCopy(100*mib, 111*mib); err != nil {
		t.Errorf("111 MiB free for a 100 MiB data directory: %v", err)
	}
	err := roomForCopy(100*mib, 109*mib)
	if err == nil || !strings.Contains(err.Error(), "109 MiB free, about 110 MiB needed") {
		t.Errorf("109 MiB free for a 100 MiB data directory: %v, want it refused with the figures", err)
	}
}

// TestRemoveDiscarded: the data directories earlier reclones set aside go
// (named by time, or by the older fixed name), the data directory and
// anything else beside it stay.
func TestRemoveDiscarded(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "pgdata")
	keep := []string{data, data + ".tusk-bootstrap", filepath.Join(dir, "lost+found")}
	gone := []string{data + ".discarded", discardedPath(data, time.Date(2026, 11, 24, 1, 2, 3, 0, time.UTC)), discardedPath(data, time.Now())}
	for _, d := range append(slices.Clone(keep), gone...) {
		if err := os.MkdirAll(filepath.Join(d, "base"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if got := filepath.Base(gone[1]); got != "pgdata.discarded-20261124T010203Z" {
		t.Errorf("discardedPath named %s", got)
	}
	if err := removeDiscarded(data); err != nil {
		t.Fatal(err)
	}
	for _, d := range keep {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v, want it kept", d, err)
		}
	}
	for _, d := range gone {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want it removed", d, err)
		}
	}
}
