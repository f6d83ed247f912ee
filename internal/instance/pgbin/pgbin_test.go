package pgbin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fakeBinDir(t *testing.T, dir string, programs ...string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range programs {
		if err := os.WriteFile(filepath.Join(dir, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var notFound = func(string) (string, error) { return "", errors.New("not found") }
var noPgConfig = func() (string, error) { return "", errors.New("pg_config not found") }

func TestFindPrefersPath(t *testing.T) {
	onPath := fakeBinDir(t, filepath.Join(t.TempDir(), "bin"), Required...)
	f := Finder{
		LookPath:       func(string) (string, error) { return filepath.Join(onPath, "postgres"), nil },
		PgConfigBindir: noPgConfig,
		DebianRoot:     t.TempDir(),
	}
	if got, err := f.Find(); err != nil || got != onPath {
		t.Fatalf("Find() = %q, %v; want %q", got, err, onPath)
	}
}

func TestFindFallsBackToNewestDebianVersion(t *testing.T) {
	root := t.TempDir()
	fakeBinDir(t, filepath.Join(root, "15", "bin"), Required...)
	want := fakeBinDir(t, filepath.Join(root, "17", "bin"), Required...)
	fakeBinDir(t, filepath.Join(root, "9", "bin"), Required...)
	f := Finder{LookPath: notFound, PgConfigBindir: noPgConfig, DebianRoot: root}
	if got, err := f.Find(); err != nil || got != want {
		t.Fatalf("Find() = %q, %v; want %q", got, err, want)
	}
}

func TestFindSkipsIncompleteDirectories(t *testing.T) {
	root := t.TempDir()
	clientOnly := fakeBinDir(t, filepath.Join(t.TempDir(), "client"), "postgres") // no initdb etc.
	want := fakeBinDir(t, filepath.Join(root, "15", "bin"), Required...)
	f := Finder{
		LookPath:       func(string) (string, error) { return filepath.Join(clientOnly, "postgres"), nil },
		PgConfigBindir: noPgConfig,
		DebianRoot:     root,
	}
	if got, err := f.Find(); err != nil || got != want {
		t.Fatalf("Find() = %q, %v; want %q", got, err, want)
	}
}

func TestFindNamesEveryPlaceItLooked(t *testing.T) {
	root := t.TempDir()
	f := Finder{LookPath: notFound, PgConfigBindir: noPgConfig, DebianRoot: root}
	_, err := f.Find()
	if err == nil {
		t.Fatal("found PostgreSQL in an empty world")
	}
	for _, want := range []string{"postgres on PATH", "pg_config --bindir", root + "/<version>/bin", "initdb", "--pg-bindir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestExplicitDirMustBeComplete(t *testing.T) {
	dir := fakeBinDir(t, t.TempDir(), "postgres", "initdb")
	_, err := Finder{Dir: dir}.Find()
	if err == nil || !strings.Contains(err.Error(), "missing pg_ctl, pg_basebackup, pg_rewind, pg_controldata") {
		t.Fatalf("Find() error = %v; want it to list the missing programs", err)
	}
}

func TestParseMajorVersion(t *testing.T) {
	for in, want := range map[string]int{
		"postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n": 15,
		"postgres (PostgreSQL) 17.2":                             17,
		"postgres (PostgreSQL) 18beta1":                          18,
	} {
		if got, err := ParseMajorVersion(in); err != nil || got != want {
			t.Errorf("ParseMajorVersion(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := ParseMajorVersion("not postgres"); err == nil {
		t.Error("parsed a version out of nothing")
	}
}
