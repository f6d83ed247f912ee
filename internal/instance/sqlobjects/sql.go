package sqlobjects

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
)

// Ident quotes name as an SQL identifier.
func Ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// Literal quotes s as an SQL string literal (standard_conforming_strings).
func Literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// CreateCertificateLoginGroup creates the certificate login group unless
// it exists, also when another session creates it at the same time (an
// apply granting it, while the manager makes its roles).
var CreateCertificateLoginGroup = "DO $$BEGIN CREATE ROLE " + Ident(instanceapi.CertificateLoginRole) + ` WITH NOLOGIN;
	EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END$$`

// QuietRoleStatements keeps the statements of conn's session out of the
// server's log, whatever the user set log_statement to, also when one
// fails: a statement that sets a password holds its SCRAM verifier, which
// is not the password but lets whoever reads the log try passwords offline
// and pose as the server.
func QuietRoleStatements(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "SET log_statement = 'none'; SET log_min_error_statement = 'panic'"); err != nil {
		return fmt.Errorf("while keeping the password statements out of the log: %w", err)
	}
	return nil
}

// scramVerifierPattern matches a SCRAM verifier (RFC 5803 form).
var scramVerifierPattern = regexp.MustCompile(`SCRAM-SHA-256\$[^'"\s]*`)

// RedactVerifiers replaces the SCRAM verifiers in a tool's output (a
// single-user backend's echo of a failed statement) before it reaches a
// log or status.
func RedactVerifiers(s string) string {
	return scramVerifierPattern.ReplaceAllString(s, "SCRAM-SHA-256$<redacted>")
}

// maxIdentifierLength is PostgreSQL's NAMEDATALEN-1: it truncates longer
// names, which would then never match the request's.
const maxIdentifierLength = 63
