//go:build integration

package pooler

import (
	"context"
	"errors"
	"testing"
	"time"

	"tusk.dev/tusk/internal/pooler"
)

// In session mode a client holds its server connection for its whole
// session, idle or not, so PAUSE waits for every client to disconnect:
// a switchover cannot pause a session pooler with clients connected, only
// bound the wait and resume. (The reason docs/pooler.md recommends
// transaction mode.)
func TestPauseInSessionModeWaitsForSessionsToEnd(t *testing.T) {
	t.Parallel()
	p := newClusterPKI(t)
	s := startServer(t, p, "session")
	s.prepare(t, "")
	dir := workDir(t)
	cfg := poolerConfig(t, p, dir, "127.0.0.1", s.port)
	cfg.PoolMode = pooler.PoolModeSession
	b := startBouncer(t, dir, cfg)
	ctx := context.Background()
	idle := b.connect(t)
	if _, err := clusterName(ctx, idle); err != nil {
		t.Fatal(err)
	}

	paused := make(chan error, 1)
	go func() { _, _, err := b.admin("PAUSE"); paused <- err }()
	select {
	case err := <-paused:
		t.Fatalf("PAUSE returned (%v) while an idle session held its server connection", err)
	case <-time.After(time.Second): // how long the test watches for an answer that must not come
	}
	closed := time.Now()
	if err := idle.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := receive(t, paused, "PAUSE after the session ended"); err != nil {
		t.Fatal(err)
	}
	t.Logf("PAUSE answered %s after the idle session closed", time.Since(closed).Round(time.Millisecond))
	b.mustAdmin("RESUME")
	if _, err := clusterName(ctx, b.connect(t)); err != nil {
		t.Fatal(errors.Join(errors.New("a new session after RESUME"), err))
	}
}
