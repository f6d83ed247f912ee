package instance

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// endpoint is a pod's endpoint with its conditions; nil leaves one unset.
func endpoint(pod string, ready, serving *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{"10.0.0.1"},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: pod},
		Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: ptr.To(ready != nil && !*ready)},
	}
}

func slice(service string, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
	return discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: service + "-abcde", Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		Endpoints:  eps,
	}
}

func TestRoutesNewConnections(t *testing.T) {
	yes, no := ptr.To(true), ptr.To(false)
	tests := []struct {
		name   string
		slices []discoveryv1.EndpointSlice
		want   bool
	}{
		{"not listed anywhere", []discoveryv1.EndpointSlice{slice("pg-rw", endpoint("pg-2", yes, yes))}, false},
		{"no slices at all", nil, false},
		{"a ready endpoint", []discoveryv1.EndpointSlice{slice("pg-rw", endpoint("pg-1", yes, yes))}, true},
		{"conditions unset count as ready", []discoveryv1.EndpointSlice{slice("pg-rw", endpoint("pg-1", nil, nil))}, true},
		{"terminating but serving, the only one: kube-proxy falls back to it",
			[]discoveryv1.EndpointSlice{slice("pg-rw", endpoint("pg-1", no, yes))}, true},
		{"terminating but serving, another one ready",
			[]discoveryv1.EndpointSlice{slice("pg-ro", endpoint("pg-1", no, yes), endpoint("pg-3", yes, yes))}, false},
		{"another one ready in another slice of the same Service",
			[]discoveryv1.EndpointSlice{slice("pg-ro", endpoint("pg-1", no, yes)), slice("pg-ro", endpoint("pg-3", yes, yes))}, false},
		{"another Service's ready endpoint does not count",
			[]discoveryv1.EndpointSlice{slice("pg-rw", endpoint("pg-1", no, yes)), slice("pg-ro", endpoint("pg-3", yes, yes))}, true},
		{"terminating and not serving", []discoveryv1.EndpointSlice{slice("pg-rw", endpoint("pg-1", no, no))}, false},
		{"one Service done, another still routing",
			[]discoveryv1.EndpointSlice{slice("pg-rw", endpoint("pg-1", no, no)), slice("pg-r", endpoint("pg-1", yes, yes))}, true},
		{"a same-named endpoint that is not a pod",
			[]discoveryv1.EndpointSlice{slice("pg-rw", discoveryv1.Endpoint{TargetRef: &corev1.ObjectReference{Kind: "Node", Name: "pg-1"}})}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := routesNewConnections(tt.slices, "pg-1"); got != tt.want {
				t.Errorf("routesNewConnections = %t, want %t", got, tt.want)
			}
		})
	}
}

func TestListedReady(t *testing.T) {
	yes, no := ptr.To(true), ptr.To(false)
	if listedReady([]discoveryv1.EndpointSlice{slice("pg-ro", endpoint("pg-1", no, yes), endpoint("pg-3", yes, yes))}, "pg-1") {
		t.Error("a terminating endpoint counts as ready")
	}
	if !listedReady([]discoveryv1.EndpointSlice{slice("pg-r", endpoint("pg-1", yes, yes))}, "pg-1") {
		t.Error("a ready endpoint does not count as ready")
	}
}

func TestTerminatingPods(t *testing.T) {
	yes, no := ptr.To(true), ptr.To(false)
	slices := []discoveryv1.EndpointSlice{
		slice("pg-r", endpoint("pg-1", no, yes), endpoint("pg-2", yes, yes)),
		slice("pg-ro", endpoint("pg-3", no, no)),
	}
	got := terminatingPods(slices)
	if !got["pg-1"] || got["pg-2"] || !got["pg-3"] || len(got) != 2 {
		t.Errorf("terminatingPods = %v, want pg-1 and pg-3", got)
	}
}
