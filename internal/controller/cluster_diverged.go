package controller

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// divergedAfter is how long a replica may stay behind the primary's
// timeline without streaming before Tusk rewinds it. A replica that
// reconnects after a failover streams again within seconds; one that
// received WAL the new primary never had ("forked off before the current
// recovery point") never will.
const divergedAfter = 20 * time.Second

// firstSeen remembers since when a condition has held for each key, in
// this operator's memory only: after a restart it starts again, which
// only delays what depends on it.
type firstSeen struct {
	mu    sync.Mutex
	since map[string]time.Time
}

// heldFor records that the condition holds for key now and returns for
// how long it has.
func (f *firstSeen) heldFor(key string, now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.since == nil {
		f.since = map[string]time.Time{}
	}
	start, ok := f.since[key]
	if !ok {
		f.since[key], start = now, now
	}
	return now.Sub(start)
}

func (f *firstSeen) forget(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.since, key)
}

// divergedReplica says a replica runs on an older timeline than the
// primary's and does not stream from it.
func divergedReplica(m, primary *member) bool {
	return m != primary && m.status != nil && m.pod != nil && m.pod.DeletionTimestamp == nil &&
		m.status.Role == instanceapi.RoleReplica && m.status.Phase == instanceapi.PhaseRunning &&
		!m.status.Streaming && m.status.Timeline < primary.status.Timeline
}

// reportsDiverged says a replica reported that it cannot follow the
// primary's timeline: it has WAL past the point where that timeline forked
// off. Rewinding it at once matters in synchronous mode, where it may be
// the standby that commits wait for.
func reportsDiverged(m, primary *member) bool {
	return m != primary && m.status != nil && m.pod != nil && m.pod.DeletionTimestamp == nil &&
		m.status.Role == instanceapi.RoleReplica && m.status.Phase == instanceapi.PhaseRunning && m.status.Diverged != ""
}

// rewindDivergedReplicas rewinds (pg_rewind, or a fresh copy when that
// fails) replicas that say they diverged, at once, and replicas that stay
// on an older timeline than the primary's without streaming: after a
// failover a replica may have received WAL the new primary never had (an
// asynchronous one, or WAL a healed partition delivered late), and then
// cannot follow it.
func (r *ClusterReconciler) rewindDivergedReplicas(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) error {
	primary := v.member(c.Status.CurrentPrimary)
	if primary == nil || primary.status == nil || primary.status.Role != instanceapi.RolePrimary || c.Status.TargetPrimary != c.Status.CurrentPrimary {
		return nil
	}
	now := time.Now()
	up := instanceapi.FollowRequest{Upstream: instanceapi.Upstream{Host: rwServiceName(c), Port: postgresPort}}
	for _, m := range v.members {
		key := c.Namespace + "/" + m.name
		said := reportsDiverged(m, primary)
		if !said && !divergedReplica(m, primary) {
			r.diverged.forget(key)
			continue
		}
		if !said && r.diverged.heldFor(key, now) < divergedAfter {
			continue
		}
		r.diverged.forget(key)
		if said {
			r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonRewinding, "Heal", "%s cannot follow the primary %s (timeline %d): %s; rewinding it",
				m.name, primary.name, primary.status.Timeline, m.status.Diverged)
		} else {
			r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonRewinding, "Heal", "%s has stayed on timeline %d without streaming from the primary %s (timeline %d); rewinding it",
				m.name, m.status.Timeline, primary.name, primary.status.Timeline)
		}
		if err := ic.call(ctx, m.pod, http.MethodPost, instanceapi.PathDemote, up, nil); err != nil {
			return fmt.Errorf("while rewinding %s: %w", m.name, err)
		}
	}
	return nil
}
