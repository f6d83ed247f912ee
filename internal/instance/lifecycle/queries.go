package lifecycle

import (
	"errors"

	"tusk.dev/tusk/internal/instanceapi"
)

// Phase is what /status reports.
func (s State) Phase() instanceapi.Phase { return s.phase }

// KeptStopped says postgres must not start: fenced by hand or, for a
// primary, for want of the Lease.
func (s State) KeptStopped() bool { return s.leaseFenced || s.handFenced }

// FencedByHand says POST /v1/fence keeps postgres stopped.
func (s State) FencedByHand() bool { return s.handFenced }

// LeaseFenced says the primary keeps postgres stopped for want of the
// Lease.
func (s State) LeaseFenced() bool { return s.leaseFenced }

// FencedBy names what keeps postgres stopped, the hand fence first (it is
// what a human must lift); "" when not fenced.
func (s State) FencedBy() instanceapi.FenceCause {
	switch {
	case s.handFenced:
		return instanceapi.FenceCauseHand
	case s.leaseFenced:
		return instanceapi.FenceCauseLease
	}
	return ""
}

// MayStart says why postgres must not start now, or nil.
func (s State) MayStart() error {
	switch {
	case s.handFenced:
		return ErrFencedByHand
	case s.leaseFenced:
		return ErrLeaseFenced
	case s.rejoin != nil:
		return ErrRejoinPending
	}
	return nil
}

// PendingRejoin is the upstream of a rejoin still to be done.
func (s State) PendingRejoin() (instanceapi.Upstream, bool) {
	if s.rejoin == nil {
		return instanceapi.Upstream{}, false
	}
	return *s.rejoin, true
}

// RejoinDue is the pending rejoin the run loop should try now: none while
// a hand fence leaves the data directory as it is.
func (s State) RejoinDue() (instanceapi.Upstream, bool) {
	if s.handFenced {
		return instanceapi.Upstream{}, false
	}
	return s.PendingRejoin()
}

// RecloneInPlace says the pending rejoin copies the upstream afresh.
func (s State) RecloneInPlace() bool { return s.reclone }

// Terminating says the manager was asked to stop.
func (s State) Terminating() bool { return s.terminating }

// Why an instance takes no writes (WriteRefusal), as far as its lifecycle
// goes; the role is the manager's to check first.
var (
	ErrFencedForWrites    = errors.New("this primary is fenced")
	ErrStopping           = errors.New("this primary is stopping")
	ErrRejoiningForWrites = errors.New("this instance is rejoining as a replica")
)

// NotRunningError refuses writes to an instance whose postgres is not up:
// it may be soon, unlike the other refusals.
type NotRunningError struct{ Phase instanceapi.Phase }

func (e NotRunningError) Error() string { return "phase " + string(e.Phase) }

// WriteRefusal says why a primary in this state takes no writes, or nil:
// fenced (either fence, or phase Fenced until postgres starts again),
// stopping, rejoining, or postgres not running.
func (s State) WriteRefusal() error {
	switch {
	case s.KeptStopped() || s.phase == instanceapi.PhaseFenced:
		return ErrFencedForWrites
	case s.terminating:
		return ErrStopping
	case s.rejoin != nil || s.phase == instanceapi.PhaseRejoining:
		return ErrRejoiningForWrites
	case s.phase != instanceapi.PhaseRunning:
		return NotRunningError{Phase: s.phase}
	}
	return nil
}

// Writable says a primary in this state takes writes.
func (s State) Writable() bool { return s.WriteRefusal() == nil }
