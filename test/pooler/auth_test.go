//go:build integration

package pooler

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestPoolerAuthenticatesOverTLS(t *testing.T) {
	t.Parallel()
	p := newClusterPKI(t)
	s := startServer(t, p, "auth")
	s.prepare(t, "")
	dir := workDir(t)
	b := startBouncer(t, dir, poolerConfig(t, p, dir, "127.0.0.1", s.port))
	ctx := context.Background()

	conn := b.connect(t)
	var user, cluster string
	var serverSSL bool
	if err := conn.QueryRow(ctx, `SELECT current_user, current_setting('cluster_name'), ssl
		FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&user, &cluster, &serverSSL); err != nil {
		t.Fatal(err)
	}
	if user != appUser || cluster != "auth" || !serverSSL {
		t.Errorf("through the pooler: user %q on %q, TLS to the server %v; want %q on %q over TLS", user, cluster, serverSSL, appUser, "auth")
	}

	t.Run("a wrong password is refused", func(t *testing.T) {
		_, err := pgx.Connect(ctx, b.clientDSN(appUser, "not the password", "verify-full"))
		// PgBouncer answers a failed SCRAM exchange with a protocol
		// violation, not PostgreSQL's invalid_password (28P01).
		assertSQLState(t, err, "08P01")
		if !strings.Contains(err.Error(), "SASL authentication failed") {
			t.Errorf("refused with %v, want SASL authentication failed", err)
		}
	})
	t.Run("a client without TLS is refused", func(t *testing.T) {
		_, err := pgx.Connect(ctx, b.clientDSN(appUser, appPassword, "disable"))
		assertSQLState(t, err, "08P01")
		if !strings.Contains(err.Error(), "SSL required") {
			t.Errorf("refused with %v, want SSL required", err)
		}
	})
	t.Run("a superuser cannot log in through the pooler", func(t *testing.T) {
		// The lookup returns no row for a superuser: to PgBouncer, no such
		// user.
		_, err := pgx.Connect(ctx, b.clientDSN("postgres", "any", "verify-full"))
		assertSQLState(t, err, "08P01")
		if !strings.Contains(err.Error(), "no such user") {
			t.Errorf("refused with %v, want no such user", err)
		}
	})
}

func assertSQLState(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != code {
		t.Fatalf("got %v, want SQLSTATE %s", err, code)
	}
}

// The auth role reads one role's verifier through the function and nothing
// else: not pg_authid, not a superuser's verifier; and it logs in with its
// client certificate only.
func TestAuthRoleSeesOnlyTheVerifierItAsksFor(t *testing.T) {
	t.Parallel()
	p := newClusterPKI(t)
	s := startServer(t, p, "authrole")
	s.prepare(t, "")
	dir := workDir(t)
	cfg := poolerConfig(t, p, dir, "127.0.0.1", s.port)
	ctx := context.Background()
	dsn := "host=127.0.0.1 port=" + strconv.Itoa(s.port) + " user=" + authRole + " dbname=postgres sslmode=verify-full sslrootcert=" +
		cfg.ServerTLS.CAFile
	conn, err := pgx.Connect(ctx, dsn+" sslcert="+cfg.ServerTLS.CertFile+" sslkey="+cfg.ServerTLS.KeyFile)
	if err != nil {
		t.Fatalf("the auth role with its certificate: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()

	var name, verifier string
	if err := conn.QueryRow(ctx, "SELECT username, verifier FROM tusk_pooler.user_verifier($1)", appUser).Scan(&name, &verifier); err != nil {
		t.Fatal(err)
	}
	if name != appUser || !strings.HasPrefix(verifier, "SCRAM-SHA-256$") {
		t.Errorf("lookup of %s gave %q, %q; want its SCRAM verifier", appUser, name, verifier)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM tusk_pooler.user_verifier('postgres') WHERE verifier IS NOT NULL OR username IS NOT NULL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Error("the lookup returned the superuser")
	}
	_, err = conn.Exec(ctx, "SELECT rolname, rolpassword FROM pg_authid")
	assertSQLState(t, err, "42501")

	if _, err := pgx.Connect(ctx, dsn+" password=x"); err == nil {
		t.Error("the auth role logged in without its certificate")
	}
}
