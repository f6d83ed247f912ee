//go:build integration

package instance

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/utils/ptr"

	"tusk.dev/tusk/internal/instanceapi"
)

// TestManagedRoleCertificateLogin runs a primary with the cluster's TLS
// and a managed role with a password: with CertificateLogin it logs in
// over TLS with a client certificate for its name and no password, and no
// longer with its password, nor with another name's certificate; without,
// its password works again and its certificate does not. The group the
// manager made at startup, a primary that lacks it gets from the apply.
func TestManagedRoleCertificateLogin(t *testing.T) {
	p := newClusterPKI(t)
	n := startNode(t, "certrole-1", nodeOptions{role: instanceapi.RolePrimary, tls: p})
	n.waitReady(instanceapi.RolePrimary)
	const password = "reporter-pass"
	group := readRole(t, n, instanceapi.CertificateLoginRole)
	if group == nil || group.Login {
		t.Fatalf("the manager's certificate login group: %+v, want a role without login", group)
	}
	own, other := certDir(t, p, "reporter"), certDir(t, p, "intruder")

	withCert := instanceapi.RoleRequest{Name: "reporter", Login: true, Password: ptr.To(password),
		InRoles: []string{"pg_monitor"}, CertificateLogin: true}
	res := applyRole(t, n, withCert)
	if res.Statements != 4 || !slices.Contains(res.Changes, "granted certificate login") {
		t.Errorf("creating the role: %+v, want 4 statements, certificate login granted", res)
	}
	if res := applyRole(t, n, withCert); res.Statements != 0 {
		t.Errorf("the same request again changed %+v", res)
	}
	if r := readRole(t, n, "reporter"); r == nil || !slices.Equal(r.InRoles, []string{"pg_monitor", instanceapi.CertificateLoginRole}) {
		t.Errorf("the role's memberships: %+v, want pg_monitor and the certificate login group", r)
	}
	assertCertLogin(t, n, own, true)
	assertCertLogin(t, n, other, false)
	assertLogin(t, n, password, false)

	withoutCert := withCert
	withoutCert.CertificateLogin = false
	res = applyRole(t, n, withoutCert)
	if res.Statements != 1 || !slices.Equal(res.Changes, []string{"revoked certificate login"}) {
		t.Errorf("taking certificate login away: %+v, want it revoked, alone", res)
	}
	if res := applyRole(t, n, withoutCert); res.Statements != 0 {
		t.Errorf("the same request again changed %+v", res)
	}
	assertLogin(t, n, password, true)
	assertCertLogin(t, n, own, false)

	// A primary whose manager predates the group: the apply makes it.
	n.exec("DROP ROLE " + instanceapi.CertificateLoginRole)
	res = applyRole(t, n, withCert)
	if !slices.Equal(res.Changes, []string{"created role " + instanceapi.CertificateLoginRole, "granted certificate login"}) {
		t.Errorf("certificate login without the group: %+v, want it created, then granted", res)
	}
	assertCertLogin(t, n, own, true)
	assertLogin(t, n, password, false)
	if res := applyRole(t, n, withCert); res.Statements != 0 {
		t.Errorf("the same request again changed %+v", res)
	}
}

// certDir mounts a client certificate for cn from the cluster's client CA,
// with the CA of servers, into a new directory.
func certDir(t *testing.T, p *clusterPKI, cn string) string {
	t.Helper()
	dir := t.TempDir()
	mountCerts(t, dir, p.issueClient(cn), p.ca)
	return dir
}

// assertCertLogin says whether the managed role reporter logs in over TLS
// to n with the client certificate in dir and no password.
func assertCertLogin(t *testing.T, n *node, dir string, works bool) {
	t.Helper()
	const user = "reporter"
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d dbname=postgres user=%s sslmode=verify-full "+
		"sslrootcert=%[3]s/ca.crt sslcert=%[3]s/tls.crt sslkey=%[3]s/tls.key", n.port, user, dir))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		_ = conn.Close(context.Background())
	}
	if works && err != nil {
		t.Errorf("%s cannot log in with the certificate in %s: %v", user, dir, err)
	}
	if !works && err == nil {
		t.Errorf("%s logs in with the certificate in %s, which it should not", user, dir)
	}
}
