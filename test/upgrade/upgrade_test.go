//go:build integration

package upgrade_test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func processGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

const rows = "100000"

// seed fills a fresh data directory with what an upgrade must carry: a
// table with an index, an extension, a second database and a role.
func seed(t *testing.T, img image) {
	t.Helper()
	img.initdb(t)
	img.server(t, img.bin(""), func(sql func(string) string) {
		sql(`CREATE TABLE orders AS SELECT g AS id, md5(g::text) AS note FROM generate_series(1, ` + rows + `) g`)
		sql(`CREATE UNIQUE INDEX ON orders (id)`)
		sql(`CREATE EXTENSION pgcrypto`)
		sql(`CREATE DATABASE app`)
		sql(`CREATE ROLE app_user LOGIN`)
		sql(`ANALYZE orders`)
	})
}

// assertData checks that what seed wrote is all there, read by the server
// of binDir.
func assertData(t *testing.T, img image, binDir string) {
	t.Helper()
	img.server(t, binDir, func(sql func(string) string) {
		if got := sql(`SELECT count(*) || ' ' || sum(id) FROM orders`); got != rows+" 5000050000" {
			t.Errorf("orders holds %q", got)
		}
		if got := sql(`SELECT note FROM orders WHERE id = 4242`); got != sql(`SELECT md5('4242')`) {
			t.Errorf("row 4242 reads %q through the index", got)
		}
		if got := sql(`SELECT count(*) FROM pg_extension WHERE extname = 'pgcrypto'`); got != "1" {
			t.Errorf("extension pgcrypto: %q", got)
		}
		if got := sql(`SELECT count(*) FROM pg_database WHERE datname = 'app'`); got != "1" {
			t.Errorf("database app: %q", got)
		}
		if got := sql(`SELECT rolcanlogin FROM pg_roles WHERE rolname = 'app_user'`); got != "t" {
			t.Errorf("role app_user: %q", got)
		}
	})
}

// TestUpgradeAcrossImages takes a data directory from PostgreSQL 15
// (bookworm) to 17 (trixie) and on to 18 (forky), each time in the new
// image with the old server carried in from its own.
func TestUpgradeAcrossImages(t *testing.T) {
	pg15, pg17, pg18 := newImage(t, 15), newImage(t, 17), newImage(t, 18)
	seed(t, pg15)
	for _, hop := range []struct{ from, to image }{{pg15, pg17}, {pg17, pg18}} {
		copyOldServer(t, hop.from, hop.to)
		moveData(t, hop.from, hop.to)

		if out, err := hop.to.upgrade(t, "check"); err != nil {
			t.Fatalf("check %d to %d: %v", hop.from.major, hop.to.major, err)
		} else if strings.TrimSpace(out) != "" {
			t.Errorf("check left an upgrade in progress: %s", out)
		}
		assertOldDirectoryBack(t, hop.to, hop.from.major)

		for _, step := range []string{"run", "verify"} {
			out, err := hop.to.upgrade(t, step)
			if err != nil {
				t.Fatalf("%s %d to %d: %v", step, hop.from.major, hop.to.major, err)
			}
			if !strings.Contains(out, `"step": "Swapped"`) {
				t.Fatalf("after %s the upgrade is not swapped: %s", step, out)
			}
		}
		// Until the commit, the old directory waits beside the new one.
		if _, err := os.Stat(hop.to.path(pgdata + ".old/PG_VERSION")); err != nil {
			t.Errorf("the old data directory is not kept until the commit: %v", err)
		}
		if _, err := hop.to.upgrade(t, "commit"); err != nil {
			t.Fatal(err)
		}
		for _, gone := range []string{pgdata + ".old", pgdata + ".upgrade.json"} {
			if _, err := os.Stat(hop.to.path(gone)); !os.IsNotExist(err) {
				t.Errorf("%s is still there after the commit (%v)", gone, err)
			}
		}
		assertData(t, hop.to, hop.to.bin(""))
	}
	pg18.server(t, pg18.bin(""), func(sql func(string) string) {
		if got := sql(`SHOW data_checksums`); got != "on" {
			t.Errorf("data_checksums is %s after the upgrades, want on", got)
		}
		if got := sql(`SELECT current_setting('server_version_num')::int / 10000`); got != "18" {
			t.Errorf("server major %s", got)
		}
	})
}

// TestFailedUpgradesRollBack makes an upgrade from 15 to 17 fail at each
// step; each time the old directory is back, startable, with every row.
func TestFailedUpgradesRollBack(t *testing.T) {
	pg15, pg17 := newImage(t, 15), newImage(t, 17)
	copyOldServer(t, pg15, pg17)
	fresh := func(t *testing.T) {
		t.Helper()
		seed(t, pg15)
		moveData(t, pg15, pg17)
	}
	oldServer := oldCopy + "/bin/"
	fails := func(t *testing.T, step, want string, extra ...string) {
		t.Helper()
		_, err := pg17.upgrade(t, step, extra...)
		if err == nil {
			t.Fatalf("%s succeeded", step)
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "rolled back") {
			t.Fatalf("%s failed without saying %q and that it rolled back: %v", step, want, err)
		}
		assertOldDirectoryBack(t, pg17, 15)
		assertData(t, pg17, oldServer)
		if err := os.RemoveAll(pg17.path("/data/pgdata")); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("a prepared transaction", func(t *testing.T) {
		fresh(t)
		pg17.server(t, oldServer, func(sql func(string) string) {
			sql(`BEGIN; INSERT INTO orders VALUES (0, 'pending'); PREPARE TRANSACTION 'pending-order'`)
		})
		fails(t, "run", "prepared transactions are open: pending-order")
	})

	t.Run("an extension the new image lacks", func(t *testing.T) {
		fresh(t)
		// adminpack left PostgreSQL in 17.
		pg17.server(t, oldServer, func(sql func(string) string) { sql(`CREATE EXTENSION adminpack`) })
		fails(t, "run", "the new image lacks extensions in use: adminpack (database postgres)")
	})

	t.Run("pg_upgrade --check refuses", func(t *testing.T) {
		fresh(t)
		// aclitem's storage changed in 16; pg_upgrade refuses it in user tables.
		pg17.server(t, oldServer, func(sql func(string) string) { sql(`CREATE TABLE grants (a aclitem)`) })
		fails(t, "run", `Your installation contains the "aclitem" data type in user tables. `+
			`The internal format of "aclitem" changed in PostgreSQL version 16 so this cluster cannot currently be upgraded. `+
			`You can drop the problem columns and restart the upgrade. A list of the problem columns is in the file: (In database: postgres; public.grants.a)`)
	})

	t.Run("pg_upgrade fails after linking the files", func(t *testing.T) {
		fresh(t)
		// After linking, pg_upgrade sets the new cluster's next OID with
		// pg_resetwal -o: a new image whose pg_resetwal fails there.
		bin := faultyNewBinaries(t, pg17, `echo "injected: pg_resetwal failed" >&2; exit 1`)
		fails(t, "run", "injected: pg_resetwal failed", "--pg-bindir", bin)
	})

	t.Run("the new server does not start", func(t *testing.T) {
		fresh(t)
		if _, err := pg17.upgrade(t, "run"); err != nil {
			t.Fatal(err)
		}
		// A setting PostgreSQL 17 no longer has, as the instance manager
		// would render it from a spec written for 15.
		f, err := os.OpenFile(pg17.path(pgdata+"/postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteString("old_snapshot_threshold = '1min'\n")
		_ = f.Close()
		fails(t, "verify", `unrecognized configuration parameter "old_snapshot_threshold"`)
	})

	t.Run("an upgrade killed in pg_upgrade is undone and done again", func(t *testing.T) {
		fresh(t)
		bin := faultyNewBinaries(t, pg17, `touch /data/hung; exec sleep 600`)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := pg17.command(ctx, "/tusk", "instance", "upgrade", "run", "--pgdata", pgdata, "--old-copy", oldCopy, "--pg-bindir", bin)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitForFile(t, pg17.path("/data/hung"))
		// The whole process group, as a pod deleted mid-upgrade loses it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if _, err := os.Stat(pg17.path(pgdata + "/global/pg_control.old")); err != nil {
			t.Fatalf("the kill came before pg_upgrade linked the files: %v", err)
		}
		out, err := pg17.upgrade(t, "run")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, `"step": "Swapped"`) {
			t.Fatalf("the second run did not finish: %s", out)
		}
		for _, step := range []string{"verify", "commit"} {
			if _, err := pg17.upgrade(t, step); err != nil {
				t.Fatal(err)
			}
		}
		assertData(t, pg17, pg17.bin(""))
	})
}

// faultyNewBinaries is the new image's bin directory with pg_resetwal
// replaced by a script that runs fault when asked to set the next OID
// (pg_upgrade's step after linking the data files) and is the real one
// otherwise.
func faultyNewBinaries(t *testing.T, img image, fault string) string {
	t.Helper()
	const dir = "/faulty-bin"
	_ = os.RemoveAll(img.path(dir))
	if err := os.Mkdir(img.path(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	real := img.bin("")
	entries, err := os.ReadDir(img.path(real))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "pg_resetwal" {
			continue
		}
		if err := os.Symlink(real+e.Name(), img.path(dir+"/"+e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	script := "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = -o ] && { " + fault + "; }; done\nexec " + real + "pg_resetwal \"$@\"\n"
	if err := os.WriteFile(img.path(dir+"/pg_resetwal"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func waitForFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			_ = os.Remove(path)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
}
