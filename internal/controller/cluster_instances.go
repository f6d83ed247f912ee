package controller

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// reconcileInstances creates the first instance, recreates pods of
// instances whose pod is gone, and adds or removes replicas to match
// spec.instances. It reports whether it changed anything.
func (r *ClusterReconciler) reconcileInstances(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) (bool, error) {
	if adopting(c, v) {
		return r.adoptVolumes(ctx, c, v, ic)
	}
	if c.Status.CurrentPrimary == "" {
		return r.bootstrapPrimary(ctx, c, v)
	}
	if err := r.resizeVolumes(ctx, c, v); err != nil {
		return false, err
	}
	if changed, err := r.recreateMissingPods(ctx, c, v); changed || err != nil {
		return changed, err
	}
	if changed, err := r.recloneBrokenReplica(ctx, c, v); changed || err != nil {
		return changed, err
	}
	want := int(c.Spec.Instances)
	switch {
	case len(v.members) < want:
		return r.scaleUp(ctx, c, v, want-len(v.members))
	case len(v.members) > want:
		return r.scaleDown(ctx, c, v)
	}
	return false, nil
}

// bootstrapPrimary creates instance 1 and records it as the primary (a
// cluster that finds volumes of a deleted one adopts them instead:
// adoptVolumes).
func (r *ClusterReconciler) bootstrapPrimary(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) (bool, error) {
	name, err := r.allocateInstance(ctx, c, v)
	if err != nil {
		return false, err
	}
	if err := r.recordDecision(ctx, c, func(s *tuskv1alpha1.PostgresClusterStatus) error {
		s.CurrentPrimary, s.TargetPrimary = name, name
		return nil
	}); err != nil {
		return false, err
	}
	return true, r.createInstance(ctx, c, name, instanceapi.RolePrimary, true, v.recovery)
}

// allocateInstance takes the next serial number and records it before
// anything is created, so a name is never used twice.
func (r *ClusterReconciler) allocateInstance(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) (string, error) {
	last := c.Status.LastInstanceSerial
	for _, m := range v.members {
		last = max(last, m.serial)
	}
	if err := r.recordDecision(ctx, c, func(s *tuskv1alpha1.PostgresClusterStatus) error {
		s.LastInstanceSerial = last + 1
		return nil
	}); err != nil {
		return "", err // not taken: nothing was created
	}
	return instanceName(c.Name, last+1), nil
}

// createInstance creates the volume (when new) and the pod of an instance.
// A primary created while the cluster recovers gets the recovery source
// (rec, nil otherwise).
func (r *ClusterReconciler) createInstance(ctx context.Context, c *tuskv1alpha1.PostgresCluster, name string, role instanceapi.Role, newVolume bool, rec *recoverySource) error {
	if newVolume {
		if err := r.Create(ctx, instancePVC(c, name)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("while creating the volume of %s: %w", name, err)
		}
	}
	pod := instancePod(c, name, role, r.Config.InstanceManagerImage)
	if rec != nil && role == instanceapi.RolePrimary {
		withRecovery(pod, rec)
	}
	secretsHash, err := r.mountedSecretsHash(ctx, c)
	if err != nil {
		return err
	}
	setAnnotation(pod, AnnotationSecretsHash, secretsHash)
	if err := r.ownAndCreate(ctx, c, pod); err != nil {
		return fmt.Errorf("while creating the pod of %s: %w", name, err)
	}
	verb, reason := "Created", tuskv1alpha1.ReasonCreatedInstance
	if !newVolume {
		verb, reason = "Recreated", tuskv1alpha1.ReasonRecreatedInstance
	}
	r.event(c, corev1.EventTypeNormal, reason, "Create", "%s instance %s as %s", verb, name, role)
	return nil
}

func (r *ClusterReconciler) ownAndCreate(ctx context.Context, c *tuskv1alpha1.PostgresCluster, obj client.Object) error {
	if err := ctrlSetOwner(c, obj, r.Scheme()); err != nil {
		return err
	}
	if err := r.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// recreateMissingPods gives every volume without a pod a new pod on it, in
// the role Tusk wants for it: a deleted pod comes back with its data.
func (r *ClusterReconciler) recreateMissingPods(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) (bool, error) {
	changed := false
	for _, m := range v.members {
		if m.pod != nil || m.pvc == nil || m.pvc.DeletionTimestamp != nil {
			continue
		}
		// The primary's pod, deleted before it recovered, recovers again.
		if err := r.createInstance(ctx, c, m.name, wantedRole(c, m.name), false, v.recovery); err != nil {
			return changed, err
		}
		changed = true
	}
	return changed, nil
}

// scaleUp adds replicas, all at once: each copies the primary with
// pg_basebackup. It waits for a ready primary to copy from.
func (r *ClusterReconciler) scaleUp(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, n int) (bool, error) {
	if p := v.member(c.Status.CurrentPrimary); p == nil || !p.ready() {
		return false, nil
	}
	for range n {
		name, err := r.allocateInstance(ctx, c, v)
		if err != nil {
			return true, err
		}
		if err := r.createInstance(ctx, c, name, instanceapi.RoleReplica, true, nil); err != nil {
			return true, err
		}
	}
	return true, nil
}

// scaleDown removes the least valuable replica: one that is not ready
// first, then the newest. Never the primary. Its volume goes with it: a
// replica's data is a copy of the primary's.
func (r *ClusterReconciler) scaleDown(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) (bool, error) {
	victim := leastValuableReplica(c, v)
	if victim == nil {
		return false, nil
	}
	if err := r.removeInstance(ctx, victim); err != nil {
		return false, err
	}
	r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonRemovedInstance, "ScaleDown", "Removed replica %s and its volume (scaling to %d instances)", victim.name, c.Spec.Instances)
	return true, nil
}

func leastValuableReplica(c *tuskv1alpha1.PostgresCluster, v *view) *member {
	candidates := slices.DeleteFunc(slices.Clone(v.members), func(m *member) bool {
		return m.name == c.Status.CurrentPrimary || m.name == c.Status.TargetPrimary
	})
	if len(candidates) == 0 {
		return nil
	}
	fencedByHand := func(m *member) bool { return m.status != nil && m.status.Fenced }
	slices.SortStableFunc(candidates, func(a, b *member) int {
		if fencedByHand(a) != fencedByHand(b) {
			// Kept for inspection: removed last.
			if fencedByHand(a) {
				return 1
			}
			return -1
		}
		if a.ready() != b.ready() {
			if !a.ready() {
				return -1
			}
			return 1
		}
		return int(b.serial - a.serial)
	})
	return candidates[0]
}

// wantedRole is the role Tusk wants an instance to have.
func wantedRole(c *tuskv1alpha1.PostgresCluster, name string) instanceapi.Role {
	if name == c.Status.CurrentPrimary && c.Status.CurrentPrimary == c.Status.TargetPrimary {
		return instanceapi.RolePrimary
	}
	if c.Status.CurrentPrimary == "" && name == c.Status.TargetPrimary {
		return instanceapi.RolePrimary // the primary an adoption chose (adoptVolumes)
	}
	return instanceapi.RoleReplica
}

// resizeVolumes grows volumes smaller than spec.storage.size. A storage
// class that cannot expand is reported in an Event.
func (r *ClusterReconciler) resizeVolumes(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) error {
	want := c.Spec.Storage.Size
	for _, m := range v.members {
		if m.pvc == nil || m.pvc.DeletionTimestamp != nil {
			continue
		}
		have := m.pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		if have.Cmp(want) >= 0 {
			continue
		}
		patch := client.MergeFrom(m.pvc.DeepCopy())
		m.pvc.Spec.Resources.Requests[corev1.ResourceStorage] = want
		err := r.Patch(ctx, m.pvc, patch)
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			// The rest of the cluster is still managed; the Event says why
			// the volume keeps its size.
			r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonVolumeResizeFailed, "Resize", "Cannot grow the volume of %s to %s: %v", m.name, want.String(), err)
			continue
		}
		if err != nil {
			return fmt.Errorf("while growing the volume of %s: %w", m.name, err)
		}
		r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonResizingVolume, "Resize", "Growing the volume of %s from %s to %s", m.name, have.String(), want.String())
	}
	return nil
}

// crashesBeforeReclone is how many times in a row postgres must have
// crashed, each soon after starting, and be crashed now, before a replica's
// data is judged unusable. Crashes of separate faults (a killed process, a
// fence, a rejoin after a failover) do not add up: the instance manager
// ends a streak once postgres has run for a while.
const crashesBeforeReclone = 5

// recloneBrokenReplica replaces a replica whose postgres keeps crashing
// while the primary, built from the same spec, runs: the fault is in that
// replica's data, which is only a copy. Its pod and volume are deleted and
// scaling up makes a fresh copy under a new name. One at a time, and only
// when every other instance is ready.
func (r *ClusterReconciler) recloneBrokenReplica(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) (bool, error) {
	primary := v.member(c.Status.CurrentPrimary)
	if primary == nil || !primary.ready() || c.Status.TargetPrimary != c.Status.CurrentPrimary {
		return false, nil
	}
	var broken *member
	for _, m := range v.members {
		switch {
		case m.ready():
		case brokenReplica(m, primary) && broken == nil:
			broken = m
		default:
			return false, nil // something else is wrong too: do not add to it
		}
	}
	if broken == nil {
		return false, nil
	}
	r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonRecloningInstance, "Heal", "Replacing replica %s with a fresh copy of the primary: postgres crashed %d times in a row (%s)",
		broken.name, broken.status.CrashStreak, broken.status.LastError)
	return true, r.removeInstance(ctx, broken)
}

func brokenReplica(m, primary *member) bool {
	return m.name != primary.name && m.pod != nil && m.status != nil &&
		m.status.Phase == instanceapi.PhaseCrashed && m.status.CrashStreak >= crashesBeforeReclone &&
		m.pod.Annotations[AnnotationHash] == primary.pod.Annotations[AnnotationHash]
}

// removeInstance deletes an instance's pod and volume.
func (r *ClusterReconciler) removeInstance(ctx context.Context, m *member) error {
	if m.pod != nil {
		if err := r.Delete(ctx, m.pod); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("while deleting the pod of %s: %w", m.name, err)
		}
	}
	if m.pvc != nil {
		if err := r.Delete(ctx, m.pvc); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("while deleting the volume of %s: %w", m.name, err)
		}
	}
	return nil
}
