package instance

import (
	"slices"
	"strings"
	"testing"

	"tusk.dev/tusk/internal/instance/pgconf"
	"tusk.dev/tusk/internal/pooler"
)

// TestPoolerAuthRoleLogsInByCertificateOnly: with the cluster's client CA,
// pg_hba.conf lets the poolers' auth role in with a client certificate to
// the database of its lookup function only, and refuses it anything else
// before a user's rule could take a password from it; without a client CA
// there is no line for it at all.
func TestPoolerAuthRoleLogsInByCertificateOnly(t *testing.T) {
	text, err := pgconf.PgHBA(pgconf.HBAConfig{ReplicationUser: replicationUser, TLS: true,
		ReplicationAuth: pgconf.ReplicationAuthCert, CertificateLogins: certificateLogins(pgconf.ReplicationAuthCert),
		ExtraRules: []string{"hostssl all all 0.0.0.0/0 scram-sha-256"}})
	if err != nil {
		t.Fatal(err)
	}
	var records []string
	for _, line := range strings.Split(text, "\n") {
		if fields := strings.Fields(line); len(fields) > 0 && !strings.HasPrefix(fields[0], "#") {
			records = append(records, strings.Join(fields, " "))
		}
	}
	cert := slices.Index(records, "hostssl postgres "+pooler.AuthRole+" all cert")
	refused := slices.Index(records, "host all "+pooler.AuthRole+" all reject")
	user := slices.Index(records, "hostssl all all 0.0.0.0/0 scram-sha-256")
	if cert < 0 || refused != cert+1 || user < refused {
		t.Errorf("the auth role's certificate line at record %d, its refusal at %d, the user's rule at %d:\n%s",
			cert, refused, user, strings.Join(records, "\n"))
	}
	for _, l := range certificateLogins(pgconf.ReplicationAuthSCRAM) {
		t.Errorf("without a client CA, %s still logs in by certificate", l.Role)
	}
}
