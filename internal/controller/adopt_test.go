package controller

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"tusk.dev/tusk/internal/instanceapi"
)

// TestAdoptionCandidate: among volumes kept from a deleted cluster, the
// primary is the most advanced data: the later timeline, then a primary's
// data before a standby's on one timeline, then the most WAL, then the
// older instance; never before every instance with data has reported it.
func TestAdoptionCandidate(t *testing.T) {
	primary := func(tl uint32, checkpoint string) *instanceapi.DataDirState {
		return &instanceapi.DataDirState{State: "shut down", Timeline: tl, CheckpointLSN: checkpoint, MinRecoveryLSN: "0/0"}
	}
	standby := func(tl uint32, checkpoint, minRecovery string) *instanceapi.DataDirState {
		return &instanceapi.DataDirState{State: "shut down in recovery", Standby: true, Timeline: tl, CheckpointLSN: checkpoint, MinRecoveryLSN: minRecovery}
	}
	empty := &instanceapi.DataDirState{Empty: true}
	for _, tc := range []struct {
		name string
		data []*instanceapi.DataDirState // by serial; nil: not reported yet
		// received is what a running standby received (by serial, "" for none).
		received []string
		want     string
		waiting  []string
	}{
		{name: "the last primary was not the first instance",
			data: []*instanceapi.DataDirState{standby(1, "0/3000060", "0/3000100"), standby(1, "0/5000060", "0/5000100"), primary(1, "0/5000100")},
			want: "pg-3"},
		{name: "a later timeline wins over more WAL on an earlier one",
			data: []*instanceapi.DataDirState{primary(1, "0/9000000"), primary(2, "0/5000000"), standby(2, "0/4000000", "0/4800000")},
			want: "pg-2"},
		{name: "a standby on a later timeline wins over a stale primary",
			data: []*instanceapi.DataDirState{primary(1, "0/9000000"), standby(2, "0/5000000", "0/5000100")},
			want: "pg-2"},
		{name: "among standbys the most WAL, what a running one received counting",
			data:     []*instanceapi.DataDirState{standby(2, "0/5000000", "0/5000100"), standby(2, "0/5000000", "0/5000100")},
			received: []string{"", "0/6000000"},
			want:     "pg-2"},
		{name: "a tie goes to the older instance",
			data: []*instanceapi.DataDirState{standby(1, "0/5000000", "0/5000100"), standby(1, "0/5000000", "0/5000100")},
			want: "pg-1"},
		{name: "a volume without data is left out",
			data: []*instanceapi.DataDirState{empty, standby(1, "0/5000000", "0/5000100"), primary(1, "0/4000000")},
			want: "pg-3"},
		{name: "no volume has data: the first instance",
			data: []*instanceapi.DataDirState{empty, empty},
			want: "pg-1"},
		{name: "an instance that has not reported waits the choice",
			data:    []*instanceapi.DataDirState{primary(3, "0/5000000"), nil, standby(1, "0/1000000", "0/1000000")},
			waiting: []string{"pg-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clusterWithPrimary(int32(len(tc.data)), 0)
			c.Status.CurrentPrimary, c.Status.TargetPrimary = "", ""
			var insts []inst
			for i := range tc.data {
				insts = append(insts, inst{serial: int32(i + 1)})
			}
			v := testView(c, insts...)
			for i, m := range v.members {
				if tc.data[i] == nil {
					m.status = nil
					continue
				}
				m.status.DataDir = tc.data[i]
				m.status.ReceivedLSN, m.status.ReplayedLSN = "", ""
				if i < len(tc.received) {
					m.status.ReceivedLSN = tc.received[i]
				}
			}
			best, waiting := adoptionCandidate(v)
			switch {
			case tc.waiting != nil:
				if best != nil || !slices.Equal(waiting, tc.waiting) {
					t.Errorf("got %s waiting for %v, want no choice, waiting for %v", nameOf(best), waiting, tc.waiting)
				}
			case best == nil || best.name != tc.want:
				t.Errorf("got %s (waiting for %v), want %s", nameOf(best), waiting, tc.want)
			}
		})
	}
}

// TestAdoptionAction: the chosen instance is promoted when it runs as a
// standby (whatever its label), waited for when its pod is going or starts
// as the primary, and restarted as the primary otherwise.
func TestAdoptionAction(t *testing.T) {
	c := clusterWithPrimary(2, 0)
	c.Status.CurrentPrimary, c.Status.TargetPrimary = "", ""
	for _, tc := range []struct {
		name  string
		label instanceapi.Role
		phase instanceapi.Phase
		role  instanceapi.Role
		noPod bool
		gone  bool
		want  adoptAction
	}{
		{name: "a running standby", label: instanceapi.RoleReplica, phase: instanceapi.PhaseRunning, role: instanceapi.RoleReplica, want: adoptPromote},
		{name: "a running standby under the primary's label", label: instanceapi.RolePrimary, phase: instanceapi.PhaseRunning, role: instanceapi.RoleReplica, want: adoptPromote},
		{name: "a primary's data kept stopped", label: instanceapi.RoleReplica, phase: instanceapi.PhaseRejoining, role: instanceapi.RoleReplica, want: adoptRestart},
		{name: "starting as the primary", label: instanceapi.RolePrimary, phase: instanceapi.PhaseBootstrapping, role: instanceapi.RoleUnknown, want: adoptWait},
		{name: "no pod", noPod: true, want: adoptWait},
		{name: "its pod going", label: instanceapi.RoleReplica, phase: instanceapi.PhaseRejoining, gone: true, want: adoptWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := testView(c, inst{serial: 1, noPod: tc.noPod}).members[0]
			if m.pod != nil {
				m.pod.Labels[LabelRole] = string(tc.label)
				m.status.Phase, m.status.Role = tc.phase, tc.role
				if tc.gone {
					m.pod.DeletionTimestamp = &metav1.Time{Time: time.Now()}
				}
			}
			if got := adoptionAction(m); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}
