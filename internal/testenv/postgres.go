package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
)

// PostgresBinDir finds PostgreSQL's server programs for tests that run real
// postgres processes: $TUSK_PG_BINDIR, else the newest
// /usr/lib/postgresql/<major>/bin (hack/install-postgres.sh installs 15).
func PostgresBinDir() (string, error) {
	candidates := []string{os.Getenv("TUSK_PG_BINDIR")}
	if candidates[0] == "" {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		slices.SortFunc(found, func(a, b string) int { return majorOfDir(b) - majorOfDir(a) })
		candidates = found
	}
	for _, dir := range candidates {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil { //nolint:gosec // a directory the developer or CI chose
			return dir, nil
		}
	}
	return "", fmt.Errorf("PostgreSQL server programs not found in %v: run hack/install-postgres.sh or set TUSK_PG_BINDIR", candidates)
}

func majorOfDir(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// RequirePostgres returns PostgresBinDir, or stops the test without it:
// failing under CI=true (CI installs PostgreSQL, so its absence means the
// tests silently stopped testing) and skipping with the reason elsewhere.
func RequirePostgres(t testing.TB) string {
	t.Helper()
	dir, err := PostgresBinDir()
	if err != nil {
		missing(t, err)
	}
	return dir
}

// RequirePostgres16 returns the bin directory of PostgreSQL 16 or later
// for tests of what Tusk allows only there (subscriptions, logical
// imports): $TUSK_PG_BINDIR when it is that new, else $TUSK_PG_BINDIR_17
// (hack/install-postgres-rootfs.sh 17; make integration sets it). Without
// one, the test stops as RequirePostgres's does.
func RequirePostgres16(t testing.TB) string {
	t.Helper()
	if dir, err := PostgresBinDir(); err == nil && majorOfDir(dir) >= 16 {
		return dir
	}
	dir := os.Getenv("TUSK_PG_BINDIR_17")
	if dir == "" {
		missing(t, errors.New("no PostgreSQL 16 or later: set TUSK_PG_BINDIR_17 to the output of hack/install-postgres-rootfs.sh 17"))
	}
	if _, err := os.Stat(filepath.Join(dir, "initdb")); err != nil { //nolint:gosec // a directory the developer or CI chose
		missing(t, fmt.Errorf("TUSK_PG_BINDIR_17: %w", err))
	}
	return dir
}

// missing stops a test that lacks a program or file it needs: failing
// under CI=true, which installs everything, so a missing one means tests
// silently stopped testing, and skipping with the reason elsewhere.
func missing(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(err)
	}
	t.Skip(err)
}

// PostgresCredential is who to run PostgreSQL as: nil (ourselves) unless
// the tests run as root, which PostgreSQL refuses; then the postgres OS user
// that Debian's packages create.
func PostgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("tests run as root need a postgres OS user to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// FreePort returns a loopback TCP port nothing listens on right now; the
// caller's server binds it a moment later.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// BuildTuskForPostgres builds the tusk binary into a new directory that
// PostgreSQL's OS user can read and run (archive_command, restore_command
// and the instance manager run it as that user). remove deletes it.
func BuildTuskForPostgres() (binary string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "tusk-bin-")
	if err != nil {
		return "", nil, err
	}
	remove = func() { _ = os.RemoveAll(dir) }
	if err := os.Chmod(dir, 0o755); err != nil { //nolint:gosec // PostgreSQL's user must run the binary
		remove()
		return "", nil, err
	}
	binary = filepath.Join(dir, "tusk")
	build := exec.Command("go", "build", "-o", binary, "./cmd/tusk") //nolint:gosec // the repository's own command
	build.Dir = RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		remove()
		return "", nil, fmt.Errorf("building tusk: %w\n%s", err, out)
	}
	return binary, remove, nil
}

// PgBouncerProgram finds PgBouncer 1.24 or later for the pooler's tests:
// $TUSK_PGBOUNCER (hack/install-pgbouncer.sh prints it; make integration
// sets it).
func PgBouncerProgram() (string, error) {
	path := os.Getenv("TUSK_PGBOUNCER")
	if path == "" {
		return "", errors.New("no PgBouncer: set TUSK_PGBOUNCER to the output of hack/install-pgbouncer.sh")
	}
	if _, err := os.Stat(path); err != nil { //nolint:gosec // a program the developer or CI chose
		return "", fmt.Errorf("TUSK_PGBOUNCER: %w", err)
	}
	return path, nil
}
