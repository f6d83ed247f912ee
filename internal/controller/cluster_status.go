package controller

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/postgres"
)

// progress is what the phases of one reconcile did or are waiting for.
type progress struct {
	creating    bool    // the first primary is not serving yet
	adopting    string  // what an adoption of kept volumes waits for ("" when none)
	scaling     bool    // instances are being added or removed
	switching   bool    // a switchover is under way
	switched    bool    // a switchover completed in this pass
	rollout     rollout // outdated instances
	syncDegrade bool    // fewer standbys stream than the quorum wants
	failover    failover
	upgrading   bool // a major upgrade owns the instances
}

// setStatus records what was observed: every instance's report, the
// number of ready instances, the conditions and the phase. The conditions
// of a PostgresCluster are set in this file (and, for scheduled backups
// and retention, in cluster_backup_status.go) only.
func setStatus(c *tuskv1alpha1.PostgresCluster, v *view, p progress) {
	st := &c.Status
	st.ObservedGeneration = c.Generation
	st.Selector = metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: clusterLabels(c)})
	st.Instances = instanceStatuses(c, v)
	st.ReadyInstances = int32(v.readyCount()) //nolint:gosec // at most spec.instances (16) plus a few being removed
	st.Archive = archiveStatus(c, v)
	st.SystemIdentifier = systemIdentifier(c, v)
	recordPostgresMajor(c, v)
	recordImage(c)
	if cond, ok := majorUpgradeCondition(c); ok {
		setCondition(c, cond)
	}
	progressing := progressingCondition(c, v, p)
	degraded := degradedCondition(c, v, p)
	setCondition(c, progressing)
	setCondition(c, degraded)
	setCondition(c, readyCondition(c, progressing, degraded))
	st.Phase = phase(p, progressing, degraded)
}

// systemIdentifier is the database system identifier the primary
// reports; the last one known while it does not answer.
func systemIdentifier(c *tuskv1alpha1.PostgresCluster, v *view) string {
	primary := v.member(c.Status.CurrentPrimary)
	if primary == nil || primary.status == nil || primary.status.Role != instanceapi.RolePrimary || primary.status.SystemIdentifier == "" {
		return c.Status.SystemIdentifier
	}
	return primary.status.SystemIdentifier
}

func instanceStatuses(c *tuskv1alpha1.PostgresCluster, v *view) []tuskv1alpha1.InstanceStatus {
	primary := v.member(c.Status.CurrentPrimary)
	out := make([]tuskv1alpha1.InstanceStatus, 0, len(v.members))
	for _, m := range v.members {
		is := tuskv1alpha1.InstanceStatus{Name: m.name, Role: tuskv1alpha1.RoleUnknown, Ready: m.ready(), Phase: "Pending"}
		switch {
		case m.status != nil:
			fillFromReport(&is, m.status, primary)
		case m.err != nil:
			is.Phase, is.Message = "Unreachable", m.err.Error()
			keepLastReport(&is, c.Status.Instances)
		default:
			keepLastReport(&is, c.Status.Instances)
		}
		if m.pod != nil && waitingReason(m.pod) != "" {
			is.Message = waitingReason(m.pod)
		}
		out = append(out, is)
	}
	return out
}

// keepLastReport carries an instance's last reported role, timeline and
// LSN over while it does not answer: failover compares candidates with
// them (aheadOf).
func keepLastReport(is *tuskv1alpha1.InstanceStatus, previous []tuskv1alpha1.InstanceStatus) {
	for _, last := range previous {
		if last.Name == is.Name {
			is.Role, is.Timeline, is.LSN = last.Role, last.Timeline, last.LSN
			return
		}
	}
}

func fillFromReport(is *tuskv1alpha1.InstanceStatus, st *instanceapi.Status, primary *member) {
	is.Phase, is.Message = string(st.Phase), st.LastError
	is.Timeline = int32(st.Timeline) //nolint:gosec // timelines stay far below 2^31
	switch st.Role {
	case instanceapi.RolePrimary:
		is.Role, is.LSN = tuskv1alpha1.RolePrimary, st.CurrentLSN
	case instanceapi.RoleReplica:
		is.Role, is.LSN = tuskv1alpha1.RoleReplica, st.ReplayedLSN
		is.LagBytes = lagBehind(st, primary)
	}
}

// lagBehind is how many bytes a replica's replay is behind the primary.
func lagBehind(st *instanceapi.Status, primary *member) *int64 {
	if primary == nil || primary.status == nil {
		return nil
	}
	head, err1 := postgres.ParseLSN(primary.status.CurrentLSN)
	replayed, err2 := postgres.ParseLSN(st.ReplayedLSN)
	if err1 != nil || err2 != nil {
		return nil
	}
	lag := max(head.Minus(replayed), 0)
	return &lag
}

func progressingCondition(c *tuskv1alpha1.PostgresCluster, v *view, p progress) metav1.Condition {
	cond := metav1.Condition{Type: tuskv1alpha1.ConditionProgressing, Status: metav1.ConditionTrue}
	if recovering, ok := recoveringCondition(c, v); ok && p.creating {
		return recovering
	}
	switch {
	case p.upgrading:
		u := c.Status.MajorUpgrade
		cond.Reason = tuskv1alpha1.ReasonMajorUpgradeRunning
		cond.Message = fmt.Sprintf("Upgrading PostgreSQL %d to %d (%s): %s", u.FromMajor, u.ToMajor, u.Phase, u.Message)
	case p.creating && p.adopting != "":
		cond.Reason, cond.Message = tuskv1alpha1.ReasonAdoptingVolumes, p.adopting
	case p.creating:
		cond.Reason, cond.Message = tuskv1alpha1.ReasonCreating, "Creating the primary "+c.Status.CurrentPrimary
	case p.failover.done:
		cond.Reason = tuskv1alpha1.ReasonFailingOver
		cond.Message = fmt.Sprintf("Failed over to %s; waiting for the instances to report their new roles", c.Status.CurrentPrimary)
	case p.failover.underway:
		cond.Reason = tuskv1alpha1.ReasonFailingOver
		cond.Message = fmt.Sprintf("The primary %s failed (%s); promoting %s", c.Status.CurrentPrimary, p.failover.failed, p.failover.candidate)
		if p.failover.wait > 0 {
			cond.Message += fmt.Sprintf(" once its Lease expires (in %s)", p.failover.wait.Round(100*time.Millisecond))
		}
	case p.switching:
		cond.Reason, cond.Message = tuskv1alpha1.ReasonSwitchingOver, fmt.Sprintf("Switching the primary from %s to %s", c.Status.CurrentPrimary, c.Status.TargetPrimary)
	case p.switched:
		cond.Reason = tuskv1alpha1.ReasonSwitchingOver
		cond.Message = fmt.Sprintf("Switched the primary to %s; waiting for the instances to report their new roles", c.Status.CurrentPrimary)
	case p.rollout.halted:
		cond.Reason, cond.Message = tuskv1alpha1.ReasonRolloutHalted, "Rollout halted, "+p.rollout.waiting
	case p.rollout.pending:
		cond.Reason, cond.Message = tuskv1alpha1.ReasonRollingOut, "Rolling out the new spec"
		if p.rollout.waiting != "" {
			cond.Message += ", " + p.rollout.waiting
		}
	case p.scaling || len(v.members) != int(c.Spec.Instances) || v.readyCount() < len(v.members):
		cond.Reason = tuskv1alpha1.ReasonScaling
		cond.Message = fmt.Sprintf("%d of %d instances ready", v.readyCount(), c.Spec.Instances)
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, tuskv1alpha1.ReasonUpToDate, "Every instance runs the current spec"
	}
	return cond
}

func degradedCondition(c *tuskv1alpha1.PostgresCluster, v *view, p progress) metav1.Condition {
	cond := metav1.Condition{Type: tuskv1alpha1.ConditionDegraded, Status: metav1.ConditionTrue}
	primary := v.member(c.Status.CurrentPrimary)
	var notReady []string
	for _, m := range v.members {
		if !m.ready() {
			notReady = append(notReady, m.name+notReadyReason(m))
		}
	}
	switch {
	case p.failover.blocked != "":
		cond.Reason = tuskv1alpha1.ReasonFailoverBlocked
		cond.Message = fmt.Sprintf("The primary %s failed (%s) and no replica may take over: %s", c.Status.CurrentPrimary, p.failover.failed, p.failover.blocked)
	case primary == nil || !primary.ready():
		cond.Reason, cond.Message = tuskv1alpha1.ReasonPrimaryNotReady, "The primary is not ready"
		if primary != nil {
			cond.Message += notReadyReason(primary)
		}
	case len(notReady) > 0:
		cond.Reason, cond.Message = tuskv1alpha1.ReasonInstancesNotReady, fmt.Sprintf("Not ready: %v", notReady)
	case p.syncDegrade:
		cond.Reason = tuskv1alpha1.ReasonSynchronousDegraded
		cond.Message = fmt.Sprintf("Fewer than %d standbys are streaming: commits are acknowledged with fewer confirmations", c.Spec.PostgreSQL.Synchronous.Number)
		if c.Spec.PostgreSQL.Synchronous.WhenTooFewStandbys == tuskv1alpha1.StandbyShortageBlock {
			cond.Message = fmt.Sprintf("Fewer than %d standbys are streaming: commits wait for them (whenTooFewStandbys: block)", c.Spec.PostgreSQL.Synchronous.Number)
		}
	case c.Spec.Backup != nil && c.Status.Archive != nil && c.Status.Archive.Failing:
		cond.Reason = tuskv1alpha1.ReasonArchiveFailing
		cond.Message = fmt.Sprintf("Archiving WAL to the object store fails (last failed: %s); PostgreSQL keeps the WAL and retries: see the primary's log for why",
			c.Status.Archive.LastFailedWAL)
		if why := c.Status.Archive.Reason; why != "" {
			cond.Message = fmt.Sprintf("Archiving WAL to the object store fails (last failed: %s): %s. PostgreSQL keeps the WAL and retries",
				c.Status.Archive.LastFailedWAL, why)
		}
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, tuskv1alpha1.ReasonAllInstancesReady, "Every instance is ready"
	}
	return cond
}

// readyCondition is true when the cluster is fully up and nothing changes.
func readyCondition(c *tuskv1alpha1.PostgresCluster, progressing, degraded metav1.Condition) metav1.Condition {
	cond := metav1.Condition{Type: tuskv1alpha1.ConditionReady, Status: metav1.ConditionFalse}
	switch {
	case degraded.Status == metav1.ConditionTrue && !stillServing(c, degraded):
		cond.Reason, cond.Message = degraded.Reason, degraded.Message
	case progressing.Status == metav1.ConditionTrue:
		cond.Reason, cond.Message = progressing.Reason, progressing.Message
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, tuskv1alpha1.ReasonClusterReady
		cond.Message = fmt.Sprintf("%d instances ready; %s is the primary", c.Spec.Instances, c.Status.CurrentPrimary)
	}
	return cond
}

// stillCreating says the cluster's first primary has not served yet, going
// by the phase recorded: a spec error (phase Failed) met before anything
// but creation had been recorded leaves the cluster creating, so fixing
// the spec resumes the creation rather than passing for a scale-up.
func stillCreating(c *tuskv1alpha1.PostgresCluster) bool {
	switch c.Status.Phase {
	case "", tuskv1alpha1.ClusterPhasePending, tuskv1alpha1.ClusterPhaseCreating:
		return true
	case tuskv1alpha1.ClusterPhaseFailed:
		prog := meta.FindStatusCondition(c.Status.Conditions, tuskv1alpha1.ConditionProgressing)
		return prog == nil || slices.Contains([]string{tuskv1alpha1.ReasonCreating, tuskv1alpha1.ReasonAdoptingVolumes, tuskv1alpha1.ReasonRecovering, tuskv1alpha1.ReasonWaitingForBackup, tuskv1alpha1.ReasonWaitingForSource}, prog.Reason)
	}
	return false
}

// stillServing says the cluster serves reads and writes as asked despite
// the degradation: synchronous degrade mode keeps writing (block mode does
// not), and failing archiving holds WAL in pg_wal, not writes.
func stillServing(c *tuskv1alpha1.PostgresCluster, degraded metav1.Condition) bool {
	switch degraded.Reason {
	case tuskv1alpha1.ReasonSynchronousDegraded:
		return c.Spec.PostgreSQL.Synchronous.WhenTooFewStandbys != tuskv1alpha1.StandbyShortageBlock
	case tuskv1alpha1.ReasonArchiveFailing:
		return true
	}
	return false
}

func phase(p progress, progressing, degraded metav1.Condition) tuskv1alpha1.ClusterPhase {
	switch {
	case p.creating:
		return tuskv1alpha1.ClusterPhaseCreating
	case p.failover.underway:
		return tuskv1alpha1.ClusterPhaseFailingOver
	case p.switching || p.switched:
		return tuskv1alpha1.ClusterPhaseSwitchingOver
	case progressing.Status == metav1.ConditionTrue && progressing.Reason != tuskv1alpha1.ReasonScaling:
		return tuskv1alpha1.ClusterPhaseUpdating
	case progressing.Status == metav1.ConditionTrue:
		return tuskv1alpha1.ClusterPhaseScaling
	case degraded.Status == metav1.ConditionTrue:
		return tuskv1alpha1.ClusterPhaseDegraded
	}
	return tuskv1alpha1.ClusterPhaseHealthy
}

// setSpecError records a spec only the user can fix: Ready false with the
// error's reason, phase Failed.
func setSpecError(c *tuskv1alpha1.PostgresCluster, se *specError) {
	c.Status.ObservedGeneration = c.Generation
	c.Status.Phase = tuskv1alpha1.ClusterPhaseFailed
	setCondition(c, metav1.Condition{Type: tuskv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: se.reason, Message: se.message})
}

// setWaitingForSource records a cluster waiting for what it bootstraps
// from (a backup, a cluster to clone).
func setWaitingForSource(c *tuskv1alpha1.PostgresCluster, reason, message string) {
	c.Status.ObservedGeneration = c.Generation
	c.Status.Phase = tuskv1alpha1.ClusterPhasePending
	setCondition(c, metav1.Condition{Type: tuskv1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: reason, Message: message})
	setCondition(c, metav1.Condition{Type: tuskv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: message})
}

// markSwitched says, in the status written with the new primary, that the
// instances have yet to report their new roles: nobody reading it should
// take the Ready of the reports before the switchover for the new state.
func markSwitched(c *tuskv1alpha1.PostgresCluster) {
	msg := fmt.Sprintf("Switched the primary to %s; waiting for the instances to report their new roles", c.Status.CurrentPrimary)
	setCondition(c, metav1.Condition{Type: tuskv1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: tuskv1alpha1.ReasonSwitchingOver, Message: msg})
	setCondition(c, metav1.Condition{Type: tuskv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: tuskv1alpha1.ReasonSwitchingOver, Message: msg})
	c.Status.Phase = tuskv1alpha1.ClusterPhaseSwitchingOver
}

func setCondition(c *tuskv1alpha1.PostgresCluster, cond metav1.Condition) {
	cond.ObservedGeneration = c.Generation
	meta.SetStatusCondition(&c.Status.Conditions, cond)
}

// recordPostgresMajor keeps the major version the primary reports, except
// while an upgrade changes it (the upgrade records the new one itself).
func recordPostgresMajor(c *tuskv1alpha1.PostgresCluster, v *view) {
	if upgradeUnderway(c) {
		return
	}
	if primary := v.member(c.Status.CurrentPrimary); primary != nil && primary.ready() {
		if major := reportedMajor(primary.status); major > 0 {
			c.Status.PostgresMajor = major
		}
	}
}

// majorUpgradeCondition is the MajorUpgrade condition of the current or
// last upgrade; ok is false when the cluster never had one.
func majorUpgradeCondition(c *tuskv1alpha1.PostgresCluster) (metav1.Condition, bool) {
	u := c.Status.MajorUpgrade
	if u == nil {
		return metav1.Condition{}, false
	}
	cond := metav1.Condition{Type: tuskv1alpha1.ConditionMajorUpgrade, Status: metav1.ConditionFalse, Message: u.Message}
	switch u.Phase {
	case tuskv1alpha1.MajorUpgradeSucceeded:
		cond.Reason = tuskv1alpha1.ReasonMajorUpgradeSucceeded
	case tuskv1alpha1.MajorUpgradeFailed:
		cond.Reason = tuskv1alpha1.ReasonMajorUpgradeFailed
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, tuskv1alpha1.ReasonMajorUpgradeRunning
		cond.Message = fmt.Sprintf("%s, PostgreSQL %d to %d: %s", u.Phase, u.FromMajor, u.ToMajor, u.Message)
	}
	return cond, true
}
