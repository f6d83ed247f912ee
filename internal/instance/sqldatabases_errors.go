package instance

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"tusk.dev/tusk/internal/instanceapi"
)

// databaseRefusal refuses a DatabaseRequest as it stands (422): the error
// says why, and nothing was changed.
type databaseRefusal struct{ msg string }

func (e *databaseRefusal) Error() string { return e.msg }

var (
	// errDatabaseNotPrimary: only a writable primary applies a database
	// (409).
	errDatabaseNotPrimary = errors.New("this instance is not a writable primary")
	// errDatabasePostgresDown: postgres is not accepting connections yet
	// (503).
	errDatabasePostgresDown = errors.New("postgres is not accepting connections")
)

// serveApplyDatabase is PUT /v1/sql/databases: 200 with the ApplyResult,
// 400 when the body does not decode, 409 on anything but a writable
// primary, 422 for a refusal, 503 while postgres is not up.
func (m *Manager) serveApplyDatabase(w http.ResponseWriter, r *http.Request) {
	var req instanceapi.DatabaseRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid database request: " + err.Error()})
		return
	}
	res, err := m.ApplyDatabase(r.Context(), req)
	if err != nil {
		writeJSON(w, databaseErrorStatus(err), map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// databaseErrorStatus is the HTTP status of an ApplyDatabase error.
func databaseErrorStatus(err error) int {
	if _, ok := errors.AsType[*databaseRefusal](err); ok {
		return http.StatusUnprocessableEntity
	}
	switch {
	case errors.Is(err, errDatabaseNotPrimary):
		return http.StatusConflict
	case errors.Is(err, errDatabasePostgresDown):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// classifyDatabaseError maps what PostgreSQL said of a statement to the
// contract's errors: a read-only server is no writable primary, a server
// going away is not up, and what PostgreSQL refuses in the request itself
// (an object in use or depended upon, an invalid name or value) is a
// refusal. The statement's transaction was rolled back.
func classifyDatabaseError(err error) error {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok {
		if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
			return fmt.Errorf("%w: %w", errDatabasePostgresDown, err)
		}
		return err
	}
	switch {
	case pgErr.Code == "25006": // read_only_sql_transaction
		return fmt.Errorf("%w: %w", errDatabaseNotPrimary, err)
	case strings.HasPrefix(pgErr.Code, "08"), strings.HasPrefix(pgErr.Code, "57P"): // connection, shutdown
		return fmt.Errorf("%w: %w", errDatabasePostgresDown, err)
	case pgErr.Code == "55006", // object_in_use
		pgErr.Code == "2BP01",               // dependent_objects_still_exist
		pgErr.Code == "0A000",               // feature_not_supported (SET SCHEMA of a fixed extension)
		strings.HasPrefix(pgErr.Code, "22"), // data exception (an invalid locale, encoding)
		strings.HasPrefix(pgErr.Code, "42"), // an undefined or duplicate object
		strings.HasPrefix(pgErr.Code, "3D"), // invalid catalog name
		strings.HasPrefix(pgErr.Code, "3F"): // invalid schema name
		return &databaseRefusal{msg: err.Error()}
	}
	return err
}
