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
	m.mu.Lock()
	m.state.fenced = false
	m.mu.Unlock()
	return true
}

// keepLease runs every renewal period. The primary renews its Lease; an
// instance that is not the primary releases the Lease if it held it (after
// a demote) and watches it, so that it can judge its expiry when promoted.
func (m *Manager) keepLease(ctx context.Context) {
	if m.snapshot().role != instanceapi.RolePrimary {
		m.watchLease(ctx)
		return
	}
	m.renewLease(ctx)
}

func (m *Manager) watchLease(ctx context.Context) {
	if !m.lease.lastRenew.IsZero() {
		if err := m.lease.release(ctx); err != nil {
			m.log.Error(err, "Releasing the primary Lease")
		}
	}
	if err := m.lease.watch(ctx); err != nil {
		// Not an emergency: a promotion then waits a full duration from
		// the promote call instead.
		m.log.V(1).Info("Could not read the primary Lease", "error", err.Error())
	}
}

// renewLease renews the primary's Lease; fences postgres when renewals have
// failed so long that the Lease may expire in the operator's eyes, and
// starts it again once the Lease is held again. A primary fenced by hand
// renews too: it is still the primary, only stopped, and the operator does
// not fail it over; losing the Lease would let it.
func (m *Manager) renewLease(ctx context.Context) {
	st := m.snapshot()
	err := m.lease.hold(ctx)
	switch {
	case err == nil && st.fenced:
		m.leaseRegained(ctx)
	case err != nil && st.fenced:
		m.markFenced(err) // the latest reason, such as the new holder
	case err != nil && m.lease.mustFence():
		m.fence(err)
	case err != nil:
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
	m.markFenced(reason)
}

// markFenced records a Lease fence and why.
func (m *Manager) markFenced(reason error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state.fenced = true
	m.state.phase = instanceapi.PhaseFenced
	m.state.lastError = m.state.fenceMessage("fenced: " + reason.Error())
}

// leaseRegained lifts the Lease fence once the Lease is held again, and
// starts postgres unless it is also fenced by hand: only POST /v1/unfence
// lifts that one.
func (m *Manager) leaseRegained(ctx context.Context) {
	m.mu.Lock()
	m.state.fenced = false
	byHand := m.state.fencedByHand
	m.state.lastError = m.state.fenceMessage("")
	m.mu.Unlock()
	if byHand {
		m.log.Info("Holding the primary Lease again; postgres stays stopped: it is fenced by hand")
		return
	}
	m.log.Info("Holding the primary Lease again; starting postgres")
	if err := m.startPostgres(ctx); err != nil {
		m.setError(err)
	}
}
