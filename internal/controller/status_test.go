package controller

import (
	"context"
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// decidedCluster has a status with what a decision changes: primaries,
// a condition, and a struct held by pointer (changed in place, it is
// restored only from a deep copy).
func decidedCluster() *tuskv1alpha1.PostgresCluster {
	c := defaultCluster()
	c.Generation = 3
	c.Status.CurrentPrimary, c.Status.TargetPrimary = "pg-1", "pg-1"
	c.Status.LastInstanceSerial = 2
	c.Status.Conditions = []metav1.Condition{{
		Type: tuskv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "ClusterReady", ObservedGeneration: 2,
	}}
	c.Status.MajorUpgrade = &tuskv1alpha1.MajorUpgradeStatus{Attempt: "17-1", Phase: tuskv1alpha1.MajorUpgradeUpgrading}
	return c
}

// switchTo is a decision touching every part of decidedCluster's status.
func switchTo(c *tuskv1alpha1.PostgresCluster, name string) statusChange {
	return func(s *tuskv1alpha1.PostgresClusterStatus) error {
		s.TargetPrimary = name
		s.LastInstanceSerial++
		s.MajorUpgrade.Phase = tuskv1alpha1.MajorUpgradeRollingBack
		markSwitched(c)
		return nil
	}
}

// recordStatus writes a decision once, or, when the change refuses or
// the write fails, leaves the status exactly as it was: nothing later in
// the pass (nor its last write) takes for decided what was not recorded.
func TestRecordStatus(t *testing.T) {
	errWrite := errors.New("conflict")
	errRefused := errors.New("refused")
	tests := []struct {
		name      string
		change    func(*tuskv1alpha1.PostgresCluster) statusChange
		writeErr  error
		wantErr   error
		wantWrite bool // the writer was called
		wantKept  bool // the change is in the status afterwards
	}{
		{"the write succeeds: the change is kept", func(c *tuskv1alpha1.PostgresCluster) statusChange { return switchTo(c, "pg-2") }, nil, nil, true, true},
		{"the write fails: the status is as before", func(c *tuskv1alpha1.PostgresCluster) statusChange { return switchTo(c, "pg-2") }, errWrite, errWrite, true, false},
		{"the change refuses: nothing is written, the status is as before", func(c *tuskv1alpha1.PostgresCluster) statusChange {
			return func(s *tuskv1alpha1.PostgresClusterStatus) error {
				if err := switchTo(c, "pg-2")(s); err != nil {
					return err
				}
				return errRefused // half-way through: what it changed goes too
			}
		}, nil, errRefused, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := decidedCluster()
			before := c.Status.DeepCopy()
			var written *tuskv1alpha1.PostgresClusterStatus
			write := func(_ context.Context, c *tuskv1alpha1.PostgresCluster) error {
				written = c.Status.DeepCopy()
				return tt.writeErr
			}
			err := recordStatus(context.Background(), c, tt.change(c), write)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if (written != nil) != tt.wantWrite {
				t.Fatalf("written %t, want %t", written != nil, tt.wantWrite)
			}
			if written != nil && written.TargetPrimary != "pg-2" {
				t.Errorf("the write did not carry the change: targetPrimary %q", written.TargetPrimary)
			}
			if !tt.wantKept {
				if !equality.Semantic.DeepEqual(&c.Status, before) {
					t.Errorf("status not restored:\n got %+v\nwant %+v", c.Status, *before)
				}
				return
			}
			if !equality.Semantic.DeepEqual(&c.Status, written) {
				t.Errorf("status is not what was written:\n got %+v\nwant %+v", c.Status, *written)
			}
			ready := meta.FindStatusCondition(c.Status.Conditions, tuskv1alpha1.ConditionReady)
			if c.Status.TargetPrimary != "pg-2" || c.Status.LastInstanceSerial != 3 || c.Status.MajorUpgrade.Phase != tuskv1alpha1.MajorUpgradeRollingBack ||
				ready.Reason != tuskv1alpha1.ReasonSwitchingOver || ready.ObservedGeneration != 3 {
				t.Errorf("the change was not kept: %+v", c.Status)
			}
		})
	}
}
