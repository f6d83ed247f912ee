package pooler

import (
	"fmt"
	"strings"
)

// AuthRole is the role every pooler looks users up as: a login with no
// password, let in by a client certificate only. Roles named tusk_* are
// Tusk's (the API refuses them in a PostgresRole).
const AuthRole = "tusk_pooler_auth"

// AuthSchema holds the lookup function; AuthQuery is how PgBouncer calls it.
const (
	AuthSchema   = "tusk_pooler"
	AuthFunction = AuthSchema + ".user_verifier"
	AuthQuery    = "SELECT username, verifier FROM " + AuthFunction + "($1)"
)

// AuthFunctionSQL is what a superuser runs, in the pooler's auth database,
// so that authRole can look up one user's password verifier and nothing
// else: a function owned by the superuser, running with its rights
// (SECURITY DEFINER, with a search_path no other role can write to), that
// returns the verifier of the role asked for (no row for any other: a
// record of NULLs would make PgBouncer drop its lookup connection and
// answer "bouncer config error"); EXECUTE is granted to
// authRole alone. Superusers, replication roles, roles without a password
// (Tusk's, and those that log in with a certificate) and Tusk's own roles
// (tusk_*) are never returned, so they cannot log in through the pooler. The role itself is made
// elsewhere (a login with no password, that pg_hba.conf lets in with a
// client certificate only). The statements may run again: they replace
// what they made.
func AuthFunctionSQL(authRole string) []string {
	role := quoteIdent(authRole)
	return []string{
		"CREATE SCHEMA IF NOT EXISTS " + AuthSchema,
		"REVOKE ALL ON SCHEMA " + AuthSchema + " FROM PUBLIC",
		`CREATE OR REPLACE FUNCTION ` + AuthFunction + `(role_name text)
RETURNS TABLE (username text, verifier text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT rolname::text, rolpassword
FROM pg_catalog.pg_authid
WHERE rolname = role_name AND rolcanlogin AND NOT rolsuper AND NOT rolreplication
  AND rolpassword IS NOT NULL AND rolname NOT LIKE 'tusk\_%'
  AND (rolvaliduntil IS NULL OR rolvaliduntil > pg_catalog.now())
$$`,
		"REVOKE ALL ON FUNCTION " + AuthFunction + "(text) FROM PUBLIC",
		fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s", AuthSchema, role),
		fmt.Sprintf("GRANT EXECUTE ON FUNCTION %s(text) TO %s", AuthFunction, role),
	}
}

// quoteIdent quotes a PostgreSQL identifier (pgx.Identifier's rule,
// without importing pgx into a leaf package).
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
