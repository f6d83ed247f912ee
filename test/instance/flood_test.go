//go:build integration

package instance

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
)

const (
	floodClients  = 64
	floodDuration = 3 * time.Second
)

// TestFloodedProbesSpendNoConnections: anyone who reaches the manager's
// port may ask for readiness and metrics, which need no certificate. A
// flood of them (64 clients asking without pause) opens no session on
// postgres (they ask on the manager's two long-lived monitoring sessions,
// one query at a time, readiness at most every half second), the instance stays ready
// throughout, and a writer goes on writing.
func TestFloodedProbesSpendNoConnections(t *testing.T) {
	primary := startNode(t, "flood-1", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)
	primary.exec("CREATE TABLE flood (id bigint); GRANT INSERT ON flood TO app")

	quiet := sessionsDuring(t, primary, func(context.Context) {})
	var asked, unready atomic.Int64
	var writes int
	flooded := sessionsDuring(t, primary, func(ctx context.Context) {
		var wg sync.WaitGroup
		for i := range floodClients {
			path := instanceapi.PathReadyz
			if i%2 == 1 {
				path = instanceapi.PathMetrics
			}
			wg.Go(func() { flood(ctx, primary, path, &asked, &unready) })
		}
		writes = writeUntil(ctx, t, primary)
		wg.Wait()
	})

	// Readiness and metrics ask postgres on the manager's two long-lived
	// monitoring sessions: readiness's is open since waitReady, metrics'
	// opens at the flood's first scrape. One more is allowed for what the
	// manager does anyway, which may fall in one window and not the other.
	bound := quiet + 2
	t.Logf("%d requests in %s from %d clients: %d sessions on postgres (%d without them), %d writes",
		asked.Load(), floodDuration, floodClients, flooded, quiet, writes)
	if flooded > bound {
		t.Errorf("the flood of %d requests opened %d sessions on postgres, want at most %d", asked.Load(), flooded, bound)
	}
	if unready.Load() > 0 {
		t.Errorf("%d of %d readiness or metrics requests failed during the flood", unready.Load(), asked.Load())
	}
	if asked.Load() < floodClients {
		t.Errorf("only %d requests were answered: the flood did not happen", asked.Load())
	}
	if writes == 0 {
		t.Error("no write went through during the flood")
	}
}

// sessionsDuring runs fn for floodDuration and returns how many sessions
// were opened on the database postgres (the manager's) meanwhile.
func sessionsDuring(t *testing.T, n *node, fn func(context.Context)) int64 {
	t.Helper()
	before := sessionsOpened(t, n)
	ctx, cancel := context.WithTimeout(t.Context(), floodDuration)
	defer cancel()
	fn(ctx)
	<-ctx.Done()
	// Statistics reach the shared counters when a session ends, at most a
	// second later.
	time.Sleep(1500 * time.Millisecond)
	return sessionsOpened(t, n) - before
}

func sessionsOpened(t *testing.T, n *node) int64 {
	t.Helper()
	var sessions int64
	n.withConn("postgres", superuserPassword, "app", func(conn *pgx.Conn) error {
		return conn.QueryRow(t.Context(), "SELECT sessions FROM pg_stat_database WHERE datname = 'postgres'").Scan(&sessions)
	})
	return sessions
}

// flood asks for path without pause until ctx ends, counting the answers
// and those that are not 200.
func flood(ctx context.Context, n *node, path string, asked, failed *atomic.Int64) {
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.url(path), nil)
		resp, err := n.client.Do(req)
		if err != nil {
			continue // the end of the flood cancels requests
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		asked.Add(1)
		if resp.StatusCode != http.StatusOK {
			failed.Add(1)
		}
	}
}

// writeUntil inserts rows as the application does, a session per insert,
// until ctx ends, and returns how many went through. Each insert has its
// own time limit, not ctx's: one cut short by the end of the flood is no
// failure.
func writeUntil(ctx context.Context, t *testing.T, n *node) int {
	t.Helper()
	writes := 0
	for ctx.Err() == nil {
		if err := insertOne(t.Context(), n, writes); err != nil {
			t.Errorf("a write failed during the flood: %v", err)
			return writes
		}
		writes++
	}
	return writes
}

func insertOne(ctx context.Context, n *node, id int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := n.tryConnect(ctx, "app", appPassword, "app")
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, fmt.Sprintf("INSERT INTO public.flood VALUES (%d)", id))
	return err
}
