//go:build integration

package instance

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
)

// TestReloadThatPostgresIgnoresIsBounded: in an image whose postgres takes
// no SIGHUP, a configuration change answers an error saying so within the
// manager's --reload-timeout, instead of waiting for a reload that never
// comes (which held the manager's operations, and the operator's call,
// forever). The manager's next operation runs: a restart loads the
// configuration, which was written.
func TestReloadThatPostgresIgnoresIsBounded(t *testing.T) {
	primary := startNode(t, "nohup-1", nodeOptions{role: instanceapi.RolePrimary,
		extraArgs: []string{"--pg-bindir", binDirIgnoringSIGHUP(t), "--reload-timeout", "3s"}})
	primary.waitReady(instanceapi.RolePrimary)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	code, err := primary.call(ctx, http.MethodPut, instanceapi.PathConfig, instanceapi.Config{Parameters: map[string]string{"work_mem": "8MB"}}, nil)
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the configuration change took %s, want an answer within 15s of a 3s reload timeout", took.Round(time.Second))
	}
	if code != http.StatusConflict || err == nil || !strings.Contains(err.Error(), "did not load its new configuration within 3s") {
		t.Fatalf("the configuration change answered %d (%v), want 409 saying postgres did not load it within 3s", code, err)
	}

	primary.command(http.MethodPost, instanceapi.PathRestart, nil, nil)
	primary.waitReady(instanceapi.RolePrimary)
	var workMem string
	primary.withConn("postgres", superuserPassword, "postgres", func(conn *pgx.Conn) error {
		return conn.QueryRow(t.Context(), "SHOW work_mem").Scan(&workMem)
	})
	if workMem != "8MB" {
		t.Errorf("work_mem is %q after the restart, want the 8MB that was written", workMem)
	}
}

// binDirIgnoringSIGHUP is a copy of the PostgreSQL bin directory (links)
// whose postgres, run as a server, stands between the manager and the
// postmaster and passes on every signal the manager sends but SIGHUP:
// the postmaster runs and answers, and never reloads.
func binDirIgnoringSIGHUP(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(workDir(t), "bin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(pgBinDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "postgres" {
			if err := os.Symlink(filepath.Join(pgBinDir, e.Name()), filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	real := filepath.Join(pgBinDir, "postgres")
	script := fmt.Sprintf(`#!/bin/sh
case "$1 $*" in
-D*--single*|-D*" -C "*) exec %[1]q "$@" ;;
-D*) ;;
*) exec %[1]q "$@" ;;
esac
%[1]q "$@" &
child=$!
trap '' HUP
for sig in TERM INT QUIT USR1 USR2; do trap "kill -$sig $child" $sig; done
while :; do
	wait $child
	status=$?
	kill -0 $child 2>/dev/null || exit $status
done
`, real)
	if err := os.WriteFile(filepath.Join(dir, "postgres"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
