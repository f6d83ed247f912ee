//go:build integration

package instance

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
)

// TestUpgradePrecheckOnTheServingPrimary: POST /v1/upgrade/precheck, which
// the operator sends before it stops anything for a major upgrade, names
// an open prepared transaction, then (PostgreSQL before 17) a logical
// slot, and finds nothing once both are gone; the primary serves
// throughout.
func TestUpgradePrecheckOnTheServingPrimary(t *testing.T) {
	primary := startNode(t, "pre-1", nodeOptions{role: instanceapi.RolePrimary,
		config: &instanceapi.Config{Parameters: map[string]string{"max_prepared_transactions": "2", "wal_level": "logical"}}})
	primary.waitReady(instanceapi.RolePrimary)
	precheck := func() string {
		t.Helper()
		var res instanceapi.UpgradePrecheckResult
		primary.command(http.MethodPost, instanceapi.PathUpgradePrecheck, nil, &res)
		return res.Problem
	}
	if got := precheck(); got != "" {
		t.Fatalf("a fresh primary's pre-check: %q, want no problem", got)
	}
	primary.exec("BEGIN; CREATE TABLE t (id int); PREPARE TRANSACTION 'pending'")
	if got := precheck(); !strings.Contains(got, "prepared transactions are open: pending (database app)") {
		t.Errorf("with a prepared transaction: %q", got)
	}
	primary.exec("ROLLBACK PREPARED 'pending'")
	primary.exec("SELECT pg_create_logical_replication_slot('reader', 'pgoutput')")
	var major int
	primary.withConn("postgres", superuserPassword, "app", func(conn *pgx.Conn) error {
		return conn.QueryRow(context.Background(), "SELECT current_setting('server_version_num')::int / 10000").Scan(&major)
	})
	got := precheck()
	switch {
	case major < 17 && !strings.Contains(got, "logical replication slots reader exist"):
		t.Errorf("PostgreSQL %d with a logical slot: %q, want it named", major, got)
	case major >= 17 && got != "":
		t.Errorf("PostgreSQL %d carries logical slots, yet: %q", major, got)
	}
	primary.exec("SELECT pg_drop_replication_slot('reader')")
	if got := precheck(); got != "" {
		t.Errorf("once both are gone: %q", got)
	}
}
