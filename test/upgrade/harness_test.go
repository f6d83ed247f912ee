//go:build integration

// Package upgrade_test runs major upgrades the way a pod does: `tusk
// instance upgrade` and pg_upgrade inside the new major's image, the old
// major's server carried in from its own image by `tusk instance
// copy-binaries`. The images are Tusk's PostgreSQL root filesystems (15 from
// Debian bookworm, 17 from trixie, 18 from forky): different suites with
// different shared libraries, as in a cluster. Each runs in a chroot with a
// mount namespace of its own, as the postgres user of that image.
package upgrade_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tuskBinary is the static tusk binary the tests copy into every root.
var tuskBinary string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tusk-upgrade-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	tuskBinary = filepath.Join(dir, "tusk")
	build := exec.Command("go", "build", "-trimpath", "-o", tuskBinary, "tusk.dev/tusk/cmd/tusk")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building tusk: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// image is one PostgreSQL major's root filesystem, unpacked.
type image struct {
	major int
	dir   string
	owner string // uid:gid of its postgres user
}

// newImage unpacks the root filesystem of major (TUSK_PG_ROOTFS_<major>,
// set by make integration from hack/images.sh rootfs) and puts tusk in it.
func newImage(t testing.TB, major int) image {
	t.Helper()
	requireRoot(t)
	tarball := os.Getenv(fmt.Sprintf("TUSK_PG_ROOTFS_%d", major))
	if tarball == "" {
		missing(t, fmt.Errorf("TUSK_PG_ROOTFS_%d is not set: run hack/images.sh rootfs %d (make integration does)", major, major))
	}
	owner, err := os.ReadFile(tarball + ".user")
	if err != nil {
		missing(t, err)
	}
	img := image{major: major, dir: filepath.Join(t.TempDir(), fmt.Sprintf("postgres-%d", major)), owner: strings.TrimSpace(string(owner))}
	if err := os.Mkdir(img.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", tarball, "-C", img.dir).CombinedOutput(); err != nil {
		t.Fatalf("unpacking %s: %v: %s", tarball, err, out)
	}
	// The tarball's own root directory is private.
	if err := os.Chmod(img.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", tuskBinary, filepath.Join(img.dir, "tusk")).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	img.mkdir(t, "/data")
	return img
}

// mkdir creates dir in the image, owned by its postgres user.
func (img image) mkdir(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(img.path(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	img.chown(t, dir)
}

func (img image) chown(t testing.TB, dir string) {
	t.Helper()
	if out, err := exec.Command("chown", "-R", img.owner, img.path(dir)).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

func (img image) path(p string) string { return filepath.Join(img.dir, p) }

func (img image) bin(program string) string {
	return fmt.Sprintf("/usr/lib/postgresql/%d/bin/%s", img.major, program)
}

// command is args run in the image as its postgres user, with /dev and
// /proc mounted in a mount namespace of the command's own (gone with it).
// It gets a process group of its own, so a test can kill it whole.
func (img image) command(ctx context.Context, args ...string) *exec.Cmd {
	script := `mount --rbind /dev "$0/dev" && mount -t proc proc "$0/proc" && ` +
		`exec chroot --userspec=postgres:postgres "$0" env -i HOME=/var/lib/postgresql LANG=C.UTF-8 PATH=/usr/bin:/bin "$@"`
	cmd := exec.CommandContext(ctx, "unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, img.dir}, args...)...)
	cmd.SysProcAttr = processGroup()
	return cmd
}

// run runs args in the image and returns their combined output.
func (img image) run(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := img.command(ctx, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (img image) mustRun(t testing.TB, args ...string) string {
	t.Helper()
	out, err := img.run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The data directory and the old server's copy, as a pod mounts them.
const (
	pgdata  = "/data/pgdata"
	oldCopy = "/tusk-old"
)

// initdb creates a primary's data directory as Tusk's bootstrap does.
func (img image) initdb(t testing.TB) {
	t.Helper()
	img.mustRun(t, img.bin("initdb"), "-D", pgdata, "--username=postgres", "--auth=trust", "--encoding=UTF8", "--locale=C",
		"--data-checksums", "--no-instructions")
}

// server runs fn while the server of binDir runs on pgdata, privately.
func (img image) server(t testing.TB, binDir string, fn func(sql func(string) string)) {
	t.Helper()
	img.mustRun(t, binDir+"/pg_ctl", "start", "--wait", "-D", pgdata, "-l", "/data/server.log",
		"-o", "-c listen_addresses='' -c unix_socket_directories=/tmp -c max_prepared_transactions=5")
	defer img.mustRun(t, binDir+"/pg_ctl", "stop", "--wait", "-m", "fast", "-D", pgdata)
	fn(func(sql string) string {
		t.Helper()
		return strings.TrimSpace(img.mustRun(t, binDir+"/psql", "-h", "/tmp", "-U", "postgres", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql))
	})
}

// upgrade runs one step of `tusk instance upgrade` in the image.
func (img image) upgrade(t testing.TB, step string, extra ...string) (string, error) {
	t.Helper()
	return img.run(t, append([]string{"/tusk", "instance", "upgrade", step, "--pgdata", pgdata, "--old-copy", oldCopy}, extra...)...)
}

// moveData moves the data directory (and the old server's copy, when
// there is one) from one image into another, as a volume moves from the
// old pod to the new one, owned by the new image's postgres user.
func moveData(t testing.TB, from, to image) {
	t.Helper()
	if err := os.RemoveAll(to.path("/data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(from.path("/data"), to.path("/data")); err != nil {
		t.Fatal(err)
	}
	to.chown(t, "/data")
	from.mkdir(t, "/data")
}

// copyOldServer runs copy-binaries in old into a volume, and puts that
// volume into img as a pod's shared emptyDir would be.
func copyOldServer(t testing.TB, old, img image) {
	t.Helper()
	_ = os.RemoveAll(old.path(oldCopy))
	old.mkdir(t, oldCopy)
	old.mustRun(t, "/tusk", "instance", "copy-binaries", "--dest", oldCopy)
	if err := os.RemoveAll(img.path(oldCopy)); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", old.path(oldCopy), img.path(oldCopy)).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	img.chown(t, oldCopy)
}

// assertOldDirectoryBack checks that nothing of an upgrade is left and the
// old major's directory is in place.
func assertOldDirectoryBack(t testing.TB, img image, major int) {
	t.Helper()
	version, err := os.ReadFile(img.path(pgdata + "/PG_VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(version)); got != strconv.Itoa(major) {
		t.Errorf("PG_VERSION is %s, want %d", got, major)
	}
	for _, leftover := range []string{pgdata + ".upgrade", pgdata + ".old", pgdata + ".upgrade.json", pgdata + "/global/pg_control.old"} {
		if _, err := os.Stat(img.path(leftover)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left behind (%v)", leftover, err)
		}
	}
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, errors.New("the upgrade tests run images in chroots, which needs root"))
	}
}

// missing fails under CI=true, which provides everything, and skips with
// the reason elsewhere.
func missing(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(err)
	}
	t.Skip(err)
}
