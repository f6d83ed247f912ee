//go:build integration

package pooler

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"tusk.dev/tusk/internal/testenv"
)

// receive waits for ch up to waitTimeout, failing the test rather than
// hanging it (a test killed by -timeout skips its cleanups).
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("%s: nothing within %s", what, waitTimeout)
		panic("unreachable")
	}
}

// A transaction that does not end holds PAUSE forever; the switchover
// will bound the pause by sending RESUME from another admin session. What
// PgBouncer 1.24 does then: RESUME succeeds and the held client runs, but
// the pending PAUSE does not answer its session (not within a second of
// the transaction's end either), and PgBouncer is not paused again. So
// the operator must not wait on the PAUSE's answer past its bound, and
// must close that session itself.
func TestResumeEndsAPauseThatWaitsTooLong(t *testing.T) {
	t.Parallel()
	p := startPair(t)
	ctx := context.Background()
	long, held := p.bnc.connect(t), p.bnc.connect(t)
	tx, err := long.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t (client) VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	paused := make(chan error, 1)
	go func() { _, _, err := p.bnc.admin("PAUSE"); paused <- err }()
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		if strings.Contains(p.bnc.output(), "PAUSE command issued") {
			return nil
		}
		return errors.New("PgBouncer has not logged the PAUSE")
	})
	heldAnswer := make(chan error, 1)
	go func() { _, err := clusterName(ctx, held); heldAnswer <- err }()
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		n, err := p.bnc.waitingClients(ctx)
		if err == nil && n < 1 {
			err = errors.New("no client waiting in the application's pool")
		}
		return err
	})

	resumed := time.Now()
	p.bnc.mustAdmin("RESUME")
	if err := receive(t, heldAnswer, "the held client after RESUME"); err != nil {
		t.Fatalf("the held client after RESUME: %v", err)
	}
	t.Logf("the held client answered %s after RESUME", time.Since(resumed).Round(time.Millisecond))
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the long transaction after RESUME: %v", err)
	}

	// New work still flows: PgBouncer is not paused by the PAUSE that was
	// pending, now that nothing is in flight.
	testenv.Consistently(t, time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		select {
		case err := <-paused:
			return errors.New("the pending PAUSE answered after all (" + errString(err) + "): the test's account of PgBouncer is out of date")
		default:
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := clusterName(qctx, held)
		return err
	})
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
