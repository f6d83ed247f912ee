package instance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// errNotAnswering: the primary's postgres did not answer a trivial query in
// time, so it does not renew its Lease.
var errNotAnswering = errors.New("postgres did not answer")

// healthSession is how the primary's health check asks postgres. The
// query runs on a session that stays open from one check to the next:
// opening a session forks a backend and reads catalog files, which on a
// busy node (a base backup's checkpoint, a saturated CPU) took longer than
// the query may wait, and primaries fenced themselves for it, causing
// needless failovers. That the postmaster still accepts sessions is
// checked apart, with more patience: a new session is opened in the
// background at each check, and the postmaster must have accepted one
// within two renewal periods. A stopped postmaster lets the open sessions
// run on but serves no new client; it is failed over too, a little later.
type healthSession struct {
	mu   sync.Mutex
	conn *pgx.Conn

	// lastAccepted is when postgres last accepted a new session,
	// lastCheck when a check last ran; probing says a background probe
	// is under way.
	probeMu      sync.Mutex
	lastAccepted time.Time
	lastCheck    time.Time
	probing      bool
}

// checkAnswers says why not when postgres did not answer SELECT 1 within
// half the renewal period (plus the time to open a session, when the last
// one broke), or has accepted no new session for two renewal periods. The
// query runs in a goroutine of its own: whatever blocks it, the run loop
// waits no longer than the bound, and the goroutine ends when its context
// does.
func (m *Manager) checkAnswers(ctx context.Context) error {
	bound := m.opts.Lease.RenewEvery / 2
	m.health.probeAccepts(ctx, 4*bound, m.connect)
	queryCtx, cancel := context.WithTimeout(ctx, 2*bound)
	defer cancel()
	answered := make(chan error, 1)
	go func() { answered <- m.health.selectOne(queryCtx, bound, m.connect) }()
	select {
	case err := <-answered:
		if err != nil {
			return fmt.Errorf("%w within %s: %w", errNotAnswering, bound, err)
		}
	case <-queryCtx.Done():
		return fmt.Errorf("%w within %s", errNotAnswering, bound)
	}
	if since := time.Since(m.health.accepted()); since > 4*bound {
		return fmt.Errorf("%w: it has accepted no new session for %s", errNotAnswering, since.Truncate(time.Second))
	}
	return nil
}

// selectOne runs SELECT 1 within bound on the open session, opening one
// first when there is none. A session that fails is closed; when it was an
// old one (postgres restarted since, say), the query is tried once more on
// a new session, so a restart does not cost a renewal. A check that finds
// the previous one still running fails at once rather than queue behind it.
func (s *healthSession) selectOne(ctx context.Context, bound time.Duration, connect func(context.Context) (*pgx.Conn, error)) error {
	if !s.mu.TryLock() {
		return errors.New("the previous health query has not returned")
	}
	defer s.mu.Unlock()
	reused := s.conn != nil
	err := s.query(ctx, bound, connect)
	if err != nil && reused && ctx.Err() == nil {
		err = s.query(ctx, bound, connect)
	}
	return err
}

func (s *healthSession) query(ctx context.Context, bound time.Duration, connect func(context.Context) (*pgx.Conn, error)) error {
	if s.conn == nil {
		conn, err := connect(ctx)
		if err != nil {
			return err
		}
		s.conn = conn
		s.recordAccepted()
	}
	queryCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var one int
	err := s.conn.QueryRow(queryCtx, "SELECT 1").Scan(&one)
	if err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
		defer cancel()
		_ = s.conn.Close(closeCtx)
		s.conn = nil
	}
	return err
}

// probeAccepts opens and closes a new session in the background, unless a
// probe is under way, giving up after timeout.
func (s *healthSession) probeAccepts(ctx context.Context, timeout time.Duration, connect func(context.Context) (*pgx.Conn, error)) {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	now := time.Now()
	if now.Sub(s.lastCheck) > timeout {
		// The first check in a while (a primary that just started, took
		// over or came out of a fence): a new watch, with the whole window.
		s.lastAccepted = now
	}
	s.lastCheck = now
	if s.probing {
		return
	}
	s.probing = true
	go func() {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		conn, err := connect(ctx)
		if err == nil {
			_ = conn.Close(ctx)
			s.recordAccepted()
		}
		s.probeMu.Lock()
		s.probing = false
		s.probeMu.Unlock()
	}()
}

func (s *healthSession) recordAccepted() {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	s.lastAccepted = time.Now()
}

func (s *healthSession) accepted() time.Time {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	return s.lastAccepted
}
