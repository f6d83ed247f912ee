package instance

import (
	"context"
	"reflect"
	"sync"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
)

// observedMaxAge is how old what postgres said may be when the open
// endpoints (readiness, metrics) answer with it. The kubelet probes
// readiness every second; requests in between, however many, share one
// answer.
const observedMaxAge = 500 * time.Millisecond

// observer answers the endpoints anyone who reaches the pod may call,
// without letting them spend postgres's connections: at most one session
// at a time asks postgres, at most once per observedMaxAge while the
// manager's own state stays the same; every other request gets that
// answer. A change of the manager's state (a stop, a role change, a fence)
// is seen at once, as it costs no session.
type observer struct {
	mu   sync.Mutex
	base instanceapi.Status // the manager's part when last asked
	full instanceapi.Status // base with what postgres said
	at   time.Time
}

// status returns base with what postgres says (ask), asking only when the
// last answer is older than observedMaxAge or was for another base.
func (o *observer) status(ctx context.Context, base instanceapi.Status, ask func(context.Context, *instanceapi.Status)) instanceapi.Status {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.at.IsZero() && time.Since(o.at) < observedMaxAge && reflect.DeepEqual(o.base, base) {
		return o.full
	}
	full := base
	// Not the caller's cancellation: a client that hangs up must not
	// leave a failed answer for everyone else.
	ask(context.WithoutCancel(ctx), &full)
	o.base, o.full, o.at = base, full, time.Now()
	return full
}

// ObservedStatus is Status for the endpoints anyone may call (readiness,
// metrics): what postgres says is at most observedMaxAge old, and asked by
// one session at a time whatever the number of callers.
func (m *Manager) ObservedStatus(ctx context.Context) instanceapi.Status {
	base := m.managerStatus()
	if base.Phase != instanceapi.PhaseRunning {
		return base
	}
	return m.observer.status(ctx, base, m.addPostgresStatus)
}
