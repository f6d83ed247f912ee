package controller

import (
	"context"
	"slices"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// Instance-manager settings for a pod's termination (instance.TerminationOptions):
// a primary with a streaming standby keeps serving for up to
// handoverWait after SIGTERM while the operator switches over; each
// drain, before and after postgres stops, lasts up to drainTimeout. Both,
// with the fast shutdown between them, fit in the pod's grace period.
const (
	handoverWait           = "15s"
	drainTimeout           = "15s"
	terminationGracePeriod = 60
)

// reconcileHandover turns the deletion of the primary's pod (kubectl
// delete, an eviction, a drain, a node upgrade) into a switchover while the
// pod's instance manager still runs it as the primary: it waits for that
// (instance.TerminationOptions.HandoverWait). A switchover moves the -rw
// label first and promotes the target as soon as it has the old primary's
// shutdown checkpoint, where a failover after the pod is gone would wait
// for the shutdown, the Lease and only then move the label. When no replica
// may take over, nothing is started: the primary shuts down by itself and
// the failover rules decide.
func (r *ClusterReconciler) reconcileHandover(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) error {
	target := handoverTarget(c, v)
	if target == nil {
		return nil
	}
	return r.startSwitchover(ctx, c, target, "the primary's pod is being deleted; handing its role over before it goes")
}

// reconcileLeavingPrimary hands the role of a primary whose pod is going
// over while it still serves, and fails a failed primary over.
func (r *ClusterReconciler) reconcileLeavingPrimary(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) (failover, error) {
	if err := r.reconcileHandover(ctx, c, v); err != nil {
		return failover{}, err
	}
	return r.reconcileFailover(ctx, c, v, ic)
}

// handoverTarget is the replica to hand the primary role over to, or nil
// when there is no handover to start: no switchover under way, the
// primary's pod being deleted while it still serves as the primary, and a
// ready replica streaming from it. Outdated replicas qualify: the pod goes
// whatever its spec.
func handoverTarget(c *tuskv1alpha1.PostgresCluster, v *view) *member {
	p := v.member(c.Status.CurrentPrimary)
	if c.Status.TargetPrimary != c.Status.CurrentPrimary || p == nil || p.pod == nil || p.pod.DeletionTimestamp == nil || !servingAsPrimary(p.status) {
		return nil
	}
	var candidates []*member
	for _, m := range v.members {
		if m != p && m.ready() && m.status.Role == instanceapi.RoleReplica && m.status.Streaming {
			candidates = append(candidates, m)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	return slices.MaxFunc(candidates, moreAdvanced)
}

// servingAsPrimary says an instance's manager runs postgres as a primary
// that accepts connections.
func servingAsPrimary(st *instanceapi.Status) bool {
	return st != nil && st.Role == instanceapi.RolePrimary && st.Phase == instanceapi.PhaseRunning
}

// terminatingPrimaryStatus says whether the status of a pod being deleted
// is worth asking for: only the current primary's, for a handover, and
// only while its container runs (once it has exited, its address may
// already be gone and the request would wait for its whole timeout).
func terminatingPrimaryStatus(c *tuskv1alpha1.PostgresCluster, m *member) bool {
	if m.name != c.Status.CurrentPrimary {
		return false
	}
	for _, cs := range m.pod.Status.ContainerStatuses {
		if cs.Name == "postgres" {
			return cs.State.Running != nil
		}
	}
	return false
}
