package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"tusk.dev/tusk/internal/instance/lifecycle"
	"tusk.dev/tusk/internal/instanceapi"
)

// The errors of a declarative SQL apply, each with its HTTP status (see
// instanceapi's PathSQLRoles): errNotWritable 409, a refusal 422,
// errPostgresDown 503. Other errors are 500.
var (
	// errNotWritable: this instance is not a writable primary.
	errNotWritable = errors.New("this instance is not a writable primary")
	// errPostgresDown: postgres does not accept connections yet.
	errPostgresDown = errors.New("postgres is not accepting connections")
)

// refusal is a request refused as it stands; nothing was changed.
// missingDatabase marks the refusal of a database that does not exist,
// which an object asked to be absent takes for "nothing to drop".
type refusal struct {
	reason          string
	missingDatabase bool
}

// nothingToDrop says whether err is a missing database for a request
// that drops: it is done.
func nothingToDrop(ensure instanceapi.Ensure, err error) bool {
	r, ok := errors.AsType[*refusal](err)
	return ok && r.missingDatabase && ensure == instanceapi.EnsureAbsent
}

func (r *refusal) Error() string { return r.reason }

// refuse returns a refusal with a formatted reason.
func refuse(format string, args ...any) error {
	return &refusal{reason: fmt.Sprintf(format, args...)}
}

// applyStatus is the HTTP status of an apply's error.
func applyStatus(err error) int {
	switch {
	case errors.Is(err, errNotWritable), errors.Is(err, errNotPrimary):
		return http.StatusConflict
	case errors.Is(err, errPostgresDown):
		return http.StatusServiceUnavailable
	}
	if _, ok := errors.AsType[*refusal](err); ok {
		return http.StatusUnprocessableEntity
	}
	return http.StatusInternalServerError
}

// maxApplyBody bounds a request's body: one object's desired state.
const maxApplyBody = 1 << 20

// serveApply decodes a request of type T, applies it and replies with the
// ApplyResult, or with {"error": ...} and the status applyStatus gives.
func serveApply[T any](apply func(context.Context, T) (instanceapi.ApplyResult, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req T
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxApplyBody)).Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the request does not decode: " + err.Error()})
			return
		}
		res, err := apply(r.Context(), req)
		if err != nil {
			writeJSON(w, applyStatus(err), map[string]string{"error": redactVerifiers(err.Error())})
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// checkWritable refuses (409) an instance that is not a writable
// primary, and (503) one whose postgres is not up.
func (m *Manager) checkWritable() error {
	st := m.snapshot()
	if st.role != instanceapi.RolePrimary {
		return fmt.Errorf("%w: this instance is a %s", errNotWritable, st.role)
	}
	refusal := st.life.WriteRefusal()
	if _, down := errors.AsType[lifecycle.NotRunningError](refusal); down {
		return fmt.Errorf("%w (%w)", errPostgresDown, refusal)
	}
	if refusal != nil {
		return fmt.Errorf("%w: %w", errNotWritable, refusal)
	}
	return nil
}

// connectWritable opens a superuser session to database on a writable
// primary, checked again in the session (pg_is_in_recovery).
func (m *Manager) connectWritable(ctx context.Context, database string) (*pgx.Conn, error) {
	if err := m.checkWritable(); err != nil {
		return nil, err
	}
	conn, err := m.connectDatabase(ctx, database)
	if err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "3D000" {
			return nil, &refusal{reason: fmt.Sprintf("database %s does not exist", database), missingDatabase: true}
		}
		if _, ok := errors.AsType[*pgconn.PgError](err); ok {
			return nil, fmt.Errorf("while connecting to database %s: %w", database, err)
		}
		return nil, fmt.Errorf("%w: %w", errPostgresDown, err)
	}
	var standby bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("while asking whether the instance is a standby: %w", err)
	}
	if standby {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: postgres is in recovery", errNotWritable)
	}
	return conn, nil
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
			return fmt.Errorf("%w: %w", errPostgresDown, err)
		}
		return err
	}
	switch class := pgErr.Code[:2]; {
	case pgErr.Code == "25006": // read_only_sql_transaction
		return fmt.Errorf("%w: %w", errNotWritable, err)
	case class == "08" || class == "57": // connection exception, operator intervention
		return fmt.Errorf("%w: %w", errPostgresDown, err)
	case class == "53" || class == "58" || class == "XX": // resources, system, internal
		return err
	}
	return &refusal{reason: redactVerifiers(err.Error())}
}
