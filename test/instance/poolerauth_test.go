//go:build integration

package instance

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/pki"
	"tusk.dev/tusk/internal/pooler"
)

// TestPoolerAuthRoleLooksUpOrdinaryRolesOnly: the primary's manager makes
// the poolers' auth role and its lookup function. With a client
// certificate of the cluster's client CA (CN tusk_pooler_auth) the role
// logs in to postgres and gets an ordinary role's SCRAM verifier, and no
// row for a superuser, a replication role, a role without a password or a
// role named like Tusk's; it cannot read pg_authid, and it cannot log in
// with a password, even one a superuser gave it.
func TestPoolerAuthRoleLooksUpOrdinaryRolesOnly(t *testing.T) {
	p := newClusterPKI(t)
	primary := startNode(t, "poolerauth-1", nodeOptions{role: instanceapi.RolePrimary, tls: p})
	primary.waitReady(instanceapi.RolePrimary)
	primary.exec("CREATE ROLE tusk_lookalike LOGIN PASSWORD 'lookalike secret'")
	primary.exec("CREATE ROLE certified LOGIN")

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	auth := p.issueClient(pooler.AuthRole)
	conn, err := connectPoolerAuth(ctx, p, primary.port, &auth, "postgres", "")
	if err != nil {
		t.Fatalf("the auth role's certificate did not log in: %v", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()

	var name, verifier string
	if err := conn.QueryRow(ctx, pooler.AuthQuery, "app").Scan(&name, &verifier); err != nil {
		t.Fatalf("looking up the application's owner: %v", err)
	}
	if name != "app" || !strings.HasPrefix(verifier, "SCRAM-SHA-256$") {
		t.Errorf("the lookup of app returned %q, %q; want app's SCRAM verifier", name, verifier)
	}
	for _, role := range []string{"postgres", "tusk_replication", "tusk_monitor", instanceapi.ProbeRole, pooler.AuthRole, "tusk_lookalike", "certified", "nobody"} {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pooler.AuthFunction+"($1)", role).Scan(&n); err != nil || n != 0 {
			t.Errorf("the lookup of %s returned %d rows (%v), want none", role, n, err)
		}
	}
	if _, err := conn.Exec(ctx, "SELECT rolpassword FROM pg_authid"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("the auth role read pg_authid: %v", err)
	}

	// Another database is refused even with the certificate; a password
	// is refused everywhere, even one a superuser set.
	if _, err := connectPoolerAuth(ctx, p, primary.port, &auth, "app", ""); err == nil || !strings.Contains(err.Error(), "pg_hba.conf rejects") {
		t.Errorf("the auth role's certificate opened the app database: %v", err)
	}
	primary.exec("ALTER ROLE " + pooler.AuthRole + " PASSWORD 'guessed secret'")
	for _, db := range []string{"postgres", "app"} {
		if c, err := connectPoolerAuth(ctx, p, primary.port, nil, db, "guessed secret"); err == nil {
			_ = c.Close(ctx)
			t.Errorf("the auth role logged in to %s with a password", db)
		}
	}
	// A certificate for the role from another CA is refused.
	stranger, err := pki.NewCA("another CA", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	forged := newClusterPKIFrom(t, stranger, stranger).issueClient(pooler.AuthRole)
	if c, err := connectPoolerAuth(ctx, p, primary.port, &forged, "postgres", ""); err == nil {
		_ = c.Close(ctx)
		t.Error("an auth role certificate from another CA logged in")
	}
}

// connectPoolerAuth logs in as the auth role over TLS, verifying the
// server, with client's certificate (none when nil) or a password.
func connectPoolerAuth(ctx context.Context, p *clusterPKI, port int, client *pki.KeyPair, database, password string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d sslmode=disable", port))
	if err != nil {
		return nil, err
	}
	cfg.User, cfg.Database, cfg.Password = pooler.AuthRole, database, password
	cfg.TLSConfig = &tls.Config{RootCAs: p.roots(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if client != nil {
		cert, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
		if err != nil {
			return nil, errors.Join(errors.New("the client certificate"), err)
		}
		cfg.TLSConfig.Certificates = []tls.Certificate{cert}
	}
	return pgx.ConnectConfig(ctx, cfg)
}
