package controller

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/postgres"
)

// reconcileRoleLabels keeps each pod's role label on the role Tusk wants:
// the -rw Service follows it, and the instance manager starts in it.
func (r *ClusterReconciler) reconcileRoleLabels(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) error {
	for _, m := range v.members {
		if err := r.labelRole(ctx, m, labelledRole(c, m)); err != nil {
			return err
		}
	}
	return nil
}

// labelledRole is the role label an instance's pod should carry now. A
// primary being switched over keeps its label, and takes writes, until
// the pass that steps it down moves the label (stepDownFirst), or again
// when its step-down failed and it still serves as the primary.
func labelledRole(c *tuskv1alpha1.PostgresCluster, m *member) instanceapi.Role {
	if m.name == c.Status.CurrentPrimary && c.Status.TargetPrimary != c.Status.CurrentPrimary &&
		m.status != nil && m.status.Role == instanceapi.RolePrimary {
		return instanceapi.RolePrimary
	}
	return wantedRole(c, m.name)
}

func (r *ClusterReconciler) labelRole(ctx context.Context, m *member, role instanceapi.Role) error {
	if m == nil || m.pod == nil || m.pod.Labels[LabelRole] == string(role) {
		return nil
	}
	patch := client.MergeFrom(m.pod.DeepCopy())
	m.pod.Labels[LabelRole] = string(role)
	// A pod deleted since the pass began (a failed primary's, typically)
	// needs no label; failing on it would leave the new primary's pod
	// unlabelled, and the -rw Service empty, until the next pass.
	if err := r.Patch(ctx, m.pod, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("while labelling %s as %s: %w", m.name, role, err)
	}
	return nil
}

// moveWritesTo labels the switchover's target primary, and the old one a
// replica. The -rw Service's endpoints and every node's proxy rules take
// one to two seconds to follow a label (kube-proxy syncs its rules at most
// once a second by default), so the label moves before the old primary
// steps down, not after: the delay then runs alongside the step-down and
// the promotion instead of adding to the write gap. Nothing is written
// anywhere meanwhile: the target refuses writes (read-only) until it is
// promoted, and the old primary's shutdown ends its sessions.
//
// A failover does not do the same before its promotion: there the -rw
// Service has no ready endpoint while the primary is down, and clients are
// refused at once, whereas pointing it at the candidate early brought
// every client's TLS handshake onto the candidate while it promoted. On
// the 2-core test machine the primary-deletion gap was 6.5-9.6 s with it
// and 4.6-6.4 s without (two runs each: noisy, but no gain to keep).
func (r *ClusterReconciler) moveWritesTo(ctx context.Context, old, target *member) error {
	if err := r.labelRole(ctx, old, instanceapi.RoleReplica); err != nil {
		return err
	}
	return r.labelRole(ctx, target, instanceapi.RolePrimary)
}

// startSwitchover records target as the primary Tusk wants; the steps
// follow in reconcileSwitchover.
func (r *ClusterReconciler) startSwitchover(ctx context.Context, c *tuskv1alpha1.PostgresCluster, target *member, why string) error {
	if err := r.recordDecision(ctx, c, func(s *tuskv1alpha1.PostgresClusterStatus) error {
		s.TargetPrimary = target.name
		return nil
	}); err != nil {
		return err // not decided after all
	}
	r.changingPrimary.heldFor(client.ObjectKeyFromObject(c).String(), time.Now())
	r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonSwitchingOver, "Switchover", "Switching the primary from %s to %s: %s", c.Status.CurrentPrimary, target.name, why)
	return nil
}

// reconcileSwitchoverRequests takes a switchover asked for with
// AnnotationSwitchoverTo, and refuses an unsafe target, before any label
// moves: an unsafe one is refused, not half-started.
func (r *ClusterReconciler) reconcileSwitchoverRequests(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) error {
	if err := r.takeSwitchoverRequest(ctx, c, v); err != nil {
		return err
	}
	return r.refuseUnsafeTarget(ctx, c, v)
}

// takeSwitchoverRequest turns the AnnotationSwitchoverTo request into
// status.targetPrimary when the instance may take over, or refuses it with
// a Warning Event; either way the request is then removed. A request made
// while a switchover or failover is under way waits for it to end.
func (r *ClusterReconciler) takeSwitchoverRequest(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) error {
	want, asked := c.Annotations[tuskv1alpha1.AnnotationSwitchoverTo]
	if !asked || c.Status.TargetPrimary != c.Status.CurrentPrimary {
		return nil
	}
	if why := refusedSwitchoverRequest(c, v, want); why != "" {
		r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonSwitchoverRefused, "Switchover",
			"Refused to switch the primary over to %s: %s; %s stays the primary", want, why, c.Status.CurrentPrimary)
	} else if err := r.startSwitchover(ctx, c, v.member(want), "asked for with the "+tuskv1alpha1.AnnotationSwitchoverTo+" annotation"); err != nil {
		return err
	}
	return r.forgetSwitchoverRequest(ctx, c)
}

// refusedSwitchoverRequest says why the instance asked for cannot become
// the primary by a switchover now, or "" when it can.
func refusedSwitchoverRequest(c *tuskv1alpha1.PostgresCluster, v *view, want string) string {
	target := v.member(want)
	switch {
	case want == c.Status.CurrentPrimary:
		return "it is the primary already"
	case target == nil:
		return "it is not an instance of this cluster"
	case !target.ready() || target.status.Role != instanceapi.RoleReplica || !target.status.Streaming:
		return "it is not a ready replica streaming from the primary"
	}
	return ""
}

// forgetSwitchoverRequest removes the request from the cluster. The patch
// goes through a copy: c carries this pass's status, which the end of the
// pass writes; only its resourceVersion follows the patch.
func (r *ClusterReconciler) forgetSwitchoverRequest(ctx context.Context, c *tuskv1alpha1.PostgresCluster) error {
	cp := c.DeepCopy()
	patch := client.MergeFrom(cp.DeepCopy())
	delete(cp.Annotations, tuskv1alpha1.AnnotationSwitchoverTo)
	if err := r.Patch(ctx, cp, patch); err != nil {
		return fmt.Errorf("while removing the switchover request: %w", err)
	}
	delete(c.Annotations, tuskv1alpha1.AnnotationSwitchoverTo)
	c.ResourceVersion = cp.ResourceVersion
	return nil
}

// refuseUnsafeTarget puts targetPrimary back on currentPrimary, with a
// Warning Event, when the target cannot safely become the primary: it is
// not an instance of the cluster, or, before the old primary has stepped
// down, it is not a ready, streaming replica (stepping down for a target
// that cannot take over would leave the cluster without a primary).
func (r *ClusterReconciler) refuseUnsafeTarget(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) error {
	why := unsafeTarget(c, v)
	if why == "" {
		return nil
	}
	refused := c.Status.TargetPrimary
	if err := r.recordDecision(ctx, c, func(s *tuskv1alpha1.PostgresClusterStatus) error {
		s.TargetPrimary = s.CurrentPrimary
		return nil
	}); err != nil {
		return err
	}
	r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonSwitchoverRefused, "Switchover",
		"Refused to switch the primary over to %s: %s; %s stays the primary", refused, why, c.Status.CurrentPrimary)
	return nil
}

// unsafeTarget says why targetPrimary must not become the primary, or ""
// when it may, or when the switchover is past stepping the old primary
// down (going back is no safer than going on then).
func unsafeTarget(c *tuskv1alpha1.PostgresCluster, v *view) string {
	if c.Status.TargetPrimary == c.Status.CurrentPrimary {
		return ""
	}
	target := v.member(c.Status.TargetPrimary)
	if target == nil {
		return "it is not an instance of this cluster"
	}
	old := v.member(c.Status.CurrentPrimary)
	if old == nil || old.status == nil || old.status.Role != instanceapi.RolePrimary {
		return ""
	}
	if !target.ready() || target.status.Role != instanceapi.RoleReplica || !target.status.Streaming {
		return "it is not a ready replica streaming from the primary"
	}
	return ""
}

// reconcileSwitchover moves the primary role from currentPrimary to
// targetPrimary without losing a committed write: the old primary steps
// down (a clean shutdown sends its standbys every WAL record), the target
// is promoted only once it has received everything the old primary wrote,
// and the old primary follows it. Each step is decided from what the
// instances report, so an operator restart half-way resumes correctly.
// It reports whether a switchover is under way.
func (r *ClusterReconciler) reconcileSwitchover(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) (bool, error) {
	if c.Status.TargetPrimary == c.Status.CurrentPrimary {
		return false, nil
	}
	old, target := v.member(c.Status.CurrentPrimary), v.member(c.Status.TargetPrimary)
	if target == nil || target.status == nil || old == nil || old.status == nil {
		return true, nil // wait until both answer (a failed primary is issue of failover)
	}
	switch switchoverStep(old.status, target.status) {
	case stepDownFirst:
		r.checkpointBeforeStepDown(ctx, old, ic)
		// The rw poolers hold their clients' transactions from here to
		// the promotion; whatever happens, not past this pass.
		paused := r.pausePoolers(ctx, c)
		defer paused.resume(ctx)
		// A failed step-down leaves the old primary serving: the next
		// pass labels it back (labelledRole).
		if err := r.moveWritesTo(ctx, old, target); err != nil {
			return true, err
		}
		checkpoint, err := r.stepDown(ctx, c, old, target, ic)
		if err != nil {
			return true, err
		}
		// The target normally has the checkpoint already: promoting in
		// this pass, rather than the next, shortens the write gap.
		if !waitForWAL(ctx, ic, target, checkpoint) {
			if old.pod.DeletionTimestamp != nil {
				// A handover: the old primary's pod is going and cannot be
				// the primary again; the failover rules pick the successor.
				return true, nil
			}
			return false, r.abortSwitchover(ctx, c, old, ic, fmt.Sprintf("%s did not receive the shutdown checkpoint %s", target.name, checkpoint))
		}
		if err := r.promoteAndRepoint(ctx, c, v, target, ic); err != nil {
			return true, err
		}
		paused.resume(ctx)
	case waitForRoles:
		return true, nil
	case giveUp:
		return false, r.abortSwitchover(ctx, c, old, ic, fmt.Sprintf("%s lacks WAL the former primary wrote (received %s, the former primary has %s)",
			target.name, target.status.ReceivedLSN, old.status.ReplayedLSN))
	case promoteTarget:
		if err := r.promoteAndRepoint(ctx, c, v, target, ic); err != nil {
			return true, err
		}
	case recordOnly:
	}
	from := c.Status.CurrentPrimary
	if err := r.recordDecision(ctx, c, func(s *tuskv1alpha1.PostgresClusterStatus) error {
		s.CurrentPrimary = target.name
		markSwitched(c)
		return nil
	}); err != nil {
		return true, err
	}
	r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonSwitchedOver, "Switchover", "%s is the primary; %s follows it", target.name, from)
	// The poolers that were not paused (session mode) may hold server
	// connections to the former primary.
	r.reconnectPoolers(ctx, c, func(p *tuskv1alpha1.PostgresPooler) bool { return p.Spec.PoolMode == tuskv1alpha1.PoolModeSession })
	r.observePrimaryChange(c, "switchover")
	return false, nil
}

// switchoverAction is the next step of a switchover.
type switchoverAction int

const (
	stepDownFirst switchoverAction = iota // the old primary still is one
	waitForRoles                          // an instance is between roles
	giveUp                                // the target lacks the old primary's last records
	promoteTarget                         // the target has everything
	recordOnly                            // the target was promoted in an earlier pass
)

// switchoverStep decides the next step from what the old primary and the
// target report. It never promotes a target that has not received every
// record of a stepped-down primary, and never gives up while the target
// might already be the primary.
func switchoverStep(old, target *instanceapi.Status) switchoverAction {
	switch {
	case old.Role == instanceapi.RolePrimary:
		return stepDownFirst
	case target.Role == instanceapi.RolePrimary:
		return recordOnly
	case old.Role != instanceapi.RoleReplica || target.Role != instanceapi.RoleReplica:
		return waitForRoles
	case !hasEverything(target, old):
		// The old primary stepped down, but the target was not streaming
		// when its last records were written: only the old primary has
		// them, and nothing will ever send them now.
		return giveUp
	}
	return promoteTarget
}

func (r *ClusterReconciler) promote(ctx context.Context, target *member, ic *instanceClient) error {
	if err := ic.call(ctx, target.pod, http.MethodPost, instanceapi.PathPromote, nil, nil); err != nil {
		return fmt.Errorf("while promoting %s: %w", target.name, err)
	}
	return nil
}

// promoteAndRepoint promotes a switchover's target and points the other
// replicas at it (reconnectReplicas): their upstream just stepped down.
func (r *ClusterReconciler) promoteAndRepoint(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, target *member, ic *instanceClient) error {
	if err := r.promote(ctx, target, ic); err != nil {
		return err
	}
	reconnectReplicas(ctx, c, v, target, ic)
	return nil
}

// abortSwitchover makes the stepped-down primary the primary again: it has
// every record, so promoting it loses nothing, and the others follow its
// new timeline. The switchover is given up; a rollout will try again.
func (r *ClusterReconciler) abortSwitchover(ctx context.Context, c *tuskv1alpha1.PostgresCluster, old *member, ic *instanceClient, why string) error {
	if err := ic.call(ctx, old.pod, http.MethodPost, instanceapi.PathPromote, nil, nil); err != nil {
		return fmt.Errorf("while promoting %s back after an aborted switchover: %w", old.name, err)
	}
	target := c.Status.TargetPrimary
	if err := r.recordDecision(ctx, c, func(s *tuskv1alpha1.PostgresClusterStatus) error {
		s.TargetPrimary = s.CurrentPrimary
		return nil
	}); err != nil {
		return err
	}
	r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonSwitchoverAborted, "Switchover", "Gave up switching over to %s: %s; %s is the primary again", target, why, old.name)
	return nil
}

// switchoverCheckpointTimeout bounds the CHECKPOINT before a step-down.
const switchoverCheckpointTimeout = 30 * time.Second

// checkpointBeforeStepDown asks the old primary for a CHECKPOINT while it
// still takes writes and -rw still leads to it, so that the shutdown
// checkpoint of its step-down, during which nothing can be written, is
// short. A failure only means a longer shutdown checkpoint: it is logged
// and the switchover goes on.
func (r *ClusterReconciler) checkpointBeforeStepDown(ctx context.Context, old *member, ic *instanceClient) {
	ctx, cancel := context.WithTimeout(ctx, switchoverCheckpointTimeout)
	defer cancel()
	var res instanceapi.CheckpointResult
	if err := ic.call(ctx, old.pod, http.MethodPost, instanceapi.PathCheckpoint, nil, &res); err != nil {
		ctrlLog(ctx).Info("Checkpoint before the step-down failed; the shutdown checkpoint writes it all", "instance", old.name, "error", err.Error())
		return
	}
	ctrlLog(ctx).Info("Checkpointed before the step-down", "instance", old.name, "tookMilliseconds", res.TookMilliseconds)
}

// stepDown shuts the old primary down cleanly and restarts it as a replica
// of the target (its pod IP first, then the -rw Service); it returns the
// location of its shutdown checkpoint.
func (r *ClusterReconciler) stepDown(ctx context.Context, c *tuskv1alpha1.PostgresCluster, old, target *member, ic *instanceClient) (postgres.LSN, error) {
	up := instanceapi.FollowRequest{Upstream: instanceapi.Upstream{Host: rwServiceName(c), HostAddr: target.pod.Status.PodIP, Port: postgresPort}}
	var res instanceapi.StepDownResult
	if err := ic.call(ctx, old.pod, http.MethodPost, instanceapi.PathStepDown, up, &res); err != nil {
		return 0, fmt.Errorf("while stepping %s down: %w", old.name, err)
	}
	ctrlLog(ctx).Info("Stepped the primary down", "instance", old.name, "shutdownCheckpoint", res.ShutdownCheckpointLSN)
	lsn, err := postgres.ParseLSN(res.ShutdownCheckpointLSN)
	if err != nil {
		return 0, fmt.Errorf("while reading the shutdown checkpoint of %s: %w", old.name, err)
	}
	return lsn, nil
}

// walWait bounds how long one reconcile waits for the target to report the
// old primary's last record; after that the next reconcile checks again.
const walWait = 5 * time.Second

// waitForWAL says whether the target reports having received WAL past the
// checkpoint record within walWait.
func waitForWAL(ctx context.Context, ic *instanceClient, target *member, checkpoint postgres.LSN) bool {
	ctx, cancel := context.WithTimeout(ctx, walWait)
	defer cancel()
	for {
		if st, err := ic.status(ctx, target.pod); err == nil {
			if received, err := postgres.ParseLSN(st.ReceivedLSN); err == nil && received > checkpoint {
				target.status = &st
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// hasEverything says the target received all the WAL the stepped-down
// primary has: its shutdown checkpoint is the last record it wrote.
func hasEverything(target, old *instanceapi.Status) bool {
	received, err := postgres.ParseLSN(target.ReceivedLSN)
	if err != nil {
		return false
	}
	last := postgres.LSN(0)
	for _, s := range []string{old.ReceivedLSN, old.ReplayedLSN} {
		if l, err := postgres.ParseLSN(s); err == nil {
			last = max(last, l)
		}
	}
	return last > 0 && received >= last
}

// switchoverCandidate is the ready, up-to-date replica with the most WAL
// received, or nil.
func switchoverCandidate(c *tuskv1alpha1.PostgresCluster, v *view, hash string) *member {
	var candidates []*member
	for _, m := range v.members {
		if m.name != c.Status.CurrentPrimary && m.ready() && m.status.Streaming && !outdated(m, hash) {
			candidates = append(candidates, m)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	return slices.MaxFunc(candidates, func(a, b *member) int {
		la, _ := postgres.ParseLSN(a.status.ReceivedLSN)
		lb, _ := postgres.ParseLSN(b.status.ReceivedLSN)
		switch {
		case la != lb:
			return int(min(max(la.Minus(lb), -1), 1))
		default:
			return int(b.serial - a.serial)
		}
	})
}
