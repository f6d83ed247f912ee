// Package pgupgrade upgrades a data directory to a newer PostgreSQL major
// version with pg_upgrade, in steps that can always be undone until the new
// server has been started and committed to, and carries the old major's
// server programs into the new image for it.
package pgupgrade

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"tusk.dev/tusk/internal/instance/pgbin"
)

// OldBinaries is what CopyServer wrote: the old major's programs, runnable
// from another image.
type OldBinaries struct {
	// Major is the PostgreSQL major version of the copied server.
	Major int `json:"major"`
	// BinDir holds one wrapper per program, for pg_upgrade's --old-bindir.
	BinDir string `json:"binDir"`
	// Libraries are the shared libraries copied with them, by soname.
	Libraries []string `json:"libraries"`
}

// manifestName is the file CopyServer writes last, so its presence means
// the copy is complete.
const manifestName = "manifest.json"

// glibcLibraries belong to the C library itself. They are never copied: the
// old programs run on the new image's C library, which is newer (the
// images follow Debian's suites forward) and keeps every older symbol
// version, whereas the old image's loader and C library cannot be mixed
// with the new image's processes.
var glibcLibraries = regexp.MustCompile(`^(ld-linux.*|ld64.*|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libanl|libutil|libBrokenLocale|libnss_[a-z]+|libthread_db)\.so\.[0-9.]+$`)

// skippedServerFiles are parts of the server that pg_upgrade never loads:
// the JIT provider (which alone would pull in all of LLVM) and its bitcode.
var skippedServerFiles = regexp.MustCompile(`^(llvmjit.*\.so|bitcode)$`)

// CopyServer copies the PostgreSQL server in binDir (its programs, its
// libraries and extensions, its share directory) and every shared library
// they need beyond the C library into dest, and writes a wrapper per
// program into dest/bin that runs it with those libraries. It runs in the
// old image, into a volume the new image's container mounts at the same
// path. The server keeps its own relative layout under dest/root, so it
// finds its share and library directories as it would at home.
func CopyServer(binDir, dest string) (OldBinaries, error) {
	major, err := pgbin.MajorVersion(binDir)
	if err != nil {
		return OldBinaries{}, err
	}
	binDir, err = filepath.EvalSymlinks(binDir)
	if err != nil {
		return OldBinaries{}, err
	}
	_ = os.Remove(filepath.Join(dest, manifestName))
	root := filepath.Join(dest, "root")
	var elfFiles []string
	for _, dir := range serverDirs(binDir, major) {
		found, err := copyTree(dir, filepath.Join(root, dir))
		if err != nil {
			return OldBinaries{}, fmt.Errorf("while copying %s: %w", dir, err)
		}
		elfFiles = append(elfFiles, found...)
	}
	libs, err := newLibraryResolver().closure(elfFiles)
	if err != nil {
		return OldBinaries{}, err
	}
	libDir := filepath.Join(dest, "lib")
	if err := os.MkdirAll(libDir, 0o755); err != nil { //nolint:gosec // programs, read by the postgres user
		return OldBinaries{}, err
	}
	out := OldBinaries{Major: major, BinDir: filepath.Join(dest, "bin")}
	for soname, path := range libs {
		if err := copyFile(path, filepath.Join(libDir, soname), 0o644); err != nil {
			return OldBinaries{}, err
		}
		out.Libraries = append(out.Libraries, soname)
	}
	slices.Sort(out.Libraries)
	if err := writeWrappers(filepath.Join(root, binDir), out.BinDir, libDir); err != nil {
		return OldBinaries{}, err
	}
	return out, writeManifest(dest, out)
}

// ReadOldBinaries reads what a complete CopyServer into dest wrote.
func ReadOldBinaries(dest string) (OldBinaries, error) {
	data, err := os.ReadFile(filepath.Join(dest, manifestName)) //nolint:gosec // the operator's volume
	if err != nil {
		return OldBinaries{}, fmt.Errorf("the old server's programs are not in %s (the copy did not finish): %w", dest, err)
	}
	var b OldBinaries
	if err := json.Unmarshal(data, &b); err != nil {
		return OldBinaries{}, fmt.Errorf("while reading %s: %w", filepath.Join(dest, manifestName), err)
	}
	return b, nil
}

func writeManifest(dest string, b OldBinaries) error {
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dest, manifestName+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil { //nolint:gosec // not secret
		return err
	}
	return os.Rename(tmp, filepath.Join(dest, manifestName))
}

// serverDirs are the directories of the server whose programs are in
// binDir: Debian's layout (<prefix>/lib/postgresql/<major>/{bin,lib} and
// <prefix>/share/postgresql/<major>) or a plain prefix (bin, lib, share).
func serverDirs(binDir string, major int) []string {
	base := filepath.Dir(binDir)
	candidates := []string{binDir, filepath.Join(base, "lib"), filepath.Join(base, "share")}
	if prefix, ok := strings.CutSuffix(base, fmt.Sprintf("/lib/postgresql/%d", major)); ok {
		candidates = append(candidates, filepath.Join(prefix, "share", "postgresql", fmt.Sprint(major)))
	}
	var dirs []string
	for _, d := range candidates {
		if info, err := os.Stat(d); err == nil && info.IsDir() {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// copyTree copies the regular files and symbolic links under src to dst,
// skipping what pg_upgrade never loads, and returns the ELF files copied
// (at their source paths, where their libraries are resolved).
func copyTree(src, dst string) ([]string, error) {
	var elfFiles []string
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if skippedServerFiles.MatchString(d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755) //nolint:gosec // programs, read by the postgres user
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			_ = os.Remove(target)
			// The walk reads the server's own install in the image it
			// runs in, and writes into a fresh volume: nothing to race.
			return os.Symlink(link, target) //nolint:gosec // see above
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			if isELF(path) {
				elfFiles = append(elfFiles, path)
			}
			return copyFile(path, target, info.Mode().Perm())
		}
		return nil
	})
	return elfFiles, err
}

func isELF(path string) bool {
	f, err := os.Open(path) //nolint:gosec // the server's own files
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	magic := make([]byte, 4)
	_, err = io.ReadFull(f, magic)
	return err == nil && string(magic) == elf.ELFMAG
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src) //nolint:gosec // the server's own files
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode) //nolint:gosec // copies keep their mode
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// writeWrappers writes into binDir one shell script per program in
// realBinDir that runs it with the copied libraries. pg_ctl, run through
// its wrapper, starts the real postgres beside it, which inherits the
// library path; the new image's own programs never see it.
// LD_BIND_NOW makes a missing symbol fail at once (at pg_upgrade's version
// check) rather than in the middle of an upgrade.
func writeWrappers(realBinDir, binDir, libDir string) error {
	if err := os.MkdirAll(binDir, 0o755); err != nil { //nolint:gosec // programs
		return err
	}
	entries, err := os.ReadDir(realBinDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		script := fmt.Sprintf("#!/bin/sh\n# Written by Tusk: the old PostgreSQL server's %s, run with its own libraries for pg_upgrade.\n"+
			"LD_LIBRARY_PATH=%s LD_BIND_NOW=1 exec %s \"$@\"\n", e.Name(), shellQuote(libDir), shellQuote(filepath.Join(realBinDir, e.Name())))
		if err := os.WriteFile(filepath.Join(binDir, e.Name()), []byte(script), 0o755); err != nil { //nolint:gosec // a program
			return err
		}
	}
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// libraryResolver finds shared libraries as the dynamic loader would:
// the file's RUNPATH (or RPATH), then the directories of ld.so.conf, then
// the default ones.
type libraryResolver struct{ searchDirs []string }

func newLibraryResolver() libraryResolver {
	dirs := readLdSoConf("/etc/ld.so.conf", 0)
	dirs = append(dirs, "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
		"/lib64", "/usr/lib64", "/lib", "/usr/lib")
	return libraryResolver{searchDirs: dirs}
}

// readLdSoConf lists the directories of an ld.so.conf, following its
// include lines.
func readLdSoConf(path string, depth int) []string {
	f, err := os.Open(path) //nolint:gosec // the system's loader configuration
	if err != nil || depth > 4 {
		return nil
	}
	defer func() { _ = f.Close() }()
	var dirs []string
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line, _, _ := strings.Cut(scanner.Text(), "#")
		line = strings.TrimSpace(line)
		if pattern, ok := strings.CutPrefix(line, "include "); ok {
			matches, _ := filepath.Glob(strings.TrimSpace(pattern))
			for _, m := range matches {
				dirs = append(dirs, readLdSoConf(m, depth+1)...)
			}
		} else if line != "" {
			dirs = append(dirs, line)
		}
	}
	return dirs
}

// closure returns, by soname, every library the files need directly or
// through other libraries, except the C library's own.
func (r libraryResolver) closure(files []string) (map[string]string, error) {
	found := map[string]string{}
	queue := slices.Clone(files)
	var missing []string
	for len(queue) > 0 {
		file := queue[0]
		queue = queue[1:]
		needed, runpath, err := dynamicNeeds(file)
		if err != nil {
			return nil, fmt.Errorf("while reading the libraries %s needs: %w", file, err)
		}
		for _, soname := range needed {
			if _, seen := found[soname]; seen || glibcLibraries.MatchString(soname) {
				continue
			}
			path := r.find(soname, runpath, filepath.Dir(file))
			if path == "" {
				missing = append(missing, soname+" (for "+file+")")
				continue
			}
			found[soname] = path
			queue = append(queue, path)
		}
	}
	if len(missing) > 0 {
		return nil, errors.New("shared libraries not found: " + strings.Join(missing, ", "))
	}
	return found, nil
}

func (r libraryResolver) find(soname string, runpath []string, origin string) string {
	for _, dir := range append(slices.Clone(runpath), r.searchDirs...) {
		dir = strings.ReplaceAll(dir, "$ORIGIN", origin)
		path := filepath.Join(dir, soname)
		if resolved, err := filepath.EvalSymlinks(path); err == nil {
			if info, err := os.Stat(resolved); err == nil && info.Mode().IsRegular() {
				return resolved
			}
		}
	}
	return ""
}

func dynamicNeeds(path string) (needed, runpath []string, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = f.Close() }()
	needed, err = f.ImportedLibraries()
	if err != nil {
		return nil, nil, err
	}
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		values, _ := f.DynString(tag)
		for _, v := range values {
			runpath = append(runpath, filepath.SplitList(v)...)
		}
	}
	return needed, runpath, nil
}
