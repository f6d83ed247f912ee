package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// upgradePhases are a new attempt's phase and every phase of the API's
// enum.
var upgradePhases = []tuskv1alpha1.MajorUpgradePhase{
	upgradeNew,
	tuskv1alpha1.MajorUpgradeBackingUp,
	tuskv1alpha1.MajorUpgradeStoppingReplicas,
	tuskv1alpha1.MajorUpgradeUpgrading,
	tuskv1alpha1.MajorUpgradeRollingBack,
	tuskv1alpha1.MajorUpgradeCloningReplicas,
	tuskv1alpha1.MajorUpgradeSucceeded,
	tuskv1alpha1.MajorUpgradeFailed,
}

// TestUpgradeMoves: every pair of phases, one row each; the moves
// docs/upgrades.md describes are allowed and every other is refused (a
// final phase goes nowhere; nothing goes back to a new attempt, to backing
// up or to stopping replicas once past them).
func TestUpgradeMoves(t *testing.T) {
	allowed := map[string]bool{
		"(new) → BackingUp":            true, // started, with spec.backup
		"(new) → StoppingReplicas":     true, // started, without
		"(new) → Failed":               true, // refused by the pre-checks
		"BackingUp → StoppingReplicas": true,
		"BackingUp → Failed":           true, // the backup failed
		"StoppingReplicas → Upgrading": true,
		"Upgrading → CloningReplicas":  true,
		"Upgrading → RollingBack":      true,
		"RollingBack → Upgrading":      true, // committed before the rollback
		"RollingBack → Failed":         true,
		"CloningReplicas → Succeeded":  true,
	}
	seen := 0
	for _, from := range upgradePhases {
		for _, to := range upgradePhases {
			move := fmt.Sprintf("%s → %s", phaseName(from), phaseName(to))
			want := allowed[move]
			if want {
				seen++
			}
			if got := upgradeMoveAllowed(from, to); got != want {
				t.Errorf("%s: allowed %t, want %t", move, got, want)
			}
		}
	}
	if seen != len(allowed) || len(upgradeMoves) != len(allowed) {
		t.Errorf("%d moves expected, %d of them between known phases, %d in upgradeMoves", len(allowed), seen, len(upgradeMoves))
	}
}

func phaseName(p tuskv1alpha1.MajorUpgradePhase) string {
	if p == upgradeNew {
		return "(new)"
	}
	return string(p)
}

// moveUpgrade makes an allowed move with what goes with it in the same
// write, and refuses any other without changing anything.
func TestMoveUpgrade(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 28, 16, 0, 0, 0, time.UTC))
	cluster := func(phase tuskv1alpha1.MajorUpgradePhase) *tuskv1alpha1.PostgresCluster {
		c := defaultCluster()
		c.Generation = 4
		c.Status.ArchiveSubdirectory = "pg17-1"
		c.Status.MajorUpgrade = &tuskv1alpha1.MajorUpgradeStatus{
			Attempt: "17-1", FromMajor: 15, ToMajor: 17, Phase: phase, Message: "before",
		}
		return c
	}
	for _, from := range upgradePhases {
		for _, to := range upgradePhases[1:] {
			c := cluster(from)
			before := c.Status.DeepCopy()
			err := moveUpgrade(c, to, "after", now)
			name := phaseName(from) + " → " + phaseName(to)
			if !upgradeMoveAllowed(from, to) {
				if err == nil || !strings.Contains(err.Error(), "refused to move the major upgrade 17-1") {
					t.Errorf("%s: error %v, want a refusal", name, err)
				}
				if !equality.Semantic.DeepEqual(&c.Status, before) {
					t.Errorf("%s: a refused move changed the status: %+v", name, c.Status)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			checkMoved(t, name, c, to, now)
		}
	}
}

// checkMoved checks c's upgrade was moved to phase, saying "after".
func checkMoved(t *testing.T, name string, c *tuskv1alpha1.PostgresCluster, phase tuskv1alpha1.MajorUpgradePhase, now metav1.Time) {
	t.Helper()
	u := c.Status.MajorUpgrade
	if u.Phase != phase || u.Message != "after" {
		t.Errorf("%s: phase %s, message %q", name, u.Phase, u.Message)
	}
	final := phase == tuskv1alpha1.MajorUpgradeSucceeded || phase == tuskv1alpha1.MajorUpgradeFailed
	if final != (u.FinishedAt != nil && u.FinishedAt.Equal(&now)) {
		t.Errorf("%s: finishedAt %v", name, u.FinishedAt)
	}
	wantArchive := "pg17-1"
	if phase == tuskv1alpha1.MajorUpgradeRollingBack {
		wantArchive = "" // the old system's location
	}
	if c.Status.ArchiveSubdirectory != wantArchive {
		t.Errorf("%s: archiveSubdirectory %q, want %q", name, c.Status.ArchiveSubdirectory, wantArchive)
	}
	cond := meta.FindStatusCondition(c.Status.Conditions, tuskv1alpha1.ConditionMajorUpgrade)
	if cond == nil || cond.ObservedGeneration != 4 || !strings.Contains(cond.Message, "after") {
		t.Errorf("%s: condition %+v, want one saying the new phase, of generation 4", name, cond)
	}
}
