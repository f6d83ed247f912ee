//go:build integration

package instance

import (
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
)

// TestUnrenderableConfigChangesNothing: a configuration with a line break
// in a value (which would become a setting of its own in postgresql.conf)
// is refused before the manager stores it, so the restart after it, and
// every later role change, still work on the configuration before it.
func TestUnrenderableConfigChangesNothing(t *testing.T) {
	primary := startNode(t, "badconf-1", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)
	primary.command(http.MethodPut, instanceapi.PathConfig, instanceapi.Config{Parameters: map[string]string{"work_mem": "8MB"}}, nil)

	bad := instanceapi.Config{Parameters: map[string]string{"work_mem": "4MB\nshared_preload_libraries = 'evil'"}}
	if code, err := primary.call(t.Context(), http.MethodPut, instanceapi.PathConfig, bad, nil); code != http.StatusBadRequest {
		t.Fatalf("a value with a line break answered %d (%v), want %d", code, err, http.StatusBadRequest)
	}
	primary.command(http.MethodPost, instanceapi.PathRestart, nil, nil)
	primary.waitReady(instanceapi.RolePrimary)
	var workMem string
	primary.withConn("postgres", superuserPassword, "postgres", func(conn *pgx.Conn) error {
		return conn.QueryRow(t.Context(), "SHOW work_mem").Scan(&workMem)
	})
	if workMem != "8MB" {
		t.Errorf("work_mem is %q after the refused configuration and a restart, want the 8MB from before", workMem)
	}
}
