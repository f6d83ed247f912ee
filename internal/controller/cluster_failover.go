package controller

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/postgres"
)

// failover is what one pass found out about a failed primary.
type failover struct {
	// failed says why the current primary is taken for failed ("" when it
	// is not).
	failed string
	// underway: a replica is being promoted, or will be once the old
	// primary's Lease expires; nothing else changes meanwhile.
	underway bool
	// done: a replica was promoted in this pass; the instances' reports
	// predate it.
	done bool
	// candidate is the replica chosen.
	candidate string
	// blocked says why no replica may be promoted ("" when one may).
	blocked string
	// wait is how long until the old primary's Lease expires.
	wait time.Duration
}

// primaryFailure says why the current primary cannot serve, or "" when it
// may: its pod is gone, or going and no longer serving as the primary (a
// primary whose pod is going but still serves is handed over:
// reconcileHandover), its instance manager does not answer, or it fenced
// itself because it lost the primary Lease. A postgres that
// crashed under a live instance manager is not a failure: the manager
// restarts it at once, which is faster than any failover, and it keeps the
// Lease meanwhile. A primary fenced by hand is not one either: the user
// stopped it on purpose.
func primaryFailure(c *tuskv1alpha1.PostgresCluster, v *view) string {
	p := v.member(c.Status.CurrentPrimary)
	switch {
	case p == nil || p.pod == nil:
		return "its pod is gone"
	case p.pod.DeletionTimestamp != nil && !servingAsPrimary(p.status):
		return "its pod is being deleted"
	case p.status == nil && p.err != nil:
		return "its instance manager does not answer (" + p.err.Error() + ")"
	case p.status == nil:
		return "its pod is not running"
	case p.status.Phase == instanceapi.PhaseFenced && !p.status.Fenced:
		return "it fenced itself: " + p.status.LastError
	case c.Status.TargetPrimary != c.Status.CurrentPrimary && p.status.Phase == instanceapi.PhaseRejoining:
		// It stepped down for a switchover whose target was never
		// promoted (its pod went too: every pod deleted at once), and
		// its new pod waits for a primary to rejoin: nobody serves, and
		// the switchover would wait for its role forever.
		return "it stepped down and waits for a primary to rejoin: " + p.status.LastError
	}
	return ""
}

// failoverCandidate is the replica to promote in place of a failed
// primary, or nil and why none may be. It takes the replica that received
// the most WAL among those that answer, with two refusals that protect
// acknowledged writes:
//   - synchronous quorum (ANY n of N standbys): every acknowledged commit is
//     on n of the N, so at least N-n+1 of them must answer for one of them
//     to surely have it; the candidate is the most advanced of those;
//   - after an outage, a replica that does not answer but was last seen
//     ahead of the best candidate may hold writes the candidate lacks: wait
//     for it rather than guess.
//
// A target chosen by hand (kubectl tusk promote) is honoured when it is
// among the safe candidates.
func failoverCandidate(c *tuskv1alpha1.PostgresCluster, v *view) (*member, string) {
	candidates := promotable(c, v)
	if has := withEveryWrite(c, v, candidates); len(has) > 0 {
		return preferTarget(c, v, has), ""
	}
	if q := c.Status.SynchronousQuorum; q != nil && q.Number > 0 {
		candidates = slices.DeleteFunc(candidates, func(m *member) bool { return !slices.Contains(q.Standbys, m.name) })
		if need := len(q.Standbys) - int(q.Number) + 1; len(candidates) < need {
			return nil, fmt.Sprintf("only %d of the %d standbys of the synchronous quorum (ANY %d of %v) answer; %d must, so that one of them surely has every acknowledged commit",
				len(candidates), len(q.Standbys), q.Number, q.Standbys, need)
		}
	}
	if len(candidates) == 0 {
		return nil, "no replica answers that could be promoted"
	}
	best := preferTarget(c, v, candidates)
	if ahead := aheadOf(c, v, best); ahead != "" {
		return nil, ahead
	}
	return best, ""
}

// preferTarget is the target chosen by hand, or by a switchover, when it
// is among the candidates, else the most advanced of them.
func preferTarget(c *tuskv1alpha1.PostgresCluster, v *view, candidates []*member) *member {
	if target := v.member(c.Status.TargetPrimary); target != nil && slices.Contains(candidates, target) {
		return target
	}
	return slices.MaxFunc(candidates, moreAdvanced)
}

// withEveryWrite are the candidates that surely have every write of a
// failed primary that shut down cleanly and stays stopped to rejoin (a
// switchover's step-down that its pod's deletion cut short, then every
// pod deleted): it wrote nothing after its shutdown checkpoint, so a
// replica on its timeline that received that checkpoint has every commit
// it acknowledged, whatever the quorum's other standbys say or whether
// they answer. Nil when the primary's data directory bounds nothing.
//
// A replica's timeline can lag the one it replays (it is its last
// restartpoint's while no WAL receiver runs); a lagging one is left to the
// quorum's rule, never taken for one on another history.
func withEveryWrite(c *tuskv1alpha1.PostgresCluster, v *view, candidates []*member) []*member {
	p := v.member(c.Status.CurrentPrimary)
	if p == nil || p.status == nil || p.status.Phase != instanceapi.PhaseRejoining {
		return nil
	}
	d := p.status.StoppedForRejoin
	if d == nil || d.State != instanceapi.StateShutDown || d.Standby {
		return nil
	}
	last, err := postgres.ParseLSN(d.CheckpointLSN)
	if err != nil {
		return nil
	}
	var has []*member
	for _, m := range candidates {
		if m.status.Timeline == d.Timeline && receivedLSN(m.status) > last {
			has = append(has, m)
		}
	}
	return has
}

// promotable are the replicas that answer and run: the only ones a
// promotion can reach and that can take writes at once.
func promotable(c *tuskv1alpha1.PostgresCluster, v *view) []*member {
	var out []*member
	for _, m := range v.members {
		if m.name == c.Status.CurrentPrimary || m.pod == nil || m.pod.DeletionTimestamp != nil || m.status == nil {
			continue
		}
		st := m.status
		if st.Role == instanceapi.RoleReplica && st.Phase == instanceapi.PhaseRunning && !st.Fenced {
			out = append(out, m)
		}
	}
	return out
}

// receivedLSN is the most WAL a replica has: received, or replayed when it
// replays from its own pg_wal without a receiver.
func receivedLSN(st *instanceapi.Status) postgres.LSN {
	var last postgres.LSN
	for _, s := range []string{st.ReceivedLSN, st.ReplayedLSN} {
		if l, err := postgres.ParseLSN(s); err == nil {
			last = max(last, l)
		}
	}
	return last
}

// moreAdvanced orders replicas by the WAL they have; on a tie the older
// instance wins, so the choice is stable.
func moreAdvanced(a, b *member) int {
	la, lb := receivedLSN(a.status), receivedLSN(b.status)
	if la != lb {
		return int(min(max(la.Minus(lb), -1), 1))
	}
	return int(b.serial - a.serial)
}

// aheadOf says which replica, not answering now, was last seen with more
// WAL than best ("" when none): the last LSNs are kept in status.
func aheadOf(c *tuskv1alpha1.PostgresCluster, v *view, best *member) string {
	have := receivedLSN(best.status)
	for _, is := range c.Status.Instances {
		m := v.member(is.Name)
		if is.Name == c.Status.CurrentPrimary || is.Role != tuskv1alpha1.RoleReplica || m == nil || m.status != nil {
			continue
		}
		if last, err := postgres.ParseLSN(is.LSN); err == nil && last > have {
			return fmt.Sprintf("%s does not answer and was last seen at %s, ahead of the best candidate %s (%s): waiting for it", is.Name, last, best.name, have)
		}
	}
	return ""
}

// reconcileFailover replaces a failed primary with the best replica. It
// promotes only once the old primary's Lease is released or expired, when
// the old primary has fenced itself (it stops taking writes before its
// Lease can expire), so there are never two primaries taking writes.
func (r *ClusterReconciler) reconcileFailover(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) (failover, error) {
	var f failover
	if f.failed = primaryFailure(c, v); f.failed == "" {
		if c.Status.TargetPrimary == c.Status.CurrentPrimary {
			r.changingPrimary.forget(client.ObjectKeyFromObject(c).String()) // the primary came back, nothing changes
		}
		return f, nil
	}
	r.changingPrimary.heldFor(client.ObjectKeyFromObject(c).String(), time.Now())
	f.underway = true
	if target := v.member(c.Status.TargetPrimary); c.Status.TargetPrimary != c.Status.CurrentPrimary &&
		target != nil && target.status != nil && target.status.Role == instanceapi.RolePrimary {
		// Promoted in an earlier pass that could not record it.
		f.done = true
		return f, r.recordFailover(ctx, c, v, target, f.failed, ic)
	}
	candidate, blocked := failoverCandidate(c, v)
	if candidate == nil {
		f.underway = false
		if len(v.members) > 1 { // a lone instance is healed in place
			f.blocked = blocked
			r.reportFailoverBlocked(c, f)
		}
		return f, nil
	}
	f.candidate = candidate.name
	lease := r.leases.state(client.ObjectKey{Namespace: c.Namespace, Name: primaryLeaseName(c)})
	if !lease.known || (!lease.free && lease.holder != candidate.name) {
		f.wait = lease.wait
		return f, nil
	}
	if c.Status.TargetPrimary != candidate.name {
		if err := r.startFailover(ctx, c, candidate, f.failed); err != nil {
			return f, err
		}
	}
	if err := r.promoteWhenFree(ctx, candidate, ic); err != nil {
		return f, err
	}
	f.done = true
	return f, r.recordFailover(ctx, c, v, candidate, f.failed, ic)
}

// reportFailoverBlocked warns, once per reason, that a failed primary has
// no safe successor; status says so in the Degraded condition meanwhile.
func (r *ClusterReconciler) reportFailoverBlocked(c *tuskv1alpha1.PostgresCluster, f failover) {
	if d := meta.FindStatusCondition(c.Status.Conditions, tuskv1alpha1.ConditionDegraded); d != nil && d.Reason == tuskv1alpha1.ReasonFailoverBlocked && strings.Contains(d.Message, f.blocked) {
		return
	}
	r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonFailoverBlocked, "Failover", "The primary %s failed (%s) and no replica may take over: %s", c.Status.CurrentPrimary, f.failed, f.blocked)
}

// startFailover records the candidate as the target before promoting it,
// so an operator that restarts half-way knows which replica it chose.
func (r *ClusterReconciler) startFailover(ctx context.Context, c *tuskv1alpha1.PostgresCluster, candidate *member, why string) error {
	if err := r.recordDecision(ctx, c, func(s *tuskv1alpha1.PostgresClusterStatus) error {
		s.TargetPrimary = candidate.name
		return nil
	}); err != nil {
		return err
	}
	r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonFailingOver, "Failover", "The primary %s failed (%s); promoting %s, which received WAL up to %s",
		c.Status.CurrentPrimary, why, candidate.name, receivedLSN(candidate.status))
	return nil
}

// promoteRetry bounds how long one pass keeps asking the candidate to
// promote: it refuses while, by its own clock, the old primary's Lease has
// not expired yet, which can be a renewal period later than by the
// operator's.
const (
	promoteRetry      = 4 * time.Second
	promoteRetryEvery = 250 * time.Millisecond
)

func (r *ClusterReconciler) promoteWhenFree(ctx context.Context, candidate *member, ic *instanceClient) error {
	deadline := time.Now().Add(promoteRetry)
	for {
		err := r.promote(ctx, candidate, ic)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(promoteRetryEvery):
		}
	}
}

// recordFailover makes the promoted replica the current primary and points
// the -rw Service at it at once.
func (r *ClusterReconciler) recordFailover(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, promoted *member, why string, ic *instanceClient) error {
	from := c.Status.CurrentPrimary
	if err := r.recordDecision(ctx, c, func(s *tuskv1alpha1.PostgresClusterStatus) error {
		s.CurrentPrimary, s.TargetPrimary = promoted.name, promoted.name
		return nil
	}); err != nil {
		return err
	}
	r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonFailedOver, "Failover", "%s is the primary in place of %s (%s)", promoted.name, from, why)
	r.observePrimaryChange(c, "failover")
	err := r.reconcileRoleLabels(ctx, c, v)
	// Even when a label could not move: a synchronous primary holds every
	// commit until a standby streams from it.
	reconnectReplicas(ctx, c, v, promoted, ic)
	// No pooler client goes on talking to the former primary (fenced, or
	// cut off and about to be): the -rw label has moved.
	r.reconnectPoolers(ctx, c, func(*tuskv1alpha1.PostgresPooler) bool { return true })
	return err
}

// reconnectReplicas points the other running replicas at the promoted
// instance: at its pod IP first (Upstream.HostAddr), so they stream from it
// at once instead of when kube-proxy has moved the -rw Service, which
// takes a second or two; until then a connection to -rw can still be sent
// to the former primary's address, and to a deleted pod's address it hangs
// for the whole connect timeout while a synchronous primary holds every
// commit for want of a standby. A changed primary_conninfo makes postgres
// restart the WAL receiver; a replica already pointed there is asked to
// reconnect instead (its receiver may be attached to a former primary cut
// off by the network, waiting for TCP to give up, and a partition that
// heals could still deliver it WAL the new primary never had). Best
// effort: a replica that cannot be asked reconnects by itself once TCP
// gives up.
func reconnectReplicas(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, promoted *member, ic *instanceClient) {
	log := ctrlLog(ctx)
	up := instanceapi.Upstream{Host: rwServiceName(c), HostAddr: promoted.pod.Status.PodIP, Port: postgresPort}
	var wg sync.WaitGroup
	for _, m := range v.members {
		if m == promoted || m.pod == nil || m.pod.DeletionTimestamp != nil || m.status == nil ||
			m.status.Role != instanceapi.RoleReplica || m.status.Phase != instanceapi.PhaseRunning {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, statusTimeout) // a busy manager must not hold the pass
			defer cancel()
			if err := repointReplica(ctx, m, up, ic); err != nil {
				log.Info("Could not point a replica at the new primary", "instance", m.name, "error", err.Error())
				return
			}
			log.V(1).Info("Pointed a replica at the new primary", "instance", m.name, "address", up.HostAddr)
		})
	}
	wg.Wait()
}

// repointReplica makes a replica stream from up afresh.
func repointReplica(ctx context.Context, m *member, up instanceapi.Upstream, ic *instanceClient) error {
	if m.status.Upstream == nil || *m.status.Upstream != up {
		return ic.call(ctx, m.pod, http.MethodPost, instanceapi.PathFollow, instanceapi.FollowRequest{Upstream: up}, nil)
	}
	return ic.call(ctx, m.pod, http.MethodPost, instanceapi.PathReconnect, nil, &instanceapi.ReconnectResult{})
}

// refreshUpstreams re-points a replica set to try an address (Upstream
// HostAddr) that is no longer the primary's pod IP, which happens when the
// primary's pod was recreated without a failover: each of its reconnections
// would first wait out the connect timeout on a dead address. Best effort,
// like reconnectReplicas.
func refreshUpstreams(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) {
	primary := v.member(c.Status.CurrentPrimary)
	if primary == nil || !primary.ready() || primary.status.Role != instanceapi.RolePrimary || primary.pod.Status.PodIP == "" {
		return
	}
	var stale []*member
	for _, m := range v.members {
		if m != primary && m.status != nil && m.status.Role == instanceapi.RoleReplica && staleHostAddr(m.status.Upstream, primary.pod.Status.PodIP) {
			stale = append(stale, m)
		}
	}
	if len(stale) > 0 {
		reconnectReplicas(ctx, c, &view{members: stale}, primary, ic)
	}
}

// staleHostAddr says a replica's upstream tries an address first that is
// not the primary's.
func staleHostAddr(up *instanceapi.Upstream, primaryIP string) bool {
	return up != nil && up.HostAddr != "" && up.HostAddr != primaryIP
}

// demoteFormerPrimaries turns an instance that is a primary, or fenced
// itself as one, without being the current primary into a replica of the
// current one: a former primary that comes back after a failover (its
// network or its node back) rewinds and follows, never serving writes.
func (r *ClusterReconciler) demoteFormerPrimaries(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) error {
	if c.Status.TargetPrimary != c.Status.CurrentPrimary {
		return nil
	}
	up := instanceapi.FollowRequest{Upstream: instanceapi.Upstream{Host: rwServiceName(c), Port: postgresPort}}
	for _, m := range v.members {
		if m.name == c.Status.CurrentPrimary || m.status == nil || m.pod == nil || m.pod.DeletionTimestamp != nil || !formerPrimary(m.status) {
			continue
		}
		r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonDemoting, "Failover", "%s is a former primary (%s); rewinding it to follow %s", m.name, m.status.Phase, c.Status.CurrentPrimary)
		if err := ic.call(ctx, m.pod, http.MethodPost, instanceapi.PathDemote, up, nil); err != nil {
			return fmt.Errorf("while demoting the former primary %s: %w", m.name, err)
		}
	}
	return nil
}

// formerPrimary says an instance that should be a replica still is a
// primary, or is one that fenced itself.
func formerPrimary(st *instanceapi.Status) bool {
	return st.Role == instanceapi.RolePrimary || (st.Phase == instanceapi.PhaseFenced && !st.Fenced)
}
