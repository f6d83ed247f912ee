package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"tusk.dev/tusk/internal/instanceapi"
)

func TestHandoverTarget(t *testing.T) {
	deleting := func(v *view, c string) { v.member(c).pod.DeletionTimestamp = &metav1.Time{Time: time.Now()} }
	tests := []struct {
		name      string
		instances []inst
		change    func(v *view)
		target    string // a switchover already under way
		want      string
	}{
		{"no handover while the primary's pod stays",
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true, received: "0/3000000"}},
			func(*view) {}, "", ""},
		{"the most advanced streaming replica",
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true, received: "0/3000000"},
				{serial: 3, ready: true, streaming: true, received: "0/4000000"}},
			func(v *view) { deleting(v, "pg-1") }, "", "pg-3"},
		{"an outdated replica too: the pod goes whatever its spec",
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true, outdated: true, received: "0/3000000"}},
			func(v *view) { deleting(v, "pg-1") }, "", "pg-2"},
		{"not a replica that does not stream",
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, received: "0/3000000"}},
			func(v *view) { deleting(v, "pg-1") }, "", ""},
		{"not a replica that is not ready",
			[]inst{{serial: 1, ready: true}, {serial: 2, streaming: true, received: "0/3000000"}},
			func(v *view) { deleting(v, "pg-1") }, "", ""},
		{"not a replica whose pod is going too",
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true, received: "0/3000000"}},
			func(v *view) { deleting(v, "pg-1"); deleting(v, "pg-2") }, "", ""},
		{"not once the primary stopped serving: the failover rules decide",
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true, received: "0/3000000"}},
			func(v *view) {
				deleting(v, "pg-1")
				v.member("pg-1").status.Phase, v.member("pg-1").status.Role = instanceapi.PhaseStopped, instanceapi.RoleUnknown
			}, "", ""},
		{"not while a switchover is under way",
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true, received: "0/3000000"},
				{serial: 3, ready: true, streaming: true, received: "0/4000000"}},
			func(v *view) { deleting(v, "pg-1") }, "pg-2", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clusterWithPrimary(int32(len(tt.instances)), 1)
			if tt.target != "" {
				c.Status.TargetPrimary = tt.target
			}
			v := testView(c, tt.instances...)
			tt.change(v)
			if got := handoverTarget(c, v); nameOf(got) != tt.want {
				t.Errorf("handoverTarget = %q, want %q", nameOf(got), tt.want)
			}
		})
	}
}

func TestRefusedSwitchoverRequest(t *testing.T) {
	c := clusterWithPrimary(4, 1)
	v := testView(c, inst{serial: 1, ready: true}, inst{serial: 2, ready: true, streaming: true, received: "0/3000000"},
		inst{serial: 3, streaming: true, received: "0/3000000"}, inst{serial: 4, ready: true, received: "0/3000000"})
	for want, refusal := range map[string]string{
		"pg-2": "",
		"pg-1": "it is the primary already",
		"pg-9": "it is not an instance of this cluster",
		"pg-3": "it is not a ready replica streaming from the primary",
		"pg-4": "it is not a ready replica streaming from the primary",
	} {
		if got := refusedSwitchoverRequest(c, v, want); got != refusal {
			t.Errorf("a request for %s: %q, want %q", want, got, refusal)
		}
	}
}
