package instance

import (
	"context"
	"errors"
	"time"

	"tusk.dev/tusk/internal/instance/supervisor"
	"tusk.dev/tusk/internal/instanceapi"
)

// errFenced refuses to start postgres while the primary is fenced.
var errFenced = errors.New("this primary is fenced: it does not hold the primary Lease")

// startLeaseTicker ticks every renewal period; nil (never) without a Lease.
func (m *Manager) startLeaseTicker() (tick <-chan time.Time, stop func()) {
	if m.lease == nil {
		return nil, func() {}
	}
	ticker := time.NewTicker(m.opts.Lease.RenewEvery)
	return ticker.C, ticker.Stop
}

// mayStart says postgres may start now: a primary first takes the Lease,
// and stays fenced (postgres stopped) while another instance holds it.
func (m *Manager) mayStart(ctx context.Context) bool {
	if m.lease == nil || m.snapshot().role != instanceapi.RolePrimary {
		return true
	}
	if err := m.lease.hold(ctx); err != nil {
		m.fence(err)
		return false
	}
	return true
}

// keepLease renews the primary's Lease; fences postgres when renewals have
// failed so long that the Lease may expire in the operator's eyes, and
// starts it again once the Lease is held again. A replica holds no Lease.
func (m *Manager) keepLease(ctx context.Context) {
	st := m.snapshot()
	if st.role != instanceapi.RolePrimary {
		if !m.lease.lastRenew.IsZero() {
			if err := m.lease.release(ctx); err != nil {
				m.log.Error(err, "Releasing the primary Lease")
			}
		}
		return
	}
	err := m.lease.hold(ctx)
	switch {
	case err == nil && st.fenced:
		m.unfence(ctx)
	case err != nil && !st.fenced && m.lease.mustFence():
		m.fence(err)
	case err != nil && !st.fenced:
		m.log.Info("Could not renew the primary Lease", "error", err.Error())
	}
}

// fence stops postgres at once (immediate shutdown: open sessions end too,
// so no commit is acknowledged after this) and keeps it stopped.
func (m *Manager) fence(reason error) {
	m.log.Info("Fencing this primary: it cannot hold the primary Lease", "reason", reason.Error())
	if err := m.stopPostgres(supervisor.Immediate); err != nil {
		m.log.Error(err, "Stopping postgres to fence it")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state.fenced = true
	m.state.phase = instanceapi.PhaseFenced
	m.state.lastError = "fenced: " + reason.Error()
}

// unfence starts postgres again once the Lease is held.
func (m *Manager) unfence(ctx context.Context) {
	m.mu.Lock()
	m.state.fenced = false
	m.mu.Unlock()
	m.log.Info("Holding the primary Lease again; starting postgres")
	if err := m.startPostgres(ctx); err != nil {
		m.setError(err)
	}
}
