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
	"tusk.dev/tusk/internal/instance/sqlobjects"
	"tusk.dev/tusk/internal/instanceapi"
)

// The errors of a declarative SQL apply, as sqlobjects has them:
// checkWritable returns them too.
var (
	errNotWritable  = sqlobjects.ErrNotWritable
	errPostgresDown = sqlobjects.ErrPostgresDown
)

// sqlObjects is the applier of the SQL objects users declare, over this
// manager's port: a writable session to a named database.
func (m *Manager) sqlObjects() *sqlobjects.Objects {
	return sqlobjects.New(sqlobjects.Port{
		ConnectWritable: m.connectWritable,
		Log:             m.log,
		Owner:           m.opts.InitDB.Owner,
		SuperuserAccess: func() bool { return m.snapshot().config.SuperuserRemoteAccess },
		RunDir:          m.opts.RunDir,
	})
}

// applyStatus is the HTTP status of an apply's error.
func applyStatus(err error) int {
	switch {
	case errors.Is(err, errNotWritable), errors.Is(err, errNotPrimary):
		return http.StatusConflict
	case errors.Is(err, errPostgresDown):
		return http.StatusServiceUnavailable
	case errors.Is(err, sqlobjects.ErrBusy):
		return http.StatusLocked
	}
	if sqlobjects.IsRefusal(err) {
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
			writeJSON(w, applyStatus(err), map[string]string{"error": sqlobjects.RedactVerifiers(err.Error())})
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
			return nil, sqlobjects.MissingDatabase(database)
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

// serveSlots is GET PathSQLSlots.
func (m *Manager) serveSlots(w http.ResponseWriter, r *http.Request) {
	st, err := m.sqlObjects().Slots(r.Context())
	if err != nil {
		m.log.Error(err, "Reading the replication slots")
		writeJSON(w, applyStatus(err), map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, st)
}
