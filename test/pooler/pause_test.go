//go:build integration

package pooler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/testenv"
)

// pair is a pooler in front of server a, and server b holding the same
// application role (its verifier copied, as a replica has it): the two
// sides of a switchover.
type pair struct {
	a, b *server
	bnc  *bouncer
}

func startPair(t *testing.T) pair {
	t.Helper()
	p, a, b := startServers(t)
	dir := workDir(t)
	return pair{a: a, b: b, bnc: startBouncer(t, dir, poolerConfig(t, p, dir, "127.0.0.1", a.port))}
}

// startServers starts the two servers of a switchover under one cluster
// PKI: a, and b holding a's application role.
func startServers(t *testing.T) (*clusterPKI, *server, *server) {
	t.Helper()
	p := newClusterPKI(t)
	a := startServer(t, p, "a")
	a.prepare(t, "")
	b := startServer(t, p, "b")
	b.prepare(t, a.appVerifier(t))
	return p, a, b
}

// repoint writes the configuration with server b and reloads it.
func (p pair) repoint(t *testing.T) {
	t.Helper()
	c := p.bnc.config
	c.ServerPort = p.b.port
	p.bnc.writeConfig(c)
	p.bnc.mustAdmin("RELOAD")
}

// waitingClients is SHOW POOLS' cl_waiting for the application's pool.
func (b *bouncer) waitingClients(ctx context.Context) (int, error) {
	out, _, err := b.admin("SHOW POOLS")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "|")
		if len(f) > 3 && f[0] == appUser && f[1] == appUser {
			return strconv.Atoi(f[3])
		}
	}
	return 0, ctx.Err()
}

func clusterName(ctx context.Context, conn *pgx.Conn) (string, error) {
	var name string
	err := conn.QueryRow(ctx, "SELECT current_setting('cluster_name')").Scan(&name)
	return name, err
}

// PAUSE returns only once the transaction in flight has ended; a client's
// query sent meanwhile is held, not failed, and after a repoint and RESUME
// it runs on the other server.
func TestPauseWaitsForTheTransactionInFlightAndHoldsTheRest(t *testing.T) {
	t.Parallel()
	p := startPair(t)
	ctx := context.Background()
	inFlight, held := p.bnc.connect(t), p.bnc.connect(t)
	tx, err := inFlight.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t (client) VALUES (1)"); err != nil {
		t.Fatal(err)
	}

	paused := make(chan error, 1)
	pauseStart := time.Now()
	go func() { _, _, err := p.bnc.admin("PAUSE"); paused <- err }()
	heldAnswer := make(chan error, 1)
	var heldOn string
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		if strings.Contains(p.bnc.output(), "PAUSE command issued") {
			return nil
		}
		return errors.New("PgBouncer has not logged the PAUSE")
	})
	heldStart := time.Now()
	go func() {
		var err error
		heldOn, err = clusterName(ctx, held)
		heldAnswer <- err
	}()
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		n, err := p.bnc.waitingClients(ctx)
		if err == nil && n < 1 {
			err = errors.New("no client waiting in the application's pool")
		}
		return err
	})
	select {
	case err := <-paused:
		t.Fatalf("PAUSE returned (%v) while a transaction was in flight", err)
	default:
	}

	committed := time.Now()
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the transaction in flight when PAUSE came: %v", err)
	}
	if err := receive(t, paused, "PAUSE"); err != nil {
		t.Fatal(err)
	}
	t.Logf("PAUSE took %s, %s after the transaction in flight committed",
		time.Since(pauseStart).Round(time.Millisecond), time.Since(committed).Round(time.Millisecond))
	select {
	case err := <-heldAnswer:
		t.Fatalf("a query sent during the PAUSE was answered (%v) before RESUME", err)
	default:
	}

	p.repoint(t)
	resumed := time.Now()
	p.bnc.mustAdmin("RESUME")
	if err := receive(t, heldAnswer, "the held query"); err != nil {
		t.Fatalf("the query held across the PAUSE: %v", err)
	}
	t.Logf("the held query waited %s in all, answered %s after RESUME",
		time.Since(heldStart).Round(time.Millisecond), time.Since(resumed).Round(time.Millisecond))
	if heldOn != "b" {
		t.Errorf("the held query ran on %q, want b (the server the pooler was repointed to)", heldOn)
	}
	if name, err := clusterName(ctx, inFlight); err != nil || name != "b" {
		t.Errorf("the in-flight client's next query: %q, %v; want b", name, err)
	}
}

// workload is clients each running short write transactions through the
// pooler in a loop, counting what was acknowledged and what failed.
type workload struct {
	acked, failed atomic.Int64
	mu            sync.Mutex
	firstErr      error
	worst         time.Duration
	wg            sync.WaitGroup
}

func (w *workload) run(ctx context.Context, conn *pgx.Conn, client int) {
	defer w.wg.Done()
	for ctx.Err() == nil {
		start := time.Now()
		err := pgx.BeginFunc(context.Background(), conn, func(tx pgx.Tx) error {
			_, err := tx.Exec(context.Background(), "INSERT INTO t (client) VALUES ($1)", client)
			return err
		})
		took := time.Since(start)
		w.mu.Lock()
		w.worst = max(w.worst, took)
		if err != nil && w.firstErr == nil {
			w.firstErr = err
		}
		w.mu.Unlock()
		if err != nil {
			w.failed.Add(1)
			continue
		}
		w.acked.Add(1)
	}
}

func rows(t *testing.T, s *server) int64 {
	t.Helper()
	var n int64
	if err := s.superuser(t, appUser).QueryRow(context.Background(), "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The switchover's pooler steps under load: PAUSE, repoint, RESUME while
// clients keep writing. No client sees an error, and every acknowledged
// write is on one of the two servers.
func TestPauseRepointResumeUnderLoad(t *testing.T) {
	t.Parallel()
	const clients = 20
	p := startPair(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var w workload
	for i := range clients {
		conn := p.bnc.connect(t)
		w.wg.Add(1)
		go w.run(ctx, conn, i)
	}
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		if w.acked.Load() < 10*clients {
			return fmt.Errorf("%d transactions acknowledged so far", w.acked.Load())
		}
		return nil
	})

	start := time.Now()
	pauseTook := p.bnc.mustAdmin("PAUSE")
	ackedAtPause := w.acked.Load()
	p.repoint(t)
	p.bnc.mustAdmin("RESUME")
	handover := time.Since(start)
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		if w.acked.Load() < ackedAtPause+10*clients {
			return errors.New("fewer than 10 transactions a client acknowledged since RESUME")
		}
		return nil
	})
	stop()
	w.wg.Wait()

	t.Logf("%d clients: PAUSE took %s; PAUSE, repoint and RESUME %s; longest transaction %s; %d acknowledged, %d failed",
		clients, pauseTook.Round(time.Millisecond), handover.Round(time.Millisecond), w.worst.Round(time.Millisecond),
		w.acked.Load(), w.failed.Load())
	if w.failed.Load() != 0 {
		t.Errorf("%d transactions failed, the first: %v", w.failed.Load(), w.firstErr)
	}
	onA, onB := rows(t, p.a), rows(t, p.b)
	if onA+onB != w.acked.Load() || onB == 0 {
		t.Errorf("%d rows on a and %d on b for %d acknowledged writes; want them all, some on b", onA, onB, w.acked.Load())
	}
}
