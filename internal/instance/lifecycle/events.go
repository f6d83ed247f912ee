package lifecycle

import "tusk.dev/tusk/internal/instanceapi"

// Event is something that happened to the instance, or that it is about
// to do; Apply says what follows. The zero Event is refused.
type Event struct {
	kind kind
	// upstream is what a rejoin follows (RejoinPending, RecloneNeeded).
	upstream instanceapi.Upstream
}

type kind int

const (
	_ kind = iota
	bootstrapping
	recovering
	upgrading
	upgradeFailed
	rejoinStarted
	exited
	started
	accepting
	stopped
	leaseLost
	leaseRegained
	fencedByHand
	unfenced
	rejoinPending
	recloneNeeded
	rejoined
	terminating
)

var kindNames = map[kind]string{
	bootstrapping: "Bootstrapping",
	recovering:    "Recovering",
	upgrading:     "Upgrading",
	upgradeFailed: "UpgradeFailed",
	rejoinStarted: "RejoinStarted",
	exited:        "Exited",
	started:       "Started",
	accepting:     "Accepting",
	stopped:       "Stopped",
	leaseLost:     "LeaseLost",
	leaseRegained: "LeaseRegained",
	fencedByHand:  "FencedByHand",
	unfenced:      "Unfenced",
	rejoinPending: "RejoinPending",
	recloneNeeded: "RecloneNeeded",
	rejoined:      "Rejoined",
	terminating:   "Terminating",
}

// String names the event.
func (e Event) String() string {
	if name, ok := kindNames[e.kind]; ok {
		return name
	}
	return "unknown"
}

// The events. Each is applied by the one part of the manager that acts on
// it, named here.
var (
	// Bootstrapping: the data directory is being made or aligned with the
	// role (prepare, prepareDataDir; after an upgrade, its start).
	Bootstrapping = Event{kind: bootstrapping}
	// Recovering: a recovery bootstrap restores a base backup, or waits
	// to try again.
	Recovering = Event{kind: recovering}
	// Upgrading: pg_upgrade runs on the data directory.
	Upgrading = Event{kind: upgrading}
	// UpgradeFailed: the upgrade failed (or the data is newer than the
	// image); postgres stays stopped until the pod is replaced.
	UpgradeFailed = Event{kind: upgradeFailed}
	// RejoinStarted: a stopped former primary is rewound, or a replica
	// copied afresh, to follow another instance.
	RejoinStarted = Event{kind: rejoinStarted}
	// Exited: postgres exited unexpectedly; it is restarted later.
	Exited = Event{kind: exited}
	// Started: a postmaster was started (refused while a fence holds;
	// MayStart asks first).
	Started = Event{kind: started}
	// Accepting: the postmaster started last accepts connections.
	Accepting = Event{kind: accepting}
	// Stopped: postgres was stopped on purpose, or stays stopped.
	Stopped = Event{kind: stopped}
	// LeaseLost: a primary fenced itself: it could not renew the Lease,
	// another holds it, or it gave it up crash-looping.
	LeaseLost = Event{kind: leaseLost}
	// LeaseRegained: the primary holds its Lease again.
	LeaseRegained = Event{kind: leaseRegained}
	// FencedByHand: POST /v1/fence, or its mark found at start.
	FencedByHand = Event{kind: fencedByHand}
	// Unfenced: POST /v1/unfence lifted the hand fence.
	Unfenced = Event{kind: unfenced}
	// Rejoined: a pending rejoin, or a demote's, is done.
	Rejoined = Event{kind: rejoined}
	// Terminating: SIGTERM; the pod is going.
	Terminating = Event{kind: terminating}
)

// RejoinPending says a rejoin to up failed (the new primary did not answer
// yet, say); postgres stays stopped until it is done.
func RejoinPending(up instanceapi.Upstream) Event { return Event{kind: rejoinPending, upstream: up} }

// RecloneNeeded says postgres refused the data directory's history; the
// replica is to copy up afresh, in place.
func RecloneNeeded(up instanceapi.Upstream) Event { return Event{kind: recloneNeeded, upstream: up} }
