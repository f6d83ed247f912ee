package lifecycle

import (
	"errors"
	"testing"

	"tusk.dev/tusk/internal/instanceapi"
)

var (
	newPrimary = instanceapi.Upstream{Host: "pg-2"}
	allEvents  = []Event{
		Bootstrapping, Recovering, Upgrading, UpgradeFailed, RejoinStarted, Exited, Started, Accepting, Stopped,
		LeaseLost, LeaseRegained, FencedByHand, Unfenced, RejoinPending(newPrimary), RecloneNeeded(newPrimary),
		Rejoined, Terminating,
	}
)

// after is the state the events lead to from the start; each must be
// accepted.
func after(t *testing.T, events ...Event) State {
	t.Helper()
	var s State
	for _, e := range events {
		next, err := s.Apply(e)
		if err != nil {
			t.Fatalf("setting up, %s: %v", e, err)
		}
		s = next
	}
	return s
}

var running = []Event{Bootstrapping, Started, Accepting}

func with(events []Event, more ...Event) []Event {
	return append(append([]Event(nil), events...), more...)
}

// TestTransitions lists every transition: from the state the events of
// from lead to, event leads to want, or is refused with wantErr and
// changes nothing.
func TestTransitions(t *testing.T) {
	t.Parallel()
	up := &newPrimary
	tests := []struct {
		name    string
		from    []Event
		event   Event
		want    State
		wantErr error
	}{
		// The phases of a start.
		{"a start bootstraps", nil, Bootstrapping, State{phase: instanceapi.PhaseBootstrapping}, nil},
		{"a recovery bootstrap restores", []Event{Bootstrapping}, Recovering, State{phase: instanceapi.PhaseRecovering}, nil},
		{"a new major upgrades", []Event{Bootstrapping}, Upgrading, State{phase: instanceapi.PhaseUpgrading}, nil},
		{"an upgrade fails", []Event{Upgrading}, UpgradeFailed, State{phase: instanceapi.PhaseUpgradeFailed}, nil},
		{"an upgrade done bootstraps", []Event{Upgrading}, Bootstrapping, State{phase: instanceapi.PhaseBootstrapping}, nil},
		{"postgres starts", []Event{Bootstrapping}, Started, State{phase: instanceapi.PhaseStarting}, nil},
		{"postgres accepts connections", []Event{Started}, Accepting, State{phase: instanceapi.PhaseRunning}, nil},
		{"postgres is stopped", running, Stopped, State{phase: instanceapi.PhaseStopped}, nil},
		{"postgres exits unexpectedly", running, Exited, State{phase: instanceapi.PhaseCrashed}, nil},
		{"a crashed postgres starts again", with(running, Exited), Started, State{phase: instanceapi.PhaseStarting}, nil},

		// Accepting follows Starting only.
		{"accepting without a start is refused", []Event{Bootstrapping}, Accepting, State{}, ErrRefused},
		{"accepting once stopped is refused", with(running, Stopped), Accepting, State{}, ErrRefused},
		{"accepting while running is refused", running, Accepting, State{}, ErrRefused},

		// The Lease fence.
		{"losing the Lease fences", running, LeaseLost, State{phase: instanceapi.PhaseFenced, leaseFenced: true}, nil},
		{"losing the Lease again keeps the fence", with(running, LeaseLost), LeaseLost,
			State{phase: instanceapi.PhaseFenced, leaseFenced: true}, nil},
		{"regaining the Lease lifts its fence; the phase waits for the start", with(running, Stopped, LeaseLost), LeaseRegained,
			State{phase: instanceapi.PhaseFenced}, nil},
		{"regaining a Lease never lost changes nothing", running, LeaseRegained, State{phase: instanceapi.PhaseRunning}, nil},
		{"a start is refused while fenced by the Lease", with(running, Stopped, LeaseLost), Started, State{}, ErrLeaseFenced},
		{"a stop while fenced by the Lease is Fenced", with(running, LeaseLost), Stopped,
			State{phase: instanceapi.PhaseFenced, leaseFenced: true}, nil},

		// The hand fence.
		{"a hand fence keeps the phase until postgres is stopped", running, FencedByHand,
			State{phase: instanceapi.PhaseRunning, handFenced: true}, nil},
		{"a hand fence goes from running to Fenced, not through Stopped", with(running, FencedByHand), Stopped,
			State{phase: instanceapi.PhaseFenced, handFenced: true}, nil},
		{"a hand fence found at start is Fenced", []Event{Bootstrapping}, FencedByHand,
			State{phase: instanceapi.PhaseFenced, handFenced: true}, nil},
		{"a hand fence on a crashed postgres is Fenced at once", with(running, Exited), FencedByHand,
			State{phase: instanceapi.PhaseFenced, handFenced: true}, nil},
		{"a hand fence on a starting postgres waits for the stop", []Event{Started}, FencedByHand,
			State{phase: instanceapi.PhaseStarting, handFenced: true}, nil},
		{"a start is refused while fenced by hand", with(running, FencedByHand, Stopped), Started, State{}, ErrFencedByHand},
		{"the hand fence is named first when both hold", with(running, LeaseLost, FencedByHand), Started, State{}, ErrFencedByHand},
		{"unfencing lifts the hand fence", with(running, FencedByHand, Stopped), Unfenced,
			State{phase: instanceapi.PhaseFenced}, nil},
		{"unfencing an instance not fenced by hand changes nothing", running, Unfenced, State{phase: instanceapi.PhaseRunning}, nil},
		{"a failed preparation at unfence stays Fenced", with(running, FencedByHand, Stopped, Bootstrapping), Stopped,
			State{phase: instanceapi.PhaseFenced, handFenced: true}, nil},

		// Rejoins.
		{"a failed rejoin is pending, the Lease fence kept", with(running, LeaseLost, RejoinStarted), RejoinPending(newPrimary),
			State{phase: instanceapi.PhaseRejoining, leaseFenced: true, rejoin: up}, nil},
		{"a failed rejoin at unfence is pending", with(running, FencedByHand, Stopped, RejoinStarted), RejoinPending(newPrimary),
			State{phase: instanceapi.PhaseRejoining, handFenced: true, rejoin: up}, nil},
		{"a refused history is copied afresh", with(running, Exited), RecloneNeeded(newPrimary),
			State{phase: instanceapi.PhaseCrashed, rejoin: up, reclone: true}, nil},
		{"an instance fenced by hand is not copied afresh", with(running, FencedByHand, Stopped), RecloneNeeded(newPrimary),
			State{}, ErrFencedByHand},
		{"a rejoin done clears it and the Lease fence", with(running, LeaseLost, RejoinStarted, RejoinPending(newPrimary)), Rejoined,
			State{phase: instanceapi.PhaseRejoining}, nil},
		{"a reclone done clears it", with(running, Exited, RecloneNeeded(newPrimary), RejoinStarted), Rejoined,
			State{phase: instanceapi.PhaseRejoining}, nil},
		{"a rejoin (a demote) is refused while fenced by hand", with(running, FencedByHand, Stopped), Rejoined, State{}, ErrFencedByHand},
		{"a start is refused while a rejoin is pending", with(running, Stopped, RejoinStarted, RejoinPending(newPrimary)), Started, State{}, ErrRejoinPending},
		{"a start is refused after an unfence while the rejoin is pending", with(running, FencedByHand, Stopped, RejoinStarted, RejoinPending(newPrimary), Unfenced), Started, State{}, ErrRejoinPending},

		// Termination.
		{"SIGTERM terminates", running, Terminating, State{phase: instanceapi.PhaseRunning, terminating: true}, nil},
		{"a step-down of a terminating primary stops it", with(running, Terminating), Stopped,
			State{phase: instanceapi.PhaseStopped, terminating: true}, nil},

		{"the zero event is refused", running, Event{}, State{}, ErrRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			from := after(t, tt.from...)
			got, err := from.Apply(tt.event)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("%s: got %v, want %v", tt.event, err, tt.wantErr)
				}
				if got != from {
					t.Errorf("a refused %s changed %+v to %+v", tt.event, from, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", tt.event, err)
			}
			if !equal(got, tt.want) {
				t.Errorf("%s: got %+v, want %+v", tt.event, got, tt.want)
			}
		})
	}
}

func equal(a, b State) bool {
	ra, pa := a.PendingRejoin()
	rb, pb := b.PendingRejoin()
	a.rejoin, b.rejoin = nil, nil
	return a == b && ra == rb && pa == pb
}

// reachable are the states events lead to from the start, a few events
// deep: enough to combine every fence, a pending rejoin and termination.
func reachable() []State {
	type key struct {
		s         State
		rejoining bool // the pointer differs each time; only its presence matters
	}
	seen := map[key]bool{}
	var states []State
	frontier := []State{{}}
	for range 5 {
		var next []State
		for _, s := range frontier {
			for _, e := range allEvents {
				n, err := s.Apply(e)
				if err != nil {
					continue
				}
				k := key{n, n.rejoin != nil}
				k.s.rejoin = nil
				if !seen[k] {
					seen[k] = true
					states = append(states, n)
					next = append(next, n)
				}
			}
		}
		frontier = next
	}
	return states
}

// TestInvariants holds, for every event from every reachable state, what
// the comments of the instance manager promise.
func TestInvariants(t *testing.T) {
	t.Parallel()
	invariants := []struct {
		name  string
		holds func(from State, e Event, to State, err error) bool
	}{
		{"regaining the Lease never lifts a hand fence", func(from State, e Event, to State, _ error) bool {
			return e.kind != leaseRegained || to.handFenced == from.handFenced
		}},
		{"unfencing never lifts a Lease fence (it never bypasses the Lease)", func(from State, e Event, to State, _ error) bool {
			return e.kind != unfenced || to.leaseFenced == from.leaseFenced
		}},
		{"only Unfenced lifts a hand fence: crashes, restarts, renewals and rejoins keep it", func(from State, e Event, to State, _ error) bool {
			return !from.handFenced || to.handFenced || e.kind == unfenced
		}},
		{"only the Lease held again, or a rejoin as a replica, lifts a Lease fence", func(from State, e Event, to State, _ error) bool {
			return !from.leaseFenced || to.leaseFenced || e.kind == leaseRegained || e.kind == rejoined
		}},
		{"postgres never starts while a fence holds", func(from State, e Event, _ State, err error) bool {
			return e.kind != started || !from.KeptStopped() || err != nil
		}},
		{"postgres never starts before a pending rejoin is done (a former primary's data would start writable)", func(from State, e Event, _ State, err error) bool {
			_, pending := from.PendingRejoin()
			return e.kind != started || !pending || err != nil
		}},
		{"MayStart answers as Started does", func(from State, e Event, _ State, err error) bool {
			return e.kind != started || errors.Is(err, from.MayStart())
		}},
		{"a fenced instance's phase is never Stopped", func(_ State, _ Event, to State, _ error) bool {
			return !to.KeptStopped() || to.phase != instanceapi.PhaseStopped
		}},
		{"a stop while fenced is Fenced", func(from State, e Event, to State, _ error) bool {
			return e.kind != stopped || !from.KeptStopped() || to.phase == instanceapi.PhaseFenced
		}},
		{"a failed rejoin leaves the fences as they were", func(from State, e Event, to State, _ error) bool {
			return e.kind != rejoinPending || to.leaseFenced == from.leaseFenced && to.handFenced == from.handFenced
		}},
		{"an instance fenced by hand is never recloned nor demoted", func(from State, e Event, to State, err error) bool {
			return !from.handFenced || (e.kind != recloneNeeded && e.kind != rejoined) || err != nil && to == from
		}},
		{"the run loop never rejoins an instance fenced by hand", func(_ State, _ Event, to State, _ error) bool {
			_, due := to.RejoinDue()
			return !to.handFenced || !due
		}},
		{"nothing lifts termination", func(from State, _ Event, to State, _ error) bool {
			return !from.terminating || to.terminating
		}},
		{"running follows starting only", func(from State, _ Event, to State, _ error) bool {
			return to.phase != instanceapi.PhaseRunning || from.phase == instanceapi.PhaseRunning || from.phase == instanceapi.PhaseStarting
		}},
		{"a refusal changes nothing", func(from State, _ Event, to State, err error) bool {
			return err == nil || to == from
		}},
		{"writable only when running, unfenced, staying and not rejoining", func(_ State, _ Event, to State, _ error) bool {
			_, rejoining := to.PendingRejoin()
			return !to.Writable() || to.phase == instanceapi.PhaseRunning && !to.KeptStopped() && !to.terminating && !rejoining
		}},
	}
	states := reachable()
	if len(states) < 50 {
		t.Fatalf("only %d reachable states: the search is too shallow", len(states))
	}
	for _, inv := range invariants {
		t.Run(inv.name, func(t *testing.T) {
			t.Parallel()
			for _, from := range states {
				for _, e := range allEvents {
					to, err := from.Apply(e)
					if !inv.holds(from, e, to, err) {
						t.Errorf("from %+v, %s: to %+v, error %v", from, e, to, err)
					}
				}
			}
		})
	}
}

// TestWriteRefusal lists why a primary takes no writes, in the order
// checkWritable reports them.
func TestWriteRefusal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		from []Event
		want error
	}{
		{"running", running, nil},
		{"fenced by the Lease", with(running, Stopped, LeaseLost), ErrFencedForWrites},
		{"fenced by hand, still stopping", with(running, FencedByHand), ErrFencedForWrites},
		{"the Lease regained, not started yet", with(running, Stopped, LeaseLost, LeaseRegained), ErrFencedForWrites},
		{"fenced and terminating", with(running, FencedByHand, Terminating), ErrFencedForWrites},
		{"terminating", with(running, Terminating), ErrStopping},
		{"a rejoin pending", with(running, RejoinPending(newPrimary)), ErrRejoiningForWrites},
		{"rejoining", with(running, Stopped, RejoinStarted), ErrRejoiningForWrites},
		{"starting", []Event{Started}, NotRunningError{Phase: instanceapi.PhaseStarting}},
		{"crashed", with(running, Exited), NotRunningError{Phase: instanceapi.PhaseCrashed}},
		{"stopped", with(running, Stopped), NotRunningError{Phase: instanceapi.PhaseStopped}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := after(t, tt.from...)
			if got := s.WriteRefusal(); !errors.Is(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if s.Writable() != (tt.want == nil) {
				t.Errorf("Writable() = %v, want %v", s.Writable(), tt.want == nil)
			}
		})
	}
}

// TestFencedBy names the fence the wire reports, the hand fence first.
func TestFencedBy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		from []Event
		want instanceapi.FenceCause
	}{
		{"not fenced", running, ""},
		{"by the Lease", with(running, LeaseLost), instanceapi.FenceCauseLease},
		{"by hand", with(running, FencedByHand), instanceapi.FenceCauseHand},
		{"both", with(running, LeaseLost, FencedByHand), instanceapi.FenceCauseHand},
		{"the Lease regained", with(running, LeaseLost, LeaseRegained), ""},
	}
	for _, tt := range tests {
		if got := after(t, tt.from...).FencedBy(); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestEveryEventHasANameAndAStep keeps the event list, the names and the
// transition function in step.
func TestEveryEventHasANameAndAStep(t *testing.T) {
	t.Parallel()
	if len(allEvents) != len(kindNames) || len(allEvents) != len(transitions) {
		t.Fatalf("%d events, %d names, %d steps", len(allEvents), len(kindNames), len(transitions))
	}
	for _, e := range allEvents {
		if e.String() == "unknown" || transitions[e.kind] == nil {
			t.Errorf("event %d has no name or no step", e.kind)
		}
	}
}
