// Package lifecycle is the instance manager's state machine: the phase
// the instance is in and why postgres is kept stopped (a Lease fence, a
// hand fence, a pending rejoin, the pod going), changed by one transition
// function, State.Apply, and read through queries.
//
// It is pure: the actions (starting and stopping postgres, taking the
// Lease, rewinding) stay in the instance manager, which applies an event
// once it has acted, or asks first (Apply on a copy, or MayStart) whether
// the machine allows what it is about to do. It imports nothing of the
// instance manager, so its table test holds the invariants on its own.
package lifecycle

import (
	"errors"
	"fmt"

	"tusk.dev/tusk/internal/instanceapi"
)

// State is the instance's lifecycle. The zero value is a manager that has
// not begun (phase ""). It is a value: Apply returns the next one.
type State struct {
	phase instanceapi.Phase
	// leaseFenced: postgres is kept stopped because this primary could
	// not hold the primary Lease (or gave it up, crash-looping).
	leaseFenced bool
	// handFenced: postgres is kept stopped because the operator asked
	// (POST /v1/fence), until POST /v1/unfence. Kept apart from
	// leaseFenced so that regaining the Lease never lifts it, and lifting
	// it never bypasses the Lease.
	handFenced bool
	// rejoin is the upstream of a rejoin that is still to be done (a
	// demote whose rejoin failed, a replica to copy afresh); nil for none.
	// Postgres stays stopped and the run loop tries again until the data
	// directory follows it.
	rejoin *instanceapi.Upstream
	// reclone makes the pending rejoin copy the upstream afresh instead of
	// trying pg_rewind: postgres refused the data directory's history.
	reclone bool
	// terminating: the manager was asked to stop (SIGTERM); it only waits
	// for a handover, stops postgres and drains from then on. Nothing
	// lifts it.
	terminating bool
}

// Refusals of Apply and MayStart. A refused transition leaves the state as
// it was.
var (
	// ErrLeaseFenced refuses to start postgres while the primary is
	// fenced for want of the Lease.
	ErrLeaseFenced = errors.New("this primary is fenced: it does not hold the primary Lease")
	// ErrFencedByHand refuses what would start postgres, or move its data
	// directory to another history, while it is fenced by hand.
	ErrFencedByHand = errors.New("this instance is fenced by hand: POST " + instanceapi.PathUnfence + " starts postgres again")
	// ErrRejoinPending refuses to start postgres before a pending rejoin
	// is done: the data directory may still be a former primary's, which
	// would start as a second writable primary.
	ErrRejoinPending = errors.New("this instance has a rejoin to finish first: postgres starts once its data directory follows the primary")
	// ErrRefused refuses an event that does not follow from the state,
	// such as accepting connections without having started.
	ErrRefused = errors.New("refused transition")
)

// Apply is the transition function: the state after e, or the state as it
// was and why e is refused.
func (s State) Apply(e Event) (State, error) {
	step := transitions[e.kind]
	if step == nil {
		return s, fmt.Errorf("%w: unknown event %q", ErrRefused, e)
	}
	next, err := step(s, e)
	if err != nil {
		return s, err
	}
	return next, nil
}

// transitions are the steps, one per kind of event; each changes a copy.
var transitions = map[kind]func(State, Event) (State, error){
	bootstrapping: inPhase(instanceapi.PhaseBootstrapping),
	recovering:    inPhase(instanceapi.PhaseRecovering),
	upgrading:     inPhase(instanceapi.PhaseUpgrading),
	upgradeFailed: inPhase(instanceapi.PhaseUpgradeFailed),
	rejoinStarted: inPhase(instanceapi.PhaseRejoining),
	exited:        inPhase(instanceapi.PhaseCrashed),
	started:       start,
	accepting:     accept,
	stopped:       stop,
	leaseLost:     loseLease,
	leaseRegained: regainLease,
	fencedByHand:  fenceByHand,
	unfenced:      unfence,
	rejoinPending: pendRejoin,
	recloneNeeded: pendReclone,
	rejoined:      finishRejoin,
	terminating:   terminate,
}

func inPhase(p instanceapi.Phase) func(State, Event) (State, error) {
	return func(s State, _ Event) (State, error) {
		s.phase = p
		return s, nil
	}
}

// start: postgres may start unless a fence or a pending rejoin keeps it
// stopped; the hand fence is named first, as it is what a human must lift.
func start(s State, _ Event) (State, error) {
	if err := s.MayStart(); err != nil {
		return s, err
	}
	s.phase = instanceapi.PhaseStarting
	return s, nil
}

// accept: running follows starting only; a postmaster that began to
// accept connections after it was stopped or replaced changes nothing.
func accept(s State, e Event) (State, error) {
	if s.phase != instanceapi.PhaseStarting {
		return s, fmt.Errorf("%w: %s in phase %s", ErrRefused, e, s.phase)
	}
	s.phase = instanceapi.PhaseRunning
	return s, nil
}

// stop: postgres is stopped on purpose (or was not running). While a
// fence keeps it stopped the phase is Fenced at once, never Stopped on
// the way.
func stop(s State, _ Event) (State, error) {
	s.phase = instanceapi.PhaseStopped
	if s.KeptStopped() {
		s.phase = instanceapi.PhaseFenced
	}
	return s, nil
}

func loseLease(s State, _ Event) (State, error) {
	s.leaseFenced = true
	s.phase = instanceapi.PhaseFenced
	return s, nil
}

// regainLease lifts the Lease fence only: a hand fence stays, and the
// phase stays until postgres starts.
func regainLease(s State, _ Event) (State, error) {
	s.leaseFenced = false
	return s, nil
}

// fenceByHand comes first, before postgres is stopped: nothing may start
// it from here on. A running postgres keeps its phase while it stops
// (Stopped then makes it Fenced); any other is Fenced at once.
func fenceByHand(s State, _ Event) (State, error) {
	s.handFenced = true
	if s.phase != instanceapi.PhaseStarting && s.phase != instanceapi.PhaseRunning {
		s.phase = instanceapi.PhaseFenced
	}
	return s, nil
}

// unfence lifts the hand fence only: a primary still needs the Lease.
func unfence(s State, _ Event) (State, error) {
	s.handFenced = false
	return s, nil
}

// pendRejoin leaves the fences as they were: a former primary whose
// rejoin failed never starts as a primary without the Lease.
func pendRejoin(s State, e Event) (State, error) {
	up := e.upstream
	s.rejoin = &up
	return s, nil
}

// pendReclone leaves an instance fenced by hand alone: its data directory
// stays as it is until it is unfenced.
func pendReclone(s State, e Event) (State, error) {
	if s.handFenced {
		return s, ErrFencedByHand
	}
	up := e.upstream
	s.rejoin, s.reclone = &up, true
	return s, nil
}

// finishRejoin: the data directory follows the new primary; the instance
// is a replica, which takes no writes, so a Lease fence has nothing left
// to keep. A hand fence is lifted by hand only: a rejoin (a demote) is
// refused while it holds.
func finishRejoin(s State, _ Event) (State, error) {
	if s.handFenced {
		return s, ErrFencedByHand
	}
	s.rejoin, s.reclone, s.leaseFenced = nil, false, false
	return s, nil
}

func terminate(s State, _ Event) (State, error) {
	s.terminating = true
	return s, nil
}
