package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/postgres"
)

// Adopting volumes kept from a deleted cluster of the same name
// (reclaimPolicy Retain). Nothing of the old cluster's status survives it:
// not which instance was the primary, not the synchronous quorum, not the
// last LSNs. So the instances say what their data is. Every volume gets a
// pod as a replica: a standby's data starts as a standby and replays its own
// WAL, a primary's is kept stopped until it can rejoin, and a primary whose
// old primary Lease is still there starts as the primary (its manager finds
// it holds it: it was the last primary). Each manager reports what pg_control
// said of its data before it changed anything (status.dataDir). Once all
// have, the primary is the instance that serves as the primary already, or
// else the most advanced data (moreAdvancedData): a standby chosen is
// promoted, a primary's data directory chosen is restarted as the primary
// (its pod recreated with the primary's label). The others then follow it
// as replicas, a former primary's data rewound as after any failover. Until
// the choice is recorded as currentPrimary, failover does not run (it needs
// a current primary), so no replica can be promoted by a rule that knows
// less.

// adoptVolumes takes one step of an adoption and reports whether it changed
// anything.
func (r *ClusterReconciler) adoptVolumes(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) (bool, error) {
	if last := v.members[len(v.members)-1].serial; c.Status.LastInstanceSerial < last {
		// Recorded first: a name is never used twice.
		if err := r.recordDecision(ctx, c, func(s *tuskv1alpha1.PostgresClusterStatus) error {
			s.LastInstanceSerial = last
			return nil
		}); err != nil {
			return false, err
		}
		r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonAdoptingVolumes, "Create",
			"Found %d volumes of an earlier cluster %s (%s); starting each to compare their data before choosing the primary",
			len(v.members), c.Name, strings.Join(memberNames(v.members), ", "))
		return true, nil
	}
	if changed, err := r.recreateMissingPods(ctx, c, v); changed || err != nil {
		return changed, err
	}
	if p := adoptedPrimary(c, v); p != nil {
		return true, r.recordAdoptedPrimary(ctx, c, v, p, ic)
	}
	if target := v.member(c.Status.TargetPrimary); target != nil {
		return r.makeAdoptedPrimary(ctx, target, ic)
	}
	best, _ := adoptionCandidate(v)
	if best == nil {
		return false, nil // waiting for reports: adoptionProgress says so
	}
	if err := r.chooseAdoptedPrimary(ctx, c, best); err != nil {
		return false, err
	}
	return r.makeAdoptedPrimary(ctx, best, ic)
}

// adopting says whether the cluster is adopting kept volumes: it has
// instances but never had a primary (a new cluster records its first
// instance as the primary when it creates it).
func adopting(c *tuskv1alpha1.PostgresCluster, v *view) bool {
	return c.Status.CurrentPrimary == "" && len(v.members) > 0
}

// adoptionProgress is the Progressing message of an adoption.
func adoptionProgress(c *tuskv1alpha1.PostgresCluster, v *view) string {
	if c.Status.TargetPrimary != "" {
		return fmt.Sprintf("Adopting the volumes of an earlier cluster: starting %s, which has the most advanced data, as the primary", c.Status.TargetPrimary)
	}
	if _, waiting := adoptionCandidate(v); len(waiting) > 0 {
		return fmt.Sprintf("Adopting the volumes of an earlier cluster: waiting for %s to report their data", strings.Join(waiting, ", "))
	}
	return "Adopting the volumes of an earlier cluster"
}

// adoptedPrimary is the instance serving as the primary: the one chosen
// earlier, or one that took the old primary Lease it held; nil when none.
func adoptedPrimary(c *tuskv1alpha1.PostgresCluster, v *view) *member {
	if t := v.member(c.Status.TargetPrimary); t != nil && servingAsPrimary(t.status) {
		return t
	}
	for _, m := range v.members {
		if m.pod != nil && m.pod.DeletionTimestamp == nil && servingAsPrimary(m.status) {
			return m
		}
	}
	return nil
}

// adoptionCandidate is the instance with the most advanced data, once
// every instance with data has reported it; otherwise nil and the
// instances not heard from yet. Instances that found no data directory
// (a volume whose pod never bootstrapped) are left out; when no instance
// has data, the lowest serial is the primary (it runs initdb, or the
// recovery, as a new cluster's first instance does).
func adoptionCandidate(v *view) (*member, []string) {
	var candidates []*member
	var waiting []string
	for _, m := range v.members {
		switch {
		case m.status == nil || m.status.DataDir == nil:
			waiting = append(waiting, m.name)
		case !m.status.DataDir.Empty:
			candidates = append(candidates, m)
		}
	}
	switch {
	case len(waiting) > 0:
		return nil, waiting
	case len(candidates) == 0:
		return v.members[0], nil
	}
	return slices.MaxFunc(candidates, moreAdvancedData), nil
}

// moreAdvancedData orders data directories for adoption: the later
// timeline first (a promotion came after everything on the earlier one);
// on one timeline a primary's data before a standby's (a standby only has
// what it received from that primary); then the most WAL; then the older
// instance, so the choice is stable.
func moreAdvancedData(a, b *member) int {
	da, db := a.status.DataDir, b.status.DataDir
	if da.Timeline != db.Timeline {
		return cmpInt(da.Timeline, db.Timeline)
	}
	if da.Standby != db.Standby {
		if db.Standby {
			return 1
		}
		return -1
	}
	if la, lb := dataLSN(a), dataLSN(b); la != lb {
		return int(min(max(la.Minus(lb), -1), 1))
	}
	return int(b.serial - a.serial)
}

func cmpInt(a, b uint32) int {
	switch {
	case a > b:
		return 1
	case a < b:
		return -1
	}
	return 0
}

// dataLSN is how far an instance's data goes, at least: pg_control's
// latest checkpoint and minimum recovery point, and for a standby that
// runs, what it received or replayed since.
func dataLSN(m *member) postgres.LSN {
	var last postgres.LSN
	for _, s := range []string{m.status.DataDir.CheckpointLSN, m.status.DataDir.MinRecoveryLSN} {
		if l, err := postgres.ParseLSN(s); err == nil {
			last = max(last, l)
		}
	}
	if m.status.Role == instanceapi.RoleReplica {
		last = max(last, receivedLSN(m.status))
	}
	return last
}

// chooseAdoptedPrimary records the chosen instance as the target: from
// then on it is the one made the primary, whatever a later pass observes.
func (r *ClusterReconciler) chooseAdoptedPrimary(ctx context.Context, c *tuskv1alpha1.PostgresCluster, best *member) error {
	if err := r.recordDecision(ctx, c, func(s *tuskv1alpha1.PostgresClusterStatus) error {
		s.TargetPrimary = best.name
		return nil
	}); err != nil {
		return err
	}
	d := best.status.DataDir
	what := fmt.Sprintf("a primary's data directory, timeline %d, WAL to %s at least", d.Timeline, dataLSN(best))
	switch {
	case d.Empty:
		what = "no volume has data; it is created as a new cluster's first instance"
	case d.Standby:
		what = fmt.Sprintf("a standby's data directory, timeline %d, WAL to %s at least", d.Timeline, dataLSN(best))
	}
	r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonAdoptingVolumes, "Create",
		"%s has the most advanced data of the volumes found (%s): it becomes the primary", best.name, what)
	return nil
}

// makeAdoptedPrimary takes the chosen instance a step towards serving as
// the primary (adoptionAction).
func (r *ClusterReconciler) makeAdoptedPrimary(ctx context.Context, m *member, ic *instanceClient) (bool, error) {
	switch adoptionAction(m) {
	case adoptPromote:
		return true, r.promoteWhenFree(ctx, m, ic)
	case adoptRestart:
		if err := r.Delete(ctx, m.pod, client.Preconditions{UID: &m.pod.UID}); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("while restarting %s as the primary: %w", m.name, err)
		}
		return true, nil
	}
	return false, nil
}

// adoptAction is what makes an adoption's chosen instance the primary.
type adoptAction int

const (
	adoptWait    adoptAction = iota // its pod is going, or starting as the primary
	adoptPromote                    // a running standby: promote it (once the old Lease is free)
	adoptRestart                    // a primary's data kept stopped: recreate its pod as the primary
)

// adoptionAction decides the next step for the chosen instance m. A
// running standby is promoted whatever its label: a standby's data starts
// as a replica even under the primary's (a pod recreated for one that was
// not running when chosen). A pod with the primary's label is starting as
// the primary. Any other (a primary's data directory under a replica's
// label, kept stopped until it can rejoin) is recreated with the primary's
// label (wantedRole).
func adoptionAction(m *member) adoptAction {
	switch {
	case m.pod == nil || m.pod.DeletionTimestamp != nil:
		return adoptWait
	case m.status != nil && m.status.Role == instanceapi.RoleReplica && m.status.Phase == instanceapi.PhaseRunning:
		return adoptPromote
	case m.pod.Labels[LabelRole] == string(instanceapi.RolePrimary):
		return adoptWait
	}
	return adoptRestart
}

// recordAdoptedPrimary makes the instance serving as the primary the
// current primary, moves the role labels and points the replicas at it.
func (r *ClusterReconciler) recordAdoptedPrimary(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, p *member, ic *instanceClient) error {
	if err := r.recordDecision(ctx, c, func(s *tuskv1alpha1.PostgresClusterStatus) error {
		s.CurrentPrimary, s.TargetPrimary = p.name, p.name
		return nil
	}); err != nil {
		return err
	}
	r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonAdoptedVolumes, "Create", "%s is the primary of the volumes found", p.name)
	err := r.reconcileRoleLabels(ctx, c, v)
	reconnectReplicas(ctx, c, v, p, ic)
	return err
}

func memberNames(members []*member) []string {
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = m.name
	}
	return names
}
