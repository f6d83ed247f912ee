package instance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
)

// minWALSwitchInterval is the least time between two WAL switches this
// manager makes: a switch is harmless, but each one that has WAL to close
// makes a segment to archive, and a caller in a loop must not fill the
// archive with them.
const minWALSwitchInterval = 5 * time.Second

// walSwitches remembers the last switch, for throttling.
type walSwitches struct {
	mu   sync.Mutex
	at   time.Time
	last instanceapi.WALSwitchResult
}

// errNotPrimary refuses a WAL switch on a standby, where PostgreSQL
// cannot switch.
var errNotPrimary = errors.New("this instance is a standby: only the primary can switch WAL")

// SwitchWAL makes the primary close its WAL segment in progress
// (pg_switch_wal()), so that it is archived now: the operator asks for it
// while a standby's base backup waits for its last segment, which the
// primary would otherwise archive only at archive_timeout. It switches at
// most once per minWALSwitchInterval.
func (m *Manager) SwitchWAL(ctx context.Context) (instanceapi.WALSwitchResult, error) {
	s := &m.walSwitches
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.at.IsZero() && time.Since(s.at) < minWALSwitchInterval {
		res := s.last
		res.Throttled = true
		return res, nil
	}
	conn, err := m.connect(ctx)
	if err != nil {
		return instanceapi.WALSwitchResult{}, fmt.Errorf("while connecting to switch WAL: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var standby bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby); err != nil {
		return instanceapi.WALSwitchResult{}, fmt.Errorf("while asking whether the instance is a standby: %w", err)
	}
	if standby {
		return instanceapi.WALSwitchResult{}, errNotPrimary
	}
	var res instanceapi.WALSwitchResult
	err = conn.QueryRow(ctx, "SELECT lsn::text, pg_walfile_name(lsn) FROM pg_switch_wal() AS lsn").Scan(&res.LSN, &res.Segment)
	if err != nil {
		return instanceapi.WALSwitchResult{}, fmt.Errorf("while switching WAL: %w", err)
	}
	s.at, s.last = time.Now(), res
	m.log.Info("Switched WAL", "lsn", res.LSN, "segment", res.Segment)
	return res, nil
}

// serveWALSwitch is POST /v1/wal/switch: 200 with the result, 409 on a
// standby or when postgres cannot be asked.
func (m *Manager) serveWALSwitch(w http.ResponseWriter, r *http.Request) {
	res, err := m.SwitchWAL(r.Context())
	reply(w, res, err)
}
