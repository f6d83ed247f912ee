package workload

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// quoteTable quotes a table name, schema-qualified or not.
func quoteTable(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("a table name is required")
	}
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("table name %q: at most schema.table", name)
	}
	return pgx.Identifier(parts).Sanitize(), nil
}

// createTableSQL creates the workload's table. The server fills in who
// committed each row, when and at which WAL position.
func createTableSQL(table string) string {
	return `CREATE TABLE IF NOT EXISTS ` + table + ` (
	run text NOT NULL,
	client integer NOT NULL,
	seq bigint NOT NULL,
	server text NOT NULL DEFAULT coalesce(host(inet_server_addr()), 'local'),
	committed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	lsn pg_lsn DEFAULT pg_current_wal_lsn(),
	PRIMARY KEY (run, client, seq))`
}

func insertSQL(table string) string {
	return `INSERT INTO ` + table + ` (run, client, seq) VALUES ($1, $2, $3)
	RETURNING server, committed_at, lsn::text`
}

// readSQL is an ordinary reader's query: which server answered, when, and
// how far it has replayed (or written, on a primary).
const readSQL = `SELECT coalesce(host(inet_server_addr()), 'local'), clock_timestamp(),
	coalesce(pg_last_wal_replay_lsn(), pg_current_wal_lsn())::text`

func selectSQL(table string) string {
	return `SELECT run, client, seq, server, committed_at FROM ` + table
}
