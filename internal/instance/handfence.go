package instance

import (
	"context"
	"errors"
	"fmt"

	"tusk.dev/tusk/internal/instance/supervisor"
	"tusk.dev/tusk/internal/instanceapi"
)

// errFencedByHand refuses what would start postgres while it is fenced by
// hand.
var errFencedByHand = errors.New("this instance is fenced by hand: POST " + instanceapi.PathUnfence + " starts postgres again")

// fenceMessage is lastError for a fenced instance: the hand fence first,
// as it is what a human must lift, then leaseReason when not empty.
func (s state) fenceMessage(leaseReason string) string {
	if !s.fencedByHand {
		return leaseReason
	}
	if leaseReason == "" {
		return errFencedByHand.Error()
	}
	return errFencedByHand.Error() + "; also " + leaseReason
}

// keptStopped says postgres must not start: fenced by hand or, for a
// primary, for want of the Lease.
func (s state) keptStopped() bool { return s.fenced || s.fencedByHand }

// Fence stops postgres by hand (POST /v1/fence) and keeps it stopped,
// through crashes, restart timers and Lease renewals, until Unfence. The
// shutdown is fast: sessions end at once, and the pod and its data stay for
// inspection. A primary keeps renewing its Lease meanwhile (see
// renewLease). Fencing a fenced instance changes nothing.
func (m *Manager) Fence(ctx context.Context) error {
	_, err := m.do(ctx, "fence", func(context.Context) (any, error) {
		m.mu.Lock()
		m.state.fencedByHand = true // first: nothing may start it from here on
		m.mu.Unlock()
		m.log.Info("Fencing this instance by hand")
		err := m.stopPostgres(supervisor.Fast)
		m.mu.Lock()
		defer m.mu.Unlock()
		m.state.phase = instanceapi.PhaseFenced
		m.state.lastError = m.state.fenceMessage(leaseFenceReason(m.state))
		return nil, err
	})
	return err
}

// leaseFenceReason is what lastError says of a Lease fence.
func leaseFenceReason(s state) string {
	if !s.fenced {
		return ""
	}
	return errFenced.Error()
}

// Unfence lifts a hand fence (POST /v1/unfence) and starts postgres. It
// does not lift a Lease fence: a primary starts only once it holds the
// Lease, or the answer is an error and it stays fenced until it does.
// Unfencing an instance not fenced by hand changes nothing.
func (m *Manager) Unfence(ctx context.Context) error {
	_, err := m.do(ctx, "unfence", func(ctx context.Context) (any, error) {
		m.mu.Lock()
		wasFenced := m.state.fencedByHand
		m.state.fencedByHand = false
		m.mu.Unlock()
		if !wasFenced || m.running() {
			return nil, nil
		}
		m.log.Info("Lifting the hand fence")
		if !m.mayStart(ctx) {
			return nil, fmt.Errorf("the hand fence is lifted, but postgres stays stopped: %s", m.snapshot().lastError)
		}
		return nil, m.startPostgres(ctx)
	})
	return err
}
