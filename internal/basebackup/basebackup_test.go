package basebackup

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tusk.dev/tusk/internal/postgres"
)

// crc is a file's CRC-32C as PostgreSQL writes it in a manifest.
func crc(content string) string {
	v := crc32.Checksum([]byte(content), crc32.MakeTable(crc32.Castagnoli))
	return hex.EncodeToString([]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)})
}

// manifestText writes a manifest as PostgreSQL 13 to 16 do, with its
// checksum.
func manifestText(files map[string]string, sizes map[string]int64) string {
	return manifestTextOf("{ \"PostgreSQL-Backup-Manifest-Version\": 1,\n", files, sizes)
}

// manifestTextOf writes a manifest with the given first lines.
func manifestTextOf(head string, files map[string]string, sizes map[string]int64) string {
	var b strings.Builder
	b.WriteString(head)
	b.WriteString("\"Files\": [\n")
	first := true
	for _, name := range []string{"PG_VERSION", "global/pg_control", "base/1/1259"} {
		content, ok := files[name]
		if !ok {
			continue
		}
		size := int64(len(content))
		if s, ok := sizes[name]; ok {
			size = s
		}
		if !first {
			b.WriteString(",\n")
		}
		first = false
		fmt.Fprintf(&b, `{ "Path": %q, "Size": %d, "Last-Modified": "2026-11-23 01:58:23 GMT", "Checksum-Algorithm": "CRC32C", "Checksum": %q }`,
			name, size, crc(content))
	}
	b.WriteString("\n],\n\"WAL-Ranges\": [\n{ \"Timeline\": 1, \"Start-LSN\": \"0/2000028\", \"End-LSN\": \"0/2000100\" }\n],\n")
	sum := sha256.Sum256([]byte(b.String()))
	fmt.Fprintf(&b, "\"Manifest-Checksum\": \"%s\"}\n", hex.EncodeToString(sum[:]))
	return b.String()
}

var sampleFiles = map[string]string{"PG_VERSION": "15\n", "global/pg_control": "control", "base/1/1259": "a relation"}

func TestCRC32CIsWrittenAsPostgreSQLDoes(t *testing.T) {
	// From a manifest PostgreSQL 15 wrote for a PG_VERSION of "15\n".
	h, err := newHash("CRC32C")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = h.Write([]byte("15\n"))
	if got := hex.EncodeToString(h.Sum(nil)); got != "8a744722" {
		t.Errorf("CRC32C of \"15\\n\" is %s, PostgreSQL writes 8a744722", got)
	}
}

func TestParseManifest(t *testing.T) {
	good := manifestText(sampleFiles, nil)
	m, err := ParseManifest([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	begin, end, tli := m.span()
	if len(m.Files) != 3 || begin != 0x2000028 || end != 0x2000100 || tli != 1 {
		t.Errorf("parsed %d files, WAL %s..%s on timeline %d", len(m.Files), begin, end, tli)
	}
	cases := map[string]string{
		"changed content":  strings.Replace(good, `"Size": 3`, `"Size": 4`, 1),
		"no checksum line": strings.Replace(good, "\n\"Manifest-Checksum\"", "\"Manifest-Checksum\"", 1),
		"other version":    manifestTextOf("{ \"PostgreSQL-Backup-Manifest-Version\": 3,\n", sampleFiles, nil),
		"not JSON":         good[:len(good)/2],
	}
	for name, text := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseManifest([]byte(text)); !errors.Is(err, ErrVerification) {
				t.Errorf("got %v, want a verification error", err)
			}
		})
	}
}

// PostgreSQL 17 writes version 2, which adds the system identifier.
func TestManifestVersion2(t *testing.T) {
	text := manifestTextOf("{ \"PostgreSQL-Backup-Manifest-Version\": 2,\n\"System-Identifier\": 7585214789013845723,\n", sampleFiles, nil)
	m, err := ParseManifest([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != 2 || m.SystemIdentifier != 7585214789013845723 || len(m.Files) != 3 {
		t.Errorf("parsed version %d, system %d, %d files", m.Version, m.SystemIdentifier, len(m.Files))
	}
}

func TestSpanOfSeveralTimelines(t *testing.T) {
	// PostgreSQL lists the newest timeline first.
	m := Manifest{WALRanges: []WALRange{{Timeline: 2, Start: 0x3000000, End: 0x3000100}, {Timeline: 1, Start: 0x2000028, End: 0x3000000}}}
	begin, end, tli := m.span()
	if begin != 0x2000028 || end != 0x3000100 || tli != 1 {
		t.Errorf("span %s..%s timeline %d; want 0/2000028..0/3000100 on 1", begin, end, tli)
	}
}

type entry struct {
	name, content string
	typ           byte
}

func tarOf(t *testing.T, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: 0o600, Size: int64(len(e.content)), Typeflag: e.typ}
		if e.typ == tar.TypeDir || e.typ == tar.TypeSymlink {
			hdr.Size, hdr.Linkname = 0, "/elsewhere"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCheckTar(t *testing.T) {
	manifest := entry{ManifestName, manifestText(sampleFiles, nil), tar.TypeReg}
	files := func(change func(map[string]string)) []entry {
		f := map[string]string{}
		for k, v := range sampleFiles {
			f[k] = v
		}
		change(f)
		es := []entry{{"global/", "", tar.TypeDir}, {"base/1/", "", tar.TypeDir}}
		for _, name := range []string{"PG_VERSION", "global/pg_control", "base/1/1259", "extra"} {
			if c, ok := f[name]; ok {
				es = append(es, entry{name, c, tar.TypeReg})
			}
		}
		return es
	}
	same := func(map[string]string) {}
	cases := []struct {
		name    string
		entries []entry
		says    string
	}{
		{"complete", append(files(same), manifest), ""},
		{"content changed, same size", append(files(func(f map[string]string) { f["PG_VERSION"] = "16\n" }), manifest),
			"PG_VERSION has checksum " + crc("16\n") + ", the manifest says " + crc("15\n")},
		{"file truncated", append(files(func(f map[string]string) { f["base/1/1259"] = "a" }), manifest),
			"base/1/1259 is 1 bytes, the manifest says 10"},
		{"file missing", append(files(func(f map[string]string) { delete(f, "global/pg_control") }), manifest),
			"global/pg_control is missing"},
		{"file not in the manifest", append(files(func(f map[string]string) { f["extra"] = "x" }), manifest),
			"extra is not in the manifest"},
		{"no manifest", files(same), "has no backup_manifest"},
		{"tablespace link", append(files(same), entry{"pg_tblspc/16384", "", tar.TypeSymlink}, manifest),
			"tablespaces other than the default are not supported"},
		{"path outside", append(files(same), entry{"../../etc/passwd", "x", tar.TypeReg}, manifest), "outside the data directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := checkTar(bytes.NewReader(tarOf(t, tc.entries)), "CRC32C", discard{})
			switch {
			case tc.says == "" && (err != nil || len(m.Files) != 3):
				t.Errorf("got %v, want the manifest's 3 files", err)
			case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
				t.Errorf("got %v, want an error saying %q", err, tc.says)
			}
		})
	}
}

func TestRestoredFilesAreWrittenUnderTheRoot(t *testing.T) {
	root := t.TempDir()
	es := []entry{{"global/", "", tar.TypeDir}, {"PG_VERSION", "15\n", tar.TypeReg}, {"global/pg_control", "control", tar.TypeReg},
		{"base/1/1259", "a relation", tar.TypeReg}, {ManifestName, manifestText(sampleFiles, nil), tar.TypeReg}}
	if _, err := checkTar(bytes.NewReader(tarOf(t, es)), "CRC32C", dirWriter{root: root}); err != nil {
		t.Fatal(err)
	}
	for name, want := range sampleFiles {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(root, ManifestName)); err != nil {
		t.Errorf("the manifest was not kept: %v", err)
	}
}

func TestRecoverySettings(t *testing.T) {
	at := time.Date(2026, 11, 23, 3, 4, 5, 123456000, time.FixedZone("CET", 3600))
	lsn := postgres.LSN(0x1_0000_0060)
	cmd := `/tusk bin/tusk instance wal-restore --config 'it''s' %f %p \x`
	cases := []struct {
		name   string
		target Target
		want   string
	}{
		{"end of archive", Target{}, ""},
		{"time", Target{Time: &at}, "recovery_target_time = '2026-11-23 02:04:05.123456+00'\nrecovery_target_action = 'promote'\n"},
		{"lsn", Target{LSN: &lsn}, "recovery_target_lsn = '1/60'\nrecovery_target_action = 'promote'\n"},
		{"name", Target{Name: "before 'upgrade'"}, "recovery_target_name = 'before ''upgrade'''\nrecovery_target_action = 'promote'\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := "\n# Recovery of backup b1, added by tusk instance restore.\n" +
				`restore_command = '/tusk bin/tusk instance wal-restore --config ''it''''s'' %f %p \\x'` + "\n" +
				"recovery_target_timeline = 'latest'\n" + tc.want
			if got := RecoverySettings("b1", cmd, tc.target); got != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestRestoreCommand(t *testing.T) {
	cases := map[[2]string]string{
		{"/tusk-bin/tusk", "/run/tusk/wal-archive.json"}: "/tusk-bin/tusk instance wal-restore --config /run/tusk/wal-archive.json %f %p",
		{"/my bin/tusk", "/etc/it's 100%.json"}:          `'/my bin/tusk' instance wal-restore --config '/etc/it'\''s 100%%.json' %f %p`,
	}
	for in, want := range cases {
		if got := RestoreCommand(in[0], in[1]); got != want {
			t.Errorf("RestoreCommand(%q, %q) = %s, want %s", in[0], in[1], got, want)
		}
	}
}

func TestTargetValidate(t *testing.T) {
	end := time.Date(2026, 11, 23, 2, 0, 0, 0, time.UTC)
	rec := &Record{Name: "b1", EndTime: end, EndLSN: 0x3000100}
	before, after := end.Add(-time.Millisecond), end.Add(time.Millisecond)
	early, late := postgres.LSN(0x3000000), postgres.LSN(0x3000100)
	cases := []struct {
		name   string
		target Target
		says   string
	}{
		{"none", Target{}, ""},
		{"time after the end", Target{Time: &after}, ""},
		{"time before the end", Target{Time: &before}, `recovery target time 2026-11-23T01:59:59.999Z is before backup "b1" ended (2026-11-23T02:00:00Z)`},
		{"LSN at the end", Target{LSN: &late}, ""},
		{"LSN before the end", Target{LSN: &early}, `recovery target LSN 0/3000000 is before backup "b1" ended (LSN 0/3000100)`},
		{"name", Target{Name: "before-upgrade"}, ""},
		{"name too long", Target{Name: strings.Repeat("x", 64)}, "at most 63 bytes"},
		{"two targets", Target{Time: &after, Name: "x"}, "at most one recovery target"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.target.validate(rec)
			if (tc.says == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.says)) {
				t.Errorf("got %v, want %q", err, tc.says)
			}
		})
	}
}

func TestValidateName(t *testing.T) {
	for name, ok := range map[string]bool{
		"orders-20261123": true, "a": true, "b.1": true,
		"": false, "..": false, "a/b": false, "../x": false, "Upper": false, "-a": false, "a-": false, strings.Repeat("a", 254): false, strings.Repeat("a", 253): true,
	} {
		if err := ValidateName(name); (err == nil) != ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestRefuseNonEmpty(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(filepath.Join(full, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, says := range map[string]string{
		filepath.Join(dir, "missing"): "", dir + "/full/sub": "", full: "it is not empty (it holds sub)", file: "not a directory", "": "no target directory",
	} {
		err := refuseNonEmpty(path)
		if (says == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), says)) {
			t.Errorf("refuseNonEmpty(%q) = %v, want %q", path, err, says)
		}
	}
}
