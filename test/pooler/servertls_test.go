//go:build integration

package pooler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgBouncer verifies the server's certificate (verify-full): the server
// listens on 127.0.0.2 too, a name its certificate does not have, and a
// pooler pointed there logs no one in.
func TestPoolerRefusesAServerWhoseCertificateDoesNotMatch(t *testing.T) {
	t.Parallel()
	p := newClusterPKI(t)
	s := startServer(t, p, "mismatch")
	s.prepare(t, "")
	dir := workDir(t)
	cfg := poolerConfig(t, p, dir, "127.0.0.2", s.port)
	// PgBouncer keeps the client waiting and retries the server until
	// query_wait_timeout (120 s by default) ends the wait.
	cfg.Parameters["query_wait_timeout"] = "2"
	b := startBouncer(t, dir, cfg)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	start := time.Now()
	conn, err := pgx.Connect(ctx, b.clientDSN(appUser, appPassword, "verify-full"))
	if err == nil {
		_ = conn.Close(ctx)
		t.Fatal("a client logged in through a pooler whose server's certificate does not match")
	}
	t.Logf("refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if !strings.Contains(err.Error(), "query_wait_timeout") {
		t.Errorf("refused with %v, want query_wait_timeout", err)
	}
	if !strings.Contains(b.output(), "name `127.0.0.2' not present in server certificate") {
		t.Errorf("PgBouncer's log does not say the certificate failed verification:\n%s", b.output())
	}
}
