package instance

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"tusk.dev/tusk/internal/instance/pgupgrade"
	"tusk.dev/tusk/internal/instanceapi"
)

// dataDirOf writes a data directory of major (only its PG_VERSION) and,
// when st is not nil, an upgrade state beside it.
func dataDirOf(t *testing.T, major string, st *pgupgrade.State) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pgdata")
	if major != "" {
		if err := os.MkdirAll(filepath.Join(dir, "global"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "PG_VERSION"), []byte(major+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if st != nil {
		data, _ := json.Marshal(st)
		if err := os.WriteFile(dir+".upgrade.json", data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Without an upgrade asked for, the manager starts only a data directory
// of its own major (or none), and says what to do otherwise.
func TestResolveUpgradeRefusesAnotherMajor(t *testing.T) {
	for _, tc := range []struct {
		name, major string
		st          *pgupgrade.State
		want        string // "" means it goes on
	}{
		{"no data directory", "", nil, ""},
		{"the image's major", "17", nil, ""},
		{"an older major", "15", nil, "the data directory is PostgreSQL 15 and this image is 17: a major upgrade (pg_upgrade) is needed"},
		{"an upgrade between others", "15", &pgupgrade.State{From: 15, To: 16, Step: pgupgrade.StepChecked},
			"an upgrade from PostgreSQL 15 to 16 is unfinished on this volume; run an image of one of them, not 17"},
		{"an unfinished upgrade to this major", "17", &pgupgrade.State{From: 15, To: 17, Step: pgupgrade.StepSwapped},
			"an upgrade to PostgreSQL 17 is unfinished on this volume and the pod has no old server to finish it with"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Manager{opts: Options{DataDir: dataDirOf(t, tc.major, tc.st), MajorVersion: 17}, log: logr.Discard()}
			err := m.resolveUpgrade(context.Background())
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// A data directory of a newer major (an upgrade committed, then the old
// image started, as a rollback the operator began without hearing of the
// commit) is refused, and the manager stays up to say so: the status
// names the data's major, which the operator goes forward to.
func TestResolveUpgradeReportsNewerData(t *testing.T) {
	m := &Manager{opts: Options{DataDir: dataDirOf(t, "18", nil), MajorVersion: 17}, log: logr.Discard()}
	if err := m.resolveUpgrade(context.Background()); !errors.Is(err, errUpgradeFailed) {
		t.Fatalf("got %v, want errUpgradeFailed (wait with postgres stopped)", err)
	}
	st := m.snapshot()
	if st.life.Phase() != instanceapi.PhaseUpgradeFailed || st.upgrade == nil || st.upgrade.NewerData != 18 || st.upgrade.Failed ||
		!strings.Contains(st.lastError, "the data directory is PostgreSQL 18, newer than this image's 17: a major version never goes back") {
		t.Errorf("phase %s, upgrade %+v, last error %q: want UpgradeFailed with newerData 18 and the refusal", st.life.Phase(), st.upgrade, st.lastError)
	}
}

// Back on the old major's image, an unfinished upgrade is undone; on the
// new one, a commit that was cut short is finished. Neither needs the old
// server's programs.
func TestResolveUpgradeFinishesWhatWasStarted(t *testing.T) {
	t.Run("rolled back on the old image", func(t *testing.T) {
		dir := dataDirOf(t, "15", &pgupgrade.State{From: 15, To: 17, Step: pgupgrade.StepUpgrading})
		if err := os.WriteFile(filepath.Join(dir, "global", "pg_control.old"), []byte("control"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir+".upgrade", 0o700); err != nil {
			t.Fatal(err)
		}
		m := &Manager{opts: Options{DataDir: dir, MajorVersion: 15}, log: logr.Discard()}
		if err := m.resolveUpgrade(context.Background()); err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]bool{filepath.Join(dir, "global", "pg_control"): true, dir + ".upgrade": false, dir + ".upgrade.json": false} {
			if _, err := os.Stat(path); (err == nil) != want {
				t.Errorf("%s exists: %v, want %v", path, err == nil, want)
			}
		}
	})
	t.Run("commit finished on the new image", func(t *testing.T) {
		dir := dataDirOf(t, "17", &pgupgrade.State{From: 15, To: 17, Step: pgupgrade.StepCommitted})
		if err := os.MkdirAll(dir+".old", 0o700); err != nil {
			t.Fatal(err)
		}
		m := &Manager{opts: Options{DataDir: dir, MajorVersion: 17}, log: logr.Discard()}
		if err := m.resolveUpgrade(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, gone := range []string{dir + ".old", dir + ".upgrade.json"} {
			if _, err := os.Stat(gone); !os.IsNotExist(err) {
				t.Errorf("%s is left (%v)", gone, err)
			}
		}
	})
	t.Run("a committed upgrade is not undone", func(t *testing.T) {
		dir := dataDirOf(t, "17", &pgupgrade.State{From: 15, To: 17, Step: pgupgrade.StepCommitted})
		m := &Manager{opts: Options{DataDir: dir, MajorVersion: 15}, log: logr.Discard()}
		err := m.resolveUpgrade(context.Background())
		if err == nil || !strings.Contains(err.Error(), "restore the backup taken before it") {
			t.Fatalf("got %v", err)
		}
	})
}

// A failed attempt recorded beside the data directory is reported, not run
// again under the same name.
func TestFailedUpgradeAttemptIsNotRunAgain(t *testing.T) {
	dir := dataDirOf(t, "15", nil)
	failed := instanceapi.UpgradeStatus{Attempt: "17-1", From: 15, To: 17, Failed: true, RolledBack: true, Reason: "the pre-checks: prepared transactions are open"}
	data, _ := json.Marshal(failed)
	if err := os.WriteFile(failedUpgradePath(dir), data, 0o600); err != nil {
		t.Fatal(err)
	}
	m := &Manager{opts: Options{DataDir: dir, MajorVersion: 17, Upgrade: &UpgradeOptions{OldCopy: t.TempDir(), Attempt: "17-1"}}, log: logr.Discard()}
	if err := m.resolveUpgrade(context.Background()); !errors.Is(err, errUpgradeFailed) {
		t.Fatalf("got %v, want errUpgradeFailed", err)
	}
	st := m.snapshot()
	if st.life.Phase() != instanceapi.PhaseUpgradeFailed || st.upgrade == nil || st.upgrade.Reason != failed.Reason {
		t.Errorf("status: phase %s, upgrade %+v", st.life.Phase(), st.upgrade)
	}
	// Another attempt runs (and here fails at once: no old server copied).
	m.opts.Upgrade.Attempt = "17-2"
	if err := m.resolveUpgrade(context.Background()); !errors.Is(err, errUpgradeFailed) {
		t.Fatalf("got %v", err)
	}
	if st := m.snapshot(); st.upgrade.Attempt != "17-2" || !strings.Contains(st.upgrade.Reason, "finding the old server") {
		t.Errorf("the new attempt reports %+v", st.upgrade)
	}
}

// A data directory another user wrote is named as such, and in an upgrade
// reported as its failure (the operator then rolls back).
func TestDataDirOfAnotherUser(t *testing.T) {
	dir := dataDirOf(t, "15", nil)
	// Root (as CI runs) reads every directory: fail the listing as
	// another user's directory fails.
	readDataDir = func(string) ([]os.DirEntry, error) {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: fs.ErrPermission}
	}
	defer func() { readDataDir = os.ReadDir }()
	m := &Manager{opts: Options{DataDir: dir, MajorVersion: 17}, log: logr.Discard()}
	if err := m.resolveUpgrade(context.Background()); err == nil || !strings.Contains(err.Error(), "belongs to another user") {
		t.Fatalf("got %v", err)
	}
	m.opts.Upgrade = &UpgradeOptions{Attempt: "17-1"}
	if err := m.resolveUpgrade(context.Background()); !errors.Is(err, errUpgradeFailed) {
		t.Fatalf("got %v", err)
	}
	if st := m.snapshot(); !strings.Contains(st.upgrade.Reason, "set spec.postgresUID") || !st.upgrade.RolledBack {
		t.Errorf("reported %+v", st.upgrade)
	}
}
