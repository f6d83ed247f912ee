// Package pgbin finds the PostgreSQL server programs of whatever image the
// instance manager runs in. Tusk ships no PostgreSQL of its own.
package pgbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Required are the programs the instance manager runs.
var Required = []string{"postgres", "initdb", "pg_ctl", "pg_basebackup", "pg_rewind", "pg_controldata"}

// Finder says where to look. The zero value looks on PATH, then asks
// pg_config, then tries the Debian layout.
type Finder struct {
	// Dir, when set, is the only place looked at.
	Dir string
	// LookPath finds a program on PATH; exec.LookPath when nil.
	LookPath func(string) (string, error)
	// PgConfigBindir runs `pg_config --bindir`; the real one when nil.
	PgConfigBindir func() (string, error)
	// DebianRoot is the parent of the Debian per-version directories;
	// /usr/lib/postgresql when empty.
	DebianRoot string
}

// Find returns the directory holding every Required program, or an error
// that names each place it looked.
func (f Finder) Find() (string, error) {
	if f.Dir != "" {
		if err := complete(f.Dir); err != nil {
			return "", fmt.Errorf("the PostgreSQL bin directory %s given to Tusk is not usable: %w", f.Dir, err)
		}
		return f.Dir, nil
	}
	var tried []string
	for _, candidate := range f.candidates() {
		if candidate.dir == "" {
			tried = append(tried, candidate.what)
			continue
		}
		if err := complete(candidate.dir); err != nil {
			tried = append(tried, fmt.Sprintf("%s (%s: %v)", candidate.what, candidate.dir, err))
			continue
		}
		return candidate.dir, nil
	}
	return "", fmt.Errorf("no PostgreSQL server programs (%s) found; looked at %s; "+
		"use an image with the PostgreSQL server installed or set --pg-bindir",
		strings.Join(Required, ", "), strings.Join(tried, "; "))
}

type candidate struct{ what, dir string }

func (f Finder) candidates() []candidate {
	lookPath, bindir, root := f.LookPath, f.PgConfigBindir, f.DebianRoot
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	if bindir == nil {
		bindir = pgConfigBindir
	}
	if root == "" {
		root = "/usr/lib/postgresql"
	}
	var out []candidate
	if p, err := lookPath("postgres"); err == nil {
		out = append(out, candidate{"postgres on PATH", filepath.Dir(p)})
	} else {
		out = append(out, candidate{what: "postgres on PATH (not there)"})
	}
	if d, err := bindir(); err == nil {
		out = append(out, candidate{"pg_config --bindir", d})
	} else {
		out = append(out, candidate{what: "pg_config --bindir (" + err.Error() + ")"})
	}
	for _, d := range debianBinDirs(root) {
		out = append(out, candidate{"the Debian layout", d})
	}
	if len(debianBinDirs(root)) == 0 {
		out = append(out, candidate{what: root + "/<version>/bin (none)"})
	}
	return out
}

func pgConfigBindir() (string, error) {
	out, err := exec.Command("pg_config", "--bindir").Output() //nolint:forbidigo // before the manager's reaper runs (Find)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// debianBinDirs lists root/<major>/bin, newest major first.
func debianBinDirs(root string) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var majors []int
	for _, e := range entries {
		if v, err := strconv.Atoi(e.Name()); err == nil {
			majors = append(majors, v)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(majors)))
	dirs := make([]string, 0, len(majors))
	for _, v := range majors {
		dirs = append(dirs, filepath.Join(root, strconv.Itoa(v), "bin"))
	}
	return dirs
}

// complete checks that dir holds every Required program, executable.
func complete(dir string) error {
	var missing []string
	for _, name := range Required {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return errors.New("missing " + strings.Join(missing, ", "))
	}
	return nil
}

// MajorVersion runs `postgres --version` in binDir and returns the major
// version, such as 15 for "postgres (PostgreSQL) 15.18 (Debian ...)".
//
// It starts a child it waits for itself: only for a process that does not
// reap orphans. Once the instance manager's reaper runs (PID 1), a child
// started this way can be reaped before it is waited for ("waitid: no
// child processes"); the manager runs `postgres --version` through its
// reaper and reads the answer with ParseMajorVersion.
func MajorVersion(binDir string) (int, error) {
	out, err := exec.Command(filepath.Join(binDir, "postgres"), "--version").Output() //nolint:gosec,forbidigo // the server found by Find; not for the manager once its reaper runs
	if err != nil {
		return 0, fmt.Errorf("while asking postgres for its version: %w", err)
	}
	return ParseMajorVersion(string(out))
}

var versionPattern = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

// ParseMajorVersion reads the major version from the output of
// `postgres --version`.
func ParseMajorVersion(s string) (int, error) {
	m := versionPattern.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("cannot read a PostgreSQL version from %q", strings.TrimSpace(s))
	}
	return strconv.Atoi(m[1])
}
