package controller

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// rollout is what reconcileRollout found: whether instances still need an
// update, and why it is waiting when it is.
type rollout struct {
	pending bool
	waiting string // why the rollout cannot take its next step
	halted  bool   // an updated instance does not start
}

// outdated says the pod was built from another spec than the cluster's.
func outdated(m *member, hash string) bool {
	return m.pod != nil && m.pod.Annotations[AnnotationHash] != hash
}

// needsRestart says PostgreSQL has settings that take effect only after a
// restart.
func needsRestart(m *member) bool {
	return m.status != nil && len(m.status.PendingRestart) > 0
}

// reconcileRollout updates instances whose pod is outdated or whose
// PostgreSQL needs a restart: replicas first, one at a time, each only
// when every instance is ready; then the primary, by a switchover to an
// updated replica (or a restart when it is alone). A new pod that does not
// become ready stops the rollout: no second instance is taken down. An
// instance that is down and outdated is replaced at once.
func (r *ClusterReconciler) reconcileRollout(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) (rollout, error) {
	hash := podSpecHash(c, r.Config.InstanceManagerImage)
	var pending []*member
	for _, m := range v.members {
		if outdated(m, hash) || needsRestart(m) {
			pending = append(pending, m)
		}
	}
	if len(pending) == 0 {
		return rollout{}, nil
	}
	ro := rollout{pending: true}
	if stop, err := r.rolloutHeldBack(ctx, c, v, hash, ic, &ro); stop || err != nil {
		return ro, err
	}
	primary := v.member(c.Status.CurrentPrimary)
	if primary != nil && !outdated(primary, hash) && lowersHotStandbySetting(primary.status) {
		// A standby refuses to serve with a lower value than its primary's,
		// so a decrease reaches the primary (restarted in place) first.
		return ro, r.updateInstance(ctx, c, primary, hash, ic)
	}
	for _, m := range pending {
		if m.name != c.Status.CurrentPrimary {
			return ro, r.updateInstance(ctx, c, m, hash, ic)
		}
	}
	if len(v.members) == 1 {
		return ro, r.updateInstance(ctx, c, primary, hash, ic)
	}
	target := switchoverCandidate(c, v, hash)
	if target == nil {
		ro.waiting = "no ready, updated replica to switch the primary over to"
		return ro, nil
	}
	return ro, r.startSwitchover(ctx, c, target, "the primary needs an update")
}

// rolloutHeldBack says whether an instance stops the rollout at this
// pass, and why in ro: a fenced one, one not ready, or an outdated one that
// serves nothing and is replaced at once.
func (r *ClusterReconciler) rolloutHeldBack(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, hash string, ic *instanceClient, ro *rollout) (bool, error) {
	for _, m := range v.members {
		if m.status != nil && m.status.Fenced {
			// Kept for inspection: neither replaced nor restarted.
			ro.waiting = fmt.Sprintf("%s is fenced by hand (annotation %s)", m.name, tuskv1alpha1.AnnotationFencedInstances)
			return true, nil
		}
		if !m.ready() && outdated(m, hash) && m.pod.DeletionTimestamp == nil {
			// It serves nothing, so replacing it takes nothing down; this is
			// how a new spec fixes a rollout that halted on a broken one.
			return true, r.updateInstance(ctx, c, m, hash, ic)
		}
		if !m.ready() {
			ro.waiting = fmt.Sprintf("waiting for %s to become ready%s", m.name, notReadyReason(m))
			ro.halted = m.pod != nil && waitingReason(m.pod) != ""
			return true, nil
		}
	}
	return false, nil
}

// updateInstance replaces an outdated pod (its volume stays) or restarts
// PostgreSQL in place when only settings changed.
func (r *ClusterReconciler) updateInstance(ctx context.Context, c *tuskv1alpha1.PostgresCluster, m *member, hash string, ic *instanceClient) error {
	if outdated(m, hash) {
		r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonRollingOut, "Update", "Replacing the pod of %s to apply the new spec", m.name)
		if err := r.Delete(ctx, m.pod); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("while replacing the pod of %s: %w", m.name, err)
		}
		return nil
	}
	r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonRestarting, "Update", "Restarting PostgreSQL on %s to apply %v", m.name, m.status.PendingRestart)
	if err := ic.call(ctx, m.pod, http.MethodPost, instanceapi.PathRestart, nil, nil); err != nil {
		return fmt.Errorf("while restarting %s: %w", m.name, err)
	}
	return nil
}

// notReadyReason says, for humans, why an instance is not ready.
func notReadyReason(m *member) string {
	switch {
	case m.pod == nil:
		return ": its pod is being created"
	case m.pod.DeletionTimestamp != nil:
		return ": its pod is being replaced"
	case waitingReason(m.pod) != "":
		return ": " + waitingReason(m.pod)
	case m.status == nil && m.err != nil:
		return ": " + m.err.Error()
	case m.status != nil && m.status.LastError != "":
		return ": " + m.status.LastError
	case m.status != nil:
		return fmt.Sprintf(" (instance %s)", m.status.Phase)
	}
	return ""
}

// hotStandbySettings must be at least as high on a standby as on its
// primary, or the standby stops serving reads (and replaying) until they are.
var hotStandbySettings = []string{
	"max_connections", "max_worker_processes", "max_wal_senders", "max_prepared_transactions", "max_locks_per_transaction",
}

// lowersHotStandbySetting says a restart would lower one of them.
func lowersHotStandbySetting(st *instanceapi.Status) bool {
	if st == nil {
		return false
	}
	for _, pv := range st.PendingValues {
		if !slices.Contains(hotStandbySettings, pv.Name) {
			continue
		}
		running, err1 := strconv.ParseInt(pv.Running, 10, 64)
		pending, err2 := strconv.ParseInt(pv.Pending, 10, 64)
		if err1 == nil && err2 == nil && pending < running {
			return true
		}
	}
	return false
}
