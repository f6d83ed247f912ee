//go:build integration

package instance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

// logRecord is one line of a manager's output, which must be one JSON
// object.
type logRecord map[string]any

func (r logRecord) str(key string) string { s, _ := r[key].(string); return s }

// records parses every line of the manager's output so far, failing the
// test on a line that is not one JSON object.
func (n *node) records() []logRecord {
	n.t.Helper()
	var out []logRecord
	for line := range strings.Lines(n.logs()) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var r logRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			n.t.Fatalf("%s logged a line that is not one JSON object: %q: %v", n.name, line, err)
		}
		out = append(out, r)
	}
	return out
}

// waitRecord waits for a record of logger whose message contains every
// one of parts, and returns it.
func (n *node) waitRecord(logger string, parts ...string) logRecord {
	n.t.Helper()
	var found logRecord
	testenv.Eventually(n.t, waitTimeout, func(context.Context) error {
		for _, r := range n.records() {
			if r.str("logger") == logger && containsAll(r.str("msg"), parts) {
				found = r
				return nil
			}
		}
		return fmt.Errorf("%s logged no %s record with %q", n.name, logger, parts)
	})
	return found
}

// wantFields fails the test for every key of want whose value r lacks.
func wantFields(t *testing.T, what string, r logRecord, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if fmt.Sprint(r[k]) != fmt.Sprint(v) {
			t.Errorf("%s: %s = %v, want %v (record %v)", what, k, r[k], v, r)
		}
	}
}

// TestPostgresLogIsJSONInTheManagersSchema: on PostgreSQL 15 the logging
// collector writes jsonlog into the manager's named pipes, and each
// record comes out of the manager as one JSON object in the schema of its
// own records (logger, level, cluster, instance, timeline), with
// PostgreSQL's fields. spec.postgresql.logging's slow statement threshold
// and lock waits show in it, the pipes outlive a restart of postgres, and
// a promotion moves the timeline of the records that follow.
func TestPostgresLogIsJSONInTheManagersSchema(t *testing.T) {
	slow, lockWait, on := int64(200), int64(100), true
	cfg := &instanceapi.Config{Logging: &instanceapi.Logging{SlowStatementThresholdMillis: &slow, LockWaits: &on, LockWaitThresholdMillis: &lockWait}}
	primary := startNode(t, "logs-1", nodeOptions{role: instanceapi.RolePrimary, config: cfg})
	primary.waitReady(instanceapi.RolePrimary)
	fi, err := os.Stat(filepath.Join(primary.dir, "run", "log", "postgres.json"))
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("run/log/postgres.json is not a named pipe: %v, %v", fi, err)
	}
	var dest string
	primary.withConn("postgres", superuserPassword, "app", func(conn *pgx.Conn) error {
		return conn.QueryRow(t.Context(), "SHOW log_destination").Scan(&dest)
	})
	if dest != "jsonlog" {
		t.Fatalf("log_destination = %q, want jsonlog", dest)
	}
	common := map[string]any{"cluster": primary.cluster(), "instance": "logs-1", "timeline": 1}

	// A statement past the threshold, from the application's role, and
	// one under it.
	primary.appExec("SELECT pg_sleep(0.1)")
	primary.appExec("SELECT pg_sleep(0.3)")
	r := primary.waitRecord("postgres", "duration:", "SELECT pg_sleep(0.3)")
	wantFields(t, "the slow statement", r, common)
	wantFields(t, "the slow statement", r, map[string]any{"level": "info", "severity": "LOG", "user": "app",
		"database": "app", "backendType": "client backend"})
	if pid, _ := r["pid"].(float64); pid <= 0 || r.str("sessionID") == "" || r.str("ts") == "" {
		t.Errorf("the slow statement has no pid, sessionID or ts: %v", r)
	}
	for _, r := range primary.records() {
		if r.str("logger") == "postgres" && strings.Contains(r.str("msg"), "pg_sleep(0.1)") {
			t.Errorf("a statement under the threshold was logged: %v", r)
		}
	}

	// An error: level error, its SQLSTATE and statement.
	primary.appExecFails("SELECT 1/0")
	r = primary.waitRecord("postgres", "division by zero")
	wantFields(t, "the error", r, map[string]any{"level": "error", "severity": "ERROR", "sqlstate": "22012", "statement": "SELECT 1/0"})
	if _, ok := r["stacktrace"]; ok {
		t.Errorf("a PostgreSQL error carries a Go stack trace: %v", r)
	}

	// A lock wait longer than the threshold.
	primary.exec("CREATE TABLE locked (id int); GRANT SELECT ON locked TO app")
	holder, err := primary.tryConnect(t.Context(), "postgres", superuserPassword, "app")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Close(context.Background()) }()
	tx, err := holder.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), "LOCK TABLE locked IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		conn, err := primary.tryConnect(context.Background(), "app", appPassword, "app")
		if err == nil {
			_, err = conn.Exec(context.Background(), "SELECT count(*) FROM locked")
			_ = conn.Close(context.Background())
		}
		waited <- err
	}()
	r = primary.waitRecord("postgres", "still waiting for AccessShareLock on relation")
	wantFields(t, "the lock wait", r, common)
	wantFields(t, "the lock wait", r, map[string]any{"level": "info", "severity": "LOG", "user": "app", "statement": "SELECT count(*) FROM locked"})
	if !strings.Contains(r.str("detail"), "Process holding the lock") {
		t.Errorf("the lock wait does not say who holds the lock: %v", r)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	primary.waitRecord("postgres", "acquired AccessShareLock on relation")

	// The manager's own records carry the same keys.
	m := primary.waitRecord("manager", "Started postgres")
	wantFields(t, "the manager's record", m, map[string]any{"cluster": primary.cluster(), "instance": "logs-1", "level": "info"})

	// A restart starts a new logging collector on the same pipes.
	primary.command(http.MethodPost, instanceapi.PathRestart, nil, nil)
	primary.waitReady(instanceapi.RolePrimary)
	primary.appExec("SELECT pg_sleep(0.25)")
	primary.waitRecord("postgres", "duration:", "SELECT pg_sleep(0.25)")

	// A replica's records carry its timeline, which moves with a promotion.
	replica := startNode(t, "logs-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port, config: cfg})
	replica.waitReady(instanceapi.RoleReplica)
	replica.command(http.MethodPost, instanceapi.PathPromote, nil, nil)
	replica.waitReady(instanceapi.RolePrimary)
	replica.appExec("SELECT pg_sleep(0.21)")
	r = replica.waitRecord("postgres", "duration:", "SELECT pg_sleep(0.21)")
	wantFields(t, "after the promotion", r, map[string]any{"cluster": replica.cluster(), "instance": "logs-2", "timeline": 2})
	primary.records() // every line, to the end, is one JSON object
	replica.records()
}

// appExec runs sql as the application's owner over TCP.
func (n *node) appExec(sql string) {
	n.t.Helper()
	n.withConn("app", appPassword, "app", func(conn *pgx.Conn) error {
		_, err := conn.Exec(context.Background(), sql)
		return err
	})
}

// appExecFails runs sql as the application's owner and wants an error.
func (n *node) appExecFails(sql string) {
	n.t.Helper()
	conn, err := n.tryConnect(context.Background(), "app", appPassword, "app")
	if err != nil {
		n.t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, sql); err == nil {
		n.t.Fatalf("%s: %s succeeded, want an error", n.name, sql)
	}
}
