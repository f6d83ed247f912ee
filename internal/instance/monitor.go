package instance

import (
	"context"
	"errors"
	"fmt"
	"os/user"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"tusk.dev/tusk/internal/instance/pgconf"
)

// monitorSession is a long-lived session the manager observes postgres
// through: as the monitoring role (pg_monitor's rights, never a
// superuser's), which logs in without a password by peer authentication
// over the pod's Unix socket, from the manager's own OS user only
// (pgconf.PgIdent). One query runs on it at a time, so no number of
// callers spends more than this one session of postgres. The manager keeps
// two: one for its status and readiness, one for metrics, whose queries
// (database sizes) may take long enough to delay a readiness probe.
type monitorSession struct {
	purpose string // for the log: what the session is for
	mu      sync.Mutex
	conn    *pgx.Conn
	// asSuperuser: the last attempt could not log in as the monitoring
	// role (see withSuperuser), logged once until it can again.
	asSuperuser bool
	// inUse is the session a query runs on (this one or a superuser's),
	// which close cuts without waiting for the query.
	inUse atomic.Pointer[pgx.Conn]
}

// observe runs fn on the session, opening it when there is none, or when
// the one it had broke (postgres restarted, or ended the session): then fn
// runs again on the new one. It opens none while postgres is stopping or
// stopped: a session left open would hold up a smart shutdown.
func (s *monitorSession) observe(ctx context.Context, m *Manager, fn func(context.Context, *pgx.Conn) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && !s.conn.IsClosed() {
		err := s.run(ctx, s.conn, fn)
		if err == nil || !s.conn.IsClosed() || ctx.Err() != nil {
			return err
		}
	}
	if err := s.open(ctx, m); err != nil {
		if isLoginRefused(err) {
			return s.withSuperuser(ctx, m, err, fn)
		}
		return err
	}
	return s.run(ctx, s.conn, fn)
}

// run runs fn on conn, where close can cut it.
func (s *monitorSession) run(ctx context.Context, conn *pgx.Conn, fn func(context.Context, *pgx.Conn) error) error {
	s.inUse.Store(conn)
	defer s.inUse.Store(nil)
	return fn(ctx, conn)
}

// open replaces the session with a new one, as the monitoring role.
// Callers hold s.mu.
func (s *monitorSession) open(ctx context.Context, m *Manager) error {
	s.closeLocked()
	if !m.running() {
		return errors.New("postgres does not run")
	}
	cfg, err := m.localConfig(monitorRole, "")
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	if s.asSuperuser {
		m.log.Info("The monitoring role logs in again: observing postgres without the superuser", "for", s.purpose)
		s.asSuperuser = false
	}
	s.conn = conn
	return nil
}

// withSuperuser runs fn on a superuser session that is closed at once,
// when the monitoring role may not log in: a replica whose primary ran a
// manager from before the role could, until the primary's grant
// (grantMonitorRights) replays here, or a manager whose OS user
// pg_ident.conf cannot name. Readiness must not wait for either.
func (s *monitorSession) withSuperuser(ctx context.Context, m *Manager, refused error, fn func(context.Context, *pgx.Conn) error) error {
	if !s.asSuperuser {
		m.log.Info("The monitoring role may not log in: observing postgres as the superuser, a session at a time closed at once, until it can",
			"for", s.purpose, "error", refused.Error())
		s.asSuperuser = true
	}
	conn, err := m.connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	return s.run(ctx, conn, fn)
}

// close ends the session; the caller has made sure no new one opens
// (postgres no longer counts as running). A query under way is cut rather
// than waited for: postgres is being stopped, perhaps fenced because it
// hangs, and its stop must not wait for a query's time limit.
func (s *monitorSession) close() {
	if !s.mu.TryLock() {
		if conn := s.inUse.Load(); conn != nil {
			// The network connection alone may be closed from another
			// goroutine; the query on it fails at once.
			_ = conn.PgConn().Conn().Close()
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	s.closeLocked()
}

func (s *monitorSession) closeLocked() {
	if s.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.conn.Close(ctx)
	s.conn = nil
}

// isLoginRefused says whether err is PostgreSQL refusing a login (no such
// role, a role that may not log in, peer authentication failing), rather
// than postgres not answering.
func isLoginRefused(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return isAuthFailure(err) || ok && pgErr.Code == "28000" // invalid_authorization_specification
}

// monitorLogin is who may log in as the monitoring role: this process's
// OS user, the one postgres runs as. nil when pg_ident.conf cannot name it
// (the manager then observes as the superuser: withSuperuser).
func monitorLogin() (*pgconf.MonitorLogin, error) {
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("while looking up the manager's OS user: %w", err)
	}
	login := &pgconf.MonitorLogin{Role: monitorRole, SystemUser: u.Username}
	if _, err := pgconf.PgIdent(login); err != nil {
		return nil, err
	}
	return login, nil
}
