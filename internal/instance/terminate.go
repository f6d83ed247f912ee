package instance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	discoveryclient "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/utils/ptr"

	"tusk.dev/tusk/internal/instance/lifecycle"
	"tusk.dev/tusk/internal/instance/supervisor"
	"tusk.dev/tusk/internal/instanceapi"
)

// TerminationOptions say what the manager does when it is asked to stop
// (SIGTERM: its pod is being deleted, evicted or drained). Zero values
// turn each step off, as outside Kubernetes; the operator's pods set them.
//
// The rule behind them: a pod's address must not disappear while a
// Service still sends it new connections. kube-proxy keeps translating a
// Service's address to a deleted pod's for a second or two after the pod
// leaves the Service's EndpointSlices, and conntrack keeps a translation
// made just before for the client's SYN retries: a client without a
// connect timeout (libpq's default) then waits for TCP to give up, a
// minute or more. While the pod lives, its kernel refuses connections to a
// closed port at once, and the client tries again through the Service.
type TerminationOptions struct {
	// HandoverWait is how long a primary with a streaming standby keeps
	// serving after SIGTERM, waiting for the operator to switch its role
	// over (POST /v1/stepdown), before it shuts down as a primary.
	HandoverWait time.Duration
	// DrainTimeout bounds each wait for the Services to stop sending new
	// connections here: a replica's before it stops postgres, and every
	// instance's after.
	DrainTimeout time.Duration
	// DrainQuiet is how long after the EndpointSlices stopped sending new
	// connections here, and after the last connection that came anyway,
	// the manager waits before it exits: every node's kube-proxy must
	// have followed the EndpointSlices (it syncs at most once a second by
	// default).
	DrainQuiet time.Duration
	// Endpoints reads the EndpointSlices of Namespace; nil outside
	// Kubernetes, where only DrainQuiet is waited.
	Endpoints discoveryclient.EndpointSlicesGetter
	Namespace string
}

// drainPoll is how often the EndpointSlices are read while draining.
const drainPoll = 200 * time.Millisecond

// handoverCheckEvery is how often a primary waiting for a handover checks
// that a standby it could hand over to is left: when every pod of the
// cluster is deleted at once (the cluster deleted, a node restarted), no
// handover can come and waiting would only delay the shutdown.
const handoverCheckEvery = 500 * time.Millisecond

// errTerminating refuses an operation once the manager was asked to stop.
var errTerminating = errors.New("the instance manager is shutting down (its pod is being deleted)")

// beginTermination records that the manager was asked to stop, and says
// whether it should wait for a handover: it is a running primary with a
// standby streaming from it, and handovers are on. Without a standby there
// is nobody to hand over to: it shuts down at once, and the operator fails
// over when a standby comes back.
func (m *Manager) beginTermination(ctx context.Context) bool {
	m.record(lifecycle.Terminating)
	wait := m.opts.Termination.HandoverWait
	if wait <= 0 || m.snapshot().role != instanceapi.RolePrimary || !m.running() {
		return false
	}
	n, err := m.handoverCandidates(ctx)
	if err != nil || n == 0 {
		m.log.Info("Shutting down without a handover: no standby whose pod stays streams from this primary", "error", fmt.Sprint(err))
		return false
	}
	m.log.Info("Asked to stop: waiting for the operator to hand the primary role over", "standbys", n, "wait", wait.String())
	return true
}

// handoverStillPossible says whether a primary waiting for a handover
// still has a standby to hand over to; it logs when it has none.
func (m *Manager) handoverStillPossible(ctx context.Context) bool {
	n, err := m.handoverCandidates(ctx)
	if err == nil && n == 0 {
		m.log.Info("No handover can come: no standby whose pod stays streams from this primary any more; shutting down")
		return false
	}
	return true // an error is no proof: the wait is bounded anyway
}

// handoverCandidates counts the standbys streaming from this primary whose
// pods are not being deleted too (by the EndpointSlices; all of them when
// those cannot be read).
func (m *Manager) handoverCandidates(ctx context.Context) (int, error) {
	names, err := m.streamingStandbys(ctx)
	if err != nil {
		return 0, err
	}
	slices, err := m.endpointSlices(ctx)
	if err != nil {
		return len(names), nil //nolint:nilerr // unknown: every standby may stay
	}
	going := terminatingPods(slices)
	n := 0
	for _, name := range names {
		if !going[name] {
			n++
		}
	}
	return n, nil
}

// streamingStandbys names the standbys streaming from this primary (their
// application_name is their instance's, their pod's, name).
func (m *Manager) streamingStandbys(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := m.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(ctx, "SELECT application_name FROM pg_catalog.pg_stat_replication WHERE state = 'streaming'")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// terminatingPods are the pods the EndpointSlices list as terminating.
func terminatingPods(slices []discoveryv1.EndpointSlice) map[string]bool {
	going := map[string]bool{}
	for i := range slices {
		for _, ep := range slices[i].Endpoints {
			if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" && ptr.Deref(ep.Conditions.Terminating, false) {
				going[ep.TargetRef.Name] = true
			}
		}
	}
	return going
}

// handedOver says a terminating primary has nothing left to wait for: it
// stepped down (the operator handed its role over), or postgres stopped
// under it (fenced, crashed).
func (m *Manager) handedOver() bool {
	st := m.snapshot()
	return st.life.Terminating() && (st.role != instanceapi.RolePrimary || !m.running())
}

// terminate stops the instance in the order that strands no client: a
// primary stops fast and releases its Lease (unless a step-down did both
// already); a replica first leaves its Services while it still serves, then
// lets its sessions finish. Then, with postgres stopped, the pod's address
// keeps refusing connections until no Service sends it any (drain).
func (m *Manager) terminate(ctx context.Context) error {
	m.record(lifecycle.Terminating)
	if m.snapshot().role == instanceapi.RolePrimary {
		if err := m.stopPrimary(ctx); err != nil {
			return err // postgres may still run, on this address: no drain
		}
	} else {
		if m.running() {
			m.leaveServices(ctx)
		}
		if err := m.stopPostgres(supervisor.Smart); err != nil {
			return err
		}
	}
	m.drain(ctx)
	return nil
}

// stopPrimary stops a primary fast: a smart shutdown would wait for every
// session, and a writer's pooled sessions would hold the pod for the whole
// smart timeout; fast still sends every WAL record, the shutdown
// checkpoint included, to the connected standbys before postgres exits.
// It then releases the Lease, so the operator can fail over at once
// instead of waiting for it to expire.
func (m *Manager) stopPrimary(ctx context.Context) error {
	if err := m.stopPostgres(supervisor.Fast); err != nil {
		return err // postgres may still run: keep the Lease
	}
	if m.lease == nil {
		return nil
	}
	if err := m.lease.release(ctx); err != nil {
		m.log.Error(err, "Releasing the primary Lease on shutdown")
	}
	return nil
}

// leaveServices waits, while postgres still serves, until no EndpointSlice
// lists this pod as ready (the endpoint controller marks a terminating pod
// not ready at once), then DrainQuiet for every kube-proxy to follow: the
// reads routed here meanwhile are served, not refused.
func (m *Manager) leaveServices(ctx context.Context) {
	t := m.opts.Termination
	if t.DrainTimeout <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, t.DrainTimeout)
	defer cancel()
	began := time.Now()
	for {
		slices, err := m.endpointSlices(ctx)
		if err == nil && !listedReady(slices, m.opts.Name) {
			break
		}
		if !sleepCtx(ctx, drainPoll) {
			m.log.Info("Stopping postgres: the Services still list this instance as ready", "waited", time.Since(began).String())
			return
		}
	}
	sleepCtx(ctx, t.DrainQuiet)
	m.log.Info("Left the Services; stopping postgres", "waited", time.Since(began).String())
}

// drain keeps the pod's address refusing connections, postgres stopped,
// until no Service sends new connections here, no connection came for
// DrainQuiet, and DrainQuiet has passed since the EndpointSlices stopped
// sending them; DrainTimeout bounds it.
func (m *Manager) drain(ctx context.Context) {
	t := m.opts.Termination
	if t.DrainTimeout <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, t.DrainTimeout)
	defer cancel()
	began := time.Now()
	refuser := m.refuseConnections()
	defer refuser.close()
	var clearSince time.Time
	for {
		routed, err := m.routedHere(ctx)
		now := time.Now()
		switch {
		case routed || err != nil:
			clearSince = time.Time{}
		case clearSince.IsZero():
			clearSince = now
		}
		if !clearSince.IsZero() && now.Sub(clearSince) >= t.DrainQuiet && now.Sub(refuser.last()) >= t.DrainQuiet {
			m.log.Info("No Service sends connections here any more; exiting",
				"drained", time.Since(began).String(), "refusedConnections", refuser.count())
			return
		}
		if !sleepCtx(ctx, drainPoll) {
			m.log.Info("Exiting while connections may still come: the drain timed out",
				"drained", time.Since(began).String(), "refusedConnections", refuser.count(), "lastError", fmt.Sprint(err))
			return
		}
	}
}

// routedHere says whether a Service may still send new connections to this
// pod (see routesNewConnections).
func (m *Manager) routedHere(ctx context.Context) (bool, error) {
	slices, err := m.endpointSlices(ctx)
	if err != nil {
		return true, err
	}
	return routesNewConnections(slices, m.opts.Name), nil
}

// endpointSlices lists the EndpointSlices of the pod's namespace; none
// outside Kubernetes.
func (m *Manager) endpointSlices(ctx context.Context) ([]discoveryv1.EndpointSlice, error) {
	t := m.opts.Termination
	if t.Endpoints == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	// ResourceVersion "0": served from the API server's watch cache.
	list, err := t.Endpoints.EndpointSlices(t.Namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("while listing the EndpointSlices: %w", err)
	}
	return list.Items, nil
}

// routesNewConnections says whether kube-proxy may send a new connection to
// pod through any Service: pod is a ready endpoint of it, or a serving
// (terminating) one of a Service without any ready endpoint, to which
// kube-proxy falls back.
func routesNewConnections(slices []discoveryv1.EndpointSlice, pod string) bool {
	type service struct{ mineReady, mineServing, othersReady bool }
	services := map[string]*service{}
	for i := range slices {
		name := slices[i].Labels[discoveryv1.LabelServiceName]
		s := services[name]
		if s == nil {
			s = &service{}
			services[name] = s
		}
		for _, ep := range slices[i].Endpoints {
			ready := ptr.Deref(ep.Conditions.Ready, true)
			switch {
			case isPod(ep, pod):
				s.mineReady = s.mineReady || ready
				s.mineServing = s.mineServing || ptr.Deref(ep.Conditions.Serving, ready)
			case ready:
				s.othersReady = true
			}
		}
	}
	for _, s := range services {
		if s.mineReady || (s.mineServing && !s.othersReady) {
			return true
		}
	}
	return false
}

// listedReady says whether any EndpointSlice lists pod as a ready endpoint.
func listedReady(slices []discoveryv1.EndpointSlice, pod string) bool {
	for i := range slices {
		for _, ep := range slices[i].Endpoints {
			if isPod(ep, pod) && ptr.Deref(ep.Conditions.Ready, true) {
				return true
			}
		}
	}
	return false
}

func isPod(ep discoveryv1.Endpoint, pod string) bool {
	return ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" && ep.TargetRef.Name == pod
}

// refuser accepts connections on PostgreSQL's port while postgres is
// stopped and resets them at once, counting them: a client learns at once
// that it must try again, and the manager learns that a Service still
// sends it connections.
type refuser struct {
	l      net.Listener
	mu     sync.Mutex
	n      int
	latest time.Time
	done   chan struct{}
}

// refuseConnections listens on PostgreSQL's port; if it cannot, the kernel
// still refuses connections to the closed port, only uncounted.
func (m *Manager) refuseConnections() *refuser {
	r := &refuser{done: make(chan struct{})}
	l, err := net.Listen("tcp", ":"+strconv.Itoa(m.opts.Port))
	if err != nil {
		m.log.Info("Not counting refused connections while draining", "error", err.Error())
		close(r.done)
		return r
	}
	r.l = l
	go r.serve()
	return r
}

func (r *refuser) serve() {
	defer close(r.done)
	for {
		conn, err := r.l.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		r.n++
		r.latest = time.Now()
		r.mu.Unlock()
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0) // a reset, as a closed port would answer
		}
		_ = conn.Close()
	}
}

func (r *refuser) last() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.latest
}

func (r *refuser) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *refuser) close() {
	if r.l != nil {
		_ = r.l.Close()
	}
	<-r.done
}

// sleepCtx waits d, or less if ctx is done first; it reports whether ctx is
// still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
