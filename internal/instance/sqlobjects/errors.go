package sqlobjects

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"tusk.dev/tusk/internal/instanceapi"
)

// The errors of an apply, which the manager's HTTP routes map to a
// status (see instanceapi's PathSQLRoles): ErrNotWritable 409, a refusal
// (IsRefusal) 422, ErrBusy 423, ErrPostgresDown 503. Other errors are
// 500.
var (
	// ErrNotWritable: this instance is not a writable primary.
	ErrNotWritable = errors.New("this instance is not a writable primary")
	// ErrPostgresDown: postgres does not accept connections yet.
	ErrPostgresDown = errors.New("postgres is not accepting connections")
	// ErrBusy: another session holds the apply lock; try again later.
	ErrBusy = errors.New("another session holds the lock of the SQL applies")
)

// refusal is a request refused as it stands; nothing was changed.
// missingDatabase marks the refusal of a database that does not exist,
// which an object asked to be absent takes for "nothing to drop".
type refusal struct {
	reason          string
	missingDatabase bool
}

func (r *refusal) Error() string { return r.reason }

// IsRefusal says whether err is, or wraps, a request refused as it
// stands.
func IsRefusal(err error) bool {
	_, ok := errors.AsType[*refusal](err)
	return ok
}

// MissingDatabase is the refusal of a request in a database that does not
// exist.
func MissingDatabase(database string) error {
	return &refusal{reason: fmt.Sprintf("database %s does not exist", database), missingDatabase: true}
}

// nothingToDrop says whether err is a missing database for a request
// that drops: it is done.
func nothingToDrop(ensure instanceapi.Ensure, err error) bool {
	r, ok := errors.AsType[*refusal](err)
	return ok && r.missingDatabase && ensure == instanceapi.EnsureAbsent
}

// refuse returns a refusal with a formatted reason.
func refuse(format string, args ...any) error {
	return &refusal{reason: fmt.Sprintf(format, args...)}
}

// classifyPostgresError maps what PostgreSQL, or the session to it, said
// of a statement to the apply's errors: a read-only server is no writable
// primary (409); a session that broke, or a server going away, is
// postgres not up (503); running out of resources or an internal error
// stays what it is (500); anything else PostgreSQL refused in the
// request itself (an unknown parameter or object, one in use or depended
// upon, an invalid value) is a refusal (422). A statement's transaction
// was rolled back. Verifiers are redacted from the refusal's text.
func classifyPostgresError(err error) error {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok {
		if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
			return fmt.Errorf("%w: %w", ErrPostgresDown, err)
		}
		return err
	}
	switch class := pgErr.Code[:2]; {
	case pgErr.Code == "25006": // read_only_sql_transaction
		return fmt.Errorf("%w: %w", ErrNotWritable, err)
	case class == "08" || class == "57": // connection exception, operator intervention
		return fmt.Errorf("%w: %w", ErrPostgresDown, err)
	case class == "53" || class == "58" || class == "XX": // resources, system, internal
		return err
	}
	return &refusal{reason: RedactVerifiers(err.Error())}
}
