package instance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"tusk.dev/tusk/internal/instance/lifecycle"
	"tusk.dev/tusk/internal/instance/supervisor"
	"tusk.dev/tusk/internal/instanceapi"
)

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
	m.record(lifecycle.LeaseRegained)
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
	err := m.mayRenew(ctx, st)
	if err == nil {
		err = m.lease.hold(ctx)
	}
	if err == nil {
		m.lease.renewed.Add(1)
	} else {
		m.lease.renewFailed.Add(1)
	}
	switch {
	case err == nil && st.life.LeaseFenced():
		m.leaseRegained(ctx)
	case err != nil && st.life.LeaseFenced():
		m.markFenced(err) // the latest reason, such as the new holder
	case err != nil && m.lease.mustFence():
		m.fence(err)
	case errors.Is(err, errNotAnswering):
		m.log.Info("Not renewing the primary Lease: postgres does not answer", "error", err.Error())
	case err != nil:
		m.log.Info("Could not renew the primary Lease", "error", err.Error())
	}
}

// mayRenew says why the primary must not renew its Lease now, or nil.
//
// A running postgres must answer first: a primary whose postgres hangs
// (every process stopped, a stuck disk) takes no writes, and renewing
// would keep the operator from failing it over; not renewing fences it
// (below) and lets the Lease expire. Only a running postgres is asked:
// while it starts (a long crash recovery) or is stopped for an operation
// or by hand, it is still the primary, nobody else has its data, and
// another instance taking over would only lose writes.
//
// A primary fenced because postgres did not answer leaves its Lease
// alone for two durations after its last renewal: time for the operator
// to promote a replica once the Lease expired. Only then does it try to
// take the Lease again, and start postgres afresh, which heals an instance
// that nobody replaced (a lone one) in place.
func (m *Manager) mayRenew(ctx context.Context, st state) error {
	if st.life.LeaseFenced() && m.lease.now().Before(m.leaseLeftUntil) {
		return fmt.Errorf("%w; leaving the primary Lease to another instance until %s", m.leaseLeftFor, m.leaseLeftUntil.UTC().Format(time.RFC3339))
	}
	if st.life.Phase() != instanceapi.PhaseRunning {
		return nil
	}
	return m.checkAnswers(ctx)
}

// fenceKillAfter bounds the immediate shutdown of a fence: a postmaster
// that does not act on it at once (stopped, or stuck) is killed with every
// process it started, so that no open session commits after the fence.
const fenceKillAfter = time.Second

// fence stops postgres at once (immediate shutdown: open sessions end too,
// so no commit is acknowledged after this; killed when that takes more
// than fenceKillAfter) and keeps it stopped.
func (m *Manager) fence(reason error) {
	m.log.Info("Fencing this primary: it cannot hold the primary Lease", "reason", reason.Error())
	if errors.Is(reason, errNotAnswering) {
		m.leaseLeftUntil = m.lease.lastRenew.Add(2 * m.opts.Lease.Duration)
		m.leaseLeftFor = reason
	}
	if err := m.stopPostgresWithin(supervisor.Immediate, supervisor.Timeouts{Immediate: fenceKillAfter}); err != nil {
		m.log.Error(err, "Stopping postgres to fence it")
	}
	m.markFenced(reason)
}

// markFenced records a Lease fence and why.
func (m *Manager) markFenced(reason error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recordLocked(lifecycle.LeaseLost)
	m.state.lastError = m.state.fenceMessage("fenced: " + reason.Error())
}

// leaseRegained lifts the Lease fence once the Lease is held again, and
// starts postgres unless it is also fenced by hand: only POST /v1/unfence
// lifts that one.
func (m *Manager) leaseRegained(ctx context.Context) {
	m.mu.Lock()
	m.recordLocked(lifecycle.LeaseRegained)
	byHand := m.state.life.FencedByHand()
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

// giveUpPrimary makes a primary whose postgres is crash-looping step
// aside: postgres has exited already, so it stays stopped (fenced) and the
// Lease is released at once, which lets the operator promote a replica
// that runs without waiting for the Lease to expire. The Lease is left to
// another instance for one duration; if nobody took it by then (a lone
// instance, or no replica the operator may promote) this one takes it
// again and starts postgres afresh. It reports false, and does nothing,
// for an instance that is not a leased primary.
func (m *Manager) giveUpPrimary(ctx context.Context) bool {
	st := m.snapshot()
	if m.lease == nil || st.role != instanceapi.RolePrimary || st.life.KeptStopped() {
		return false
	}
	reason := fmt.Errorf("%w (%d runs in a row ended within %s: %s)", errCrashLoop, m.crashes.streak, crashLoopStableRun, st.lastError)
	m.log.Info("Giving up the primary Lease: postgres keeps crashing", "reason", reason.Error())
	m.leaseLeftUntil = m.lease.now().Add(m.opts.Lease.Duration)
	m.leaseLeftFor = reason
	if err := m.lease.release(ctx); err != nil {
		// It expires by itself: the operator waits a full duration instead.
		m.log.Error(err, "Releasing the primary Lease of a crash-looping primary")
	}
	m.markFenced(reason)
	return true
}
