package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// A major upgrade (docs/upgrades.md) is a state machine kept in
// status.majorUpgrade.phase. upgradeMoves lists every move between its
// phases, and moveUpgrade, its one transition function, refuses any other:
// a phase set out of order acts on data not ready for it (CloningReplicas
// after a rollback would delete the replicas' volumes of the major the
// primary still runs).

// upgradeNew is the phase of an attempt being started: it has none yet.
const upgradeNew tuskv1alpha1.MajorUpgradePhase = ""

// upgradeMoves are the moves of a major upgrade from phase to phase, with
// what makes each. Succeeded and Failed are final: a later upgrade is a
// new attempt.
var upgradeMoves = []struct {
	from, to tuskv1alpha1.MajorUpgradePhase
	when     string
}{
	{upgradeNew, tuskv1alpha1.MajorUpgradeBackingUp, "started, with spec.backup"},
	{upgradeNew, tuskv1alpha1.MajorUpgradeStoppingReplicas, "started, without spec.backup"},
	{upgradeNew, tuskv1alpha1.MajorUpgradeFailed, "refused by the serving primary's pre-checks, before anything stopped"},
	{tuskv1alpha1.MajorUpgradeBackingUp, tuskv1alpha1.MajorUpgradeStoppingReplicas, "the backup completed"},
	{tuskv1alpha1.MajorUpgradeBackingUp, tuskv1alpha1.MajorUpgradeFailed, "the backup failed; nothing changed"},
	{tuskv1alpha1.MajorUpgradeStoppingReplicas, tuskv1alpha1.MajorUpgradeUpgrading, "every replica's pod is gone"},
	{tuskv1alpha1.MajorUpgradeUpgrading, tuskv1alpha1.MajorUpgradeCloningReplicas, "the primary serves the new major"},
	{tuskv1alpha1.MajorUpgradeUpgrading, tuskv1alpha1.MajorUpgradeRollingBack, "the upgrade failed, its pod does not start, or the primary's volume is gone"},
	{tuskv1alpha1.MajorUpgradeRollingBack, tuskv1alpha1.MajorUpgradeUpgrading, "the attempt committed before the rollback began: the way is forward"},
	{tuskv1alpha1.MajorUpgradeRollingBack, tuskv1alpha1.MajorUpgradeFailed, "the primary serves the old major again"},
	{tuskv1alpha1.MajorUpgradeCloningReplicas, tuskv1alpha1.MajorUpgradeSucceeded, "every replica's old volume is gone"},
}

// upgradeMoveAllowed says upgradeMoves lists the move from → to.
func upgradeMoveAllowed(from, to tuskv1alpha1.MajorUpgradePhase) bool {
	for _, m := range upgradeMoves {
		if m.from == from && m.to == to {
			return true
		}
	}
	return false
}

// moveUpgrade moves c's upgrade to phase, saying message, with what goes
// in the same write: the old system's archive location back on a
// rollback, the end of a finished upgrade, and the MajorUpgrade condition
// (written apart, a reader saw Succeeded beside a condition still saying
// CloningReplicas). A move upgradeMoves does not list is refused, and
// changes nothing.
func moveUpgrade(c *tuskv1alpha1.PostgresCluster, phase tuskv1alpha1.MajorUpgradePhase, message string, now metav1.Time) error {
	u := c.Status.MajorUpgrade
	if !upgradeMoveAllowed(u.Phase, phase) {
		from := u.Phase
		if from == upgradeNew {
			from = "(a new attempt)"
		}
		return fmt.Errorf("refused to move the major upgrade %s from %s to %s: not a move of an upgrade", u.Attempt, from, phase)
	}
	u.Phase, u.Message = phase, message
	switch phase {
	case tuskv1alpha1.MajorUpgradeRollingBack:
		c.Status.ArchiveSubdirectory = u.PreviousArchiveSubdirectory
	case tuskv1alpha1.MajorUpgradeSucceeded, tuskv1alpha1.MajorUpgradeFailed:
		u.FinishedAt = &now
	}
	if cond, ok := majorUpgradeCondition(c); ok {
		setCondition(c, cond)
	}
	return nil
}

// upgradeEvent is the type and reason of the Event of a move to phase.
func upgradeEvent(phase tuskv1alpha1.MajorUpgradePhase) (eventType, reason string) {
	switch phase {
	case tuskv1alpha1.MajorUpgradeSucceeded:
		return corev1.EventTypeNormal, tuskv1alpha1.ReasonMajorUpgradeSucceeded
	case tuskv1alpha1.MajorUpgradeFailed:
		return corev1.EventTypeNormal, tuskv1alpha1.ReasonMajorUpgradeFailed
	case tuskv1alpha1.MajorUpgradeRollingBack:
		return corev1.EventTypeWarning, tuskv1alpha1.ReasonMajorUpgradeRunning
	}
	return corev1.EventTypeNormal, tuskv1alpha1.ReasonMajorUpgradeRunning
}
