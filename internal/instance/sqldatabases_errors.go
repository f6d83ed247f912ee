package instance

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// classifyDatabaseError maps what PostgreSQL said of a statement to the
// contract's errors: a read-only server is no writable primary, a server
// going away is not up, and what PostgreSQL refuses in the request itself
// (an object in use or depended upon, an invalid name or value) is a
// refusal. The statement's transaction was rolled back.
func classifyDatabaseError(err error) error {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok {
		if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
			return fmt.Errorf("%w: %w", errPostgresDown, err)
		}
		return err
	}
	switch {
	case pgErr.Code == "25006": // read_only_sql_transaction
		return fmt.Errorf("%w: %w", errNotWritable, err)
	case strings.HasPrefix(pgErr.Code, "08"), strings.HasPrefix(pgErr.Code, "57P"): // connection, shutdown
		return fmt.Errorf("%w: %w", errPostgresDown, err)
	case pgErr.Code == "55006", // object_in_use
		pgErr.Code == "2BP01",               // dependent_objects_still_exist
		pgErr.Code == "0A000",               // feature_not_supported (SET SCHEMA of a fixed extension)
		strings.HasPrefix(pgErr.Code, "22"), // data exception (an invalid locale, encoding)
		strings.HasPrefix(pgErr.Code, "42"), // an undefined or duplicate object
		strings.HasPrefix(pgErr.Code, "3D"), // invalid catalog name
		strings.HasPrefix(pgErr.Code, "3F"): // invalid schema name
		return &refusal{reason: err.Error()}
	}
	return err
}
