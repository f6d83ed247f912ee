package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// inst describes one instance of a test view.
type inst struct {
	serial    int32
	ready     bool   // pod Ready and the manager says ready
	noStatus  bool   // the manager did not answer
	noPod     bool   // only the volume exists
	outdated  bool   // the pod was built from another spec
	fenced    bool   // fenced by hand
	streaming bool   // a replica with a live WAL receiver
	received  string // a replica's received LSN
	timeline  uint32 // a replica's timeline
}

// testView builds the view of cluster c: each instance has a volume, a pod
// (Ready as asked, with the cluster's pod hash unless outdated) and a
// status report, as observe would find them.
func testView(c *tuskv1alpha1.PostgresCluster, instances ...inst) *view {
	hash := podSpecHash(c, testManagerImage)
	v := &view{}
	for _, in := range instances {
		name := instanceName(c.Name, in.serial)
		m := &member{name: name, serial: in.serial, pvc: instancePVC(c, name)}
		if !in.noPod {
			m.pod = instancePod(c, name, wantedRole(c, name), testManagerImage)
			m.pod.Status.PodIP = "10.0.0.1"
			ready := corev1.ConditionFalse
			if in.ready {
				ready = corev1.ConditionTrue
			}
			m.pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}
			if in.outdated {
				m.pod.Annotations[AnnotationHash] = "old-" + hash
			}
		}
		if !in.noStatus && !in.noPod {
			st := &instanceapi.Status{Instance: name, Phase: "Running", Role: instanceapi.RoleReplica, Ready: in.ready,
				Streaming: in.streaming, ReceivedLSN: in.received, ReplayedLSN: in.received, Fenced: in.fenced, Timeline: in.timeline}
			if name == c.Status.CurrentPrimary {
				st.Role, st.Streaming, st.ReceivedLSN, st.ReplayedLSN, st.CurrentLSN = instanceapi.RolePrimary, false, "", "", "0/5000000"
			}
			m.status = st
		}
		v.members = append(v.members, m)
	}
	// The primary reports the replicas that stream from it.
	if p := v.member(c.Status.CurrentPrimary); p != nil && p.status != nil {
		for _, in := range instances {
			if in.streaming {
				p.status.Replicas = append(p.status.Replicas, instanceapi.ReplicaConnection{
					Name: instanceName(c.Name, in.serial), State: "streaming",
				})
			}
		}
	}
	return v
}

func clusterWithPrimary(instances int32, primary int32) *tuskv1alpha1.PostgresCluster {
	c := defaultCluster()
	c.Generation = 4
	c.Spec.Instances = instances
	c.Status.CurrentPrimary = instanceName(c.Name, primary)
	c.Status.TargetPrimary = c.Status.CurrentPrimary
	return c
}

func nameOf(m *member) string {
	if m == nil {
		return ""
	}
	return m.name
}

func TestLeastValuableReplica(t *testing.T) {
	tests := []struct {
		name      string
		primary   int32
		target    int32
		instances []inst
		want      string
	}{
		{"the newest replica when all are ready", 1, 1,
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true}, {serial: 3, ready: true}}, "pg-3"},
		{"a replica that is not ready before a newer ready one", 1, 1,
			[]inst{{serial: 1, ready: true}, {serial: 2}, {serial: 3, ready: true}}, "pg-2"},
		{"the newest of the replicas that are not ready", 1, 1,
			[]inst{{serial: 1, ready: true}, {serial: 2}, {serial: 4}, {serial: 5, ready: true}}, "pg-4"},
		{"never the primary, even when it is the newest and not ready", 3, 3,
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true}, {serial: 3}}, "pg-2"},
		{"never the target primary of a switchover", 1, 3,
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true}, {serial: 3}}, "pg-2"},
		{"a replica without a pod counts as not ready", 1, 1,
			[]inst{{serial: 1, ready: true}, {serial: 2, noPod: true}, {serial: 3, ready: true}}, "pg-2"},
		{"a replica fenced by hand last: it is kept for inspection", 1, 1,
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true}, {serial: 3, fenced: true}}, "pg-2"},
		{"a replica fenced by hand when nothing else is left", 1, 1,
			[]inst{{serial: 1, ready: true}, {serial: 2, fenced: true}}, "pg-2"},
		{"none when only the primary is left", 1, 1, []inst{{serial: 1}}, ""},
		{"none when only the primary and the target are left", 1, 2,
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clusterWithPrimary(1, tt.primary)
			c.Status.TargetPrimary = instanceName(c.Name, tt.target)
			if got := nameOf(leastValuableReplica(c, testView(c, tt.instances...))); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDesiredConfig(t *testing.T) {
	three := []inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true}, {serial: 3, ready: true}}
	tests := []struct {
		name      string
		mode      tuskv1alpha1.SynchronousMode
		number    int32
		shortage  tuskv1alpha1.StandbyShortage
		primary   int32
		instances []inst
		want      string
	}{
		{"off lists no standbys", tuskv1alpha1.SynchronousOff, 1, tuskv1alpha1.StandbyShortageBlock, 1, three, ""},
		{"no primary yet lists no standbys", tuskv1alpha1.SynchronousQuorum, 1, tuskv1alpha1.StandbyShortageBlock, 0, three, ""},
		{"block lists every replica with the number", tuskv1alpha1.SynchronousQuorum, 2, tuskv1alpha1.StandbyShortageBlock, 1, three,
			`ANY 2 ("pg-2", "pg-3")`},
		{"block keeps the number with no standby streaming", tuskv1alpha1.SynchronousQuorum, 1, tuskv1alpha1.StandbyShortageBlock, 1,
			[]inst{{serial: 1, ready: true}, {serial: 2}}, `ANY 1 ("pg-2")`},
		{"block lists a replica without a pod", tuskv1alpha1.SynchronousQuorum, 1, tuskv1alpha1.StandbyShortageBlock, 2,
			[]inst{{serial: 1, noPod: true}, {serial: 2, ready: true}}, `ANY 1 ("pg-1")`},
		{"degrade lowers the number to the streaming standbys", tuskv1alpha1.SynchronousQuorum, 2, tuskv1alpha1.StandbyShortageDegrade, 1, three,
			`ANY 1 ("pg-2", "pg-3")`},
		{"degrade keeps the number when enough stream", tuskv1alpha1.SynchronousQuorum, 1, tuskv1alpha1.StandbyShortageDegrade, 1, three,
			`ANY 1 ("pg-2", "pg-3")`},
		{"degrade with no standby streaming is asynchronous", tuskv1alpha1.SynchronousQuorum, 1, tuskv1alpha1.StandbyShortageDegrade, 1,
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true}}, ""},
		{"degrade with a silent primary is asynchronous", tuskv1alpha1.SynchronousQuorum, 1, tuskv1alpha1.StandbyShortageDegrade, 1,
			[]inst{{serial: 1, noStatus: true}, {serial: 2, ready: true, streaming: true}}, ""},
		{"a single instance has no standbys", tuskv1alpha1.SynchronousQuorum, 1, tuskv1alpha1.StandbyShortageBlock, 1,
			[]inst{{serial: 1, ready: true}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clusterWithPrimary(int32(len(tt.instances)), tt.primary)
			if tt.primary == 0 {
				c.Status.CurrentPrimary, c.Status.TargetPrimary = "", ""
			}
			c.Spec.PostgreSQL.Synchronous = tuskv1alpha1.SynchronousSpec{Mode: tt.mode, Number: tt.number, WhenTooFewStandbys: tt.shortage}
			c.Spec.PostgreSQL.Parameters = map[string]tuskv1alpha1.ParameterValue{"work_mem": "8MB"}
			cfg := desiredConfig(c, testView(c, tt.instances...))
			if cfg.SynchronousStandbyNames != tt.want {
				t.Errorf("synchronous_standby_names %q, want %q", cfg.SynchronousStandbyNames, tt.want)
			}
			if cfg.Parameters["work_mem"] != "8MB" {
				t.Errorf("parameters %v: the user's were dropped", cfg.Parameters)
			}
		})
	}
}

func TestSwitchoverCandidate(t *testing.T) {
	tests := []struct {
		name      string
		instances []inst
		want      string
	}{
		{"the replica with the most WAL received",
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true, received: "0/3000000"},
				{serial: 3, ready: true, streaming: true, received: "0/4000000"}}, "pg-3"},
		{"LSNs compare as numbers, not strings",
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true, received: "0/A000000"},
				{serial: 3, ready: true, streaming: true, received: "0/9000000"}}, "pg-2"},
		{"the lower serial on a tie",
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true, received: "0/3000000"},
				{serial: 3, ready: true, streaming: true, received: "0/3000000"}}, "pg-2"},
		{"not a replica that is not ready",
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true, received: "0/3000000"},
				{serial: 3, streaming: true, received: "0/4000000"}}, "pg-2"},
		{"not a replica that does not stream",
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true, received: "0/3000000"},
				{serial: 3, ready: true, received: "0/4000000"}}, "pg-2"},
		{"not an outdated replica",
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true, received: "0/3000000"},
				{serial: 3, ready: true, streaming: true, outdated: true, received: "0/4000000"}}, "pg-2"},
		{"not a replica that did not answer",
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, noStatus: true}}, ""},
		{"never the primary", []inst{{serial: 1, ready: true}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clusterWithPrimary(int32(len(tt.instances)), 1)
			got := switchoverCandidate(c, testView(c, tt.instances...), podSpecHash(c, testManagerImage))
			if nameOf(got) != tt.want {
				t.Errorf("got %q, want %q", nameOf(got), tt.want)
			}
		})
	}
}

func TestUnsafeTarget(t *testing.T) {
	healthy := []inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true, received: "0/3000000"},
		{serial: 3, streaming: true, received: "0/3000000"}, {serial: 4, ready: true, received: "0/3000000"}}
	tests := []struct {
		name       string
		target     string
		stepped    bool // the old primary has stepped down already
		oldSilent  bool // the old primary does not answer
		wantRefuse bool
	}{
		{"no switchover", "pg-1", false, false, false},
		{"a ready, streaming replica", "pg-2", false, false, false},
		{"not an instance", "pg-9", false, false, true},
		{"not an instance, even after the step-down", "pg-9", true, false, true},
		{"a replica that is not ready", "pg-3", false, false, true},
		{"a replica that does not stream", "pg-4", false, false, true},
		{"a replica that is not ready, after the step-down: finish", "pg-3", true, false, false},
		{"the old primary does not answer: wait", "pg-3", false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clusterWithPrimary(4, 1)
			v := testView(c, healthy...)
			c.Status.TargetPrimary = tt.target
			switch old := v.member("pg-1"); {
			case tt.oldSilent:
				old.status = nil
			case tt.stepped:
				old.status.Role = instanceapi.RoleReplica
			}
			if got := unsafeTarget(c, v); (got != "") != tt.wantRefuse {
				t.Errorf("unsafeTarget = %q, want a refusal: %v", got, tt.wantRefuse)
			}
		})
	}
}

func TestHasEverything(t *testing.T) {
	tests := []struct {
		name                 string
		received             string
		oldReceived, oldRepl string
		want                 bool
	}{
		{"received the shutdown checkpoint", "0/3000028", "0/3000028", "0/3000028", true},
		{"received more", "0/3000100", "0/3000028", "0/3000000", true},
		{"one record short", "0/3000000", "0/3000028", "0/3000028", false},
		{"the old primary's replay counts too", "0/3000000", "", "0/3000028", false},
		{"the old primary's receive counts too", "0/3000000", "0/3000028", "", false},
		{"nothing known of the old primary", "0/3000000", "", "", false},
		{"the target received nothing", "", "0/3000028", "0/3000028", false},
		{"garbage from the target", "x", "0/3000028", "0/3000028", false},
		{"high LSNs compare as numbers", "1/0", "0/FFFFFFFF", "0/FFFFFFFF", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := &instanceapi.Status{ReceivedLSN: tt.received}
			old := &instanceapi.Status{ReceivedLSN: tt.oldReceived, ReplayedLSN: tt.oldRepl}
			if got := hasEverything(target, old); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestInstanceSerial(t *testing.T) {
	tests := []struct {
		cluster, name string
		want          int32
	}{
		{"pg", "pg-1", 1},
		{"pg", "pg-12", 12},
		{"pg-a", "pg-a-3", 3},
		{"pg", "pg-0", 0},
		{"pg", "pg--1", 0},
		{"pg", "pg-", 0},
		{"pg", "pg-x", 0},
		{"pg", "pg-a-3", 0},  // another cluster's instance
		{"pg", "other-1", 0}, // not this cluster's
		{"pg", "xpg-1", 0},   // prefix, not substring
		{"pg", "pg-01", 0},   // not a name Tusk makes: pg-1 is
		{"pg", "pg-+1", 0},   // not a name Tusk makes either
		{"pg", "pg-99999999999", 0},
	}
	for _, tt := range tests {
		if got := instanceSerial(tt.cluster, tt.name); got != tt.want {
			t.Errorf("instanceSerial(%q, %q) = %d, want %d", tt.cluster, tt.name, got, tt.want)
		}
		if tt.want > 0 && instanceName(tt.cluster, tt.want) != tt.name {
			t.Errorf("instanceName(%q, %d) = %q, want %q", tt.cluster, tt.want, instanceName(tt.cluster, tt.want), tt.name)
		}
	}
}

func TestWantedRole(t *testing.T) {
	tests := []struct {
		name, current, target, instance string
		want                            instanceapi.Role
	}{
		{"the primary", "pg-1", "pg-1", "pg-1", instanceapi.RolePrimary},
		{"a replica", "pg-1", "pg-1", "pg-2", instanceapi.RoleReplica},
		{"the old primary during a switchover", "pg-1", "pg-2", "pg-1", instanceapi.RoleReplica},
		{"the target during a switchover", "pg-1", "pg-2", "pg-2", instanceapi.RoleReplica},
		{"anyone before there is a primary", "", "", "pg-1", instanceapi.RoleReplica},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaultCluster()
			c.Status.CurrentPrimary, c.Status.TargetPrimary = tt.current, tt.target
			if got := wantedRole(c, tt.instance); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestPodSpecHash(t *testing.T) {
	base := podSpecHash(customCluster(), testManagerImage)
	if again := podSpecHash(customCluster(), testManagerImage); again != base {
		t.Fatalf("the hash is not stable: %s, then %s", base, again)
	}
	tests := []struct {
		name    string
		change  func(c *tuskv1alpha1.PostgresCluster)
		image   string
		changes bool
	}{
		{"image", func(c *tuskv1alpha1.PostgresCluster) { c.Spec.Image = "registry.example/postgres:17.3" }, "", true},
		{"instance manager image", func(*tuskv1alpha1.PostgresCluster) {}, "tusk/operator:next", true},
		{"resources", func(c *tuskv1alpha1.PostgresCluster) {
			c.Spec.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("2Gi")
		}, "", true},
		{"tolerations", func(c *tuskv1alpha1.PostgresCluster) { c.Spec.Tolerations = nil }, "", true},
		{"parameters", func(c *tuskv1alpha1.PostgresCluster) {
			c.Spec.PostgreSQL.Parameters = map[string]tuskv1alpha1.ParameterValue{"shared_buffers": "1GB", "work_mem": "64MB"}
		}, "", false},
		{"synchronous replication", func(c *tuskv1alpha1.PostgresCluster) {
			c.Spec.PostgreSQL.Synchronous.Number = 2
		}, "", false},
		{"instances", func(c *tuskv1alpha1.PostgresCluster) { c.Spec.Instances = 5 }, "", false},
		{"status", func(c *tuskv1alpha1.PostgresCluster) {
			c.Status.CurrentPrimary, c.Status.TargetPrimary = "orders-2", "orders-2"
		}, "", false},
		{"storage size", func(c *tuskv1alpha1.PostgresCluster) { c.Spec.Storage.Size = resource.MustParse("50Gi") }, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := customCluster()
			tt.change(c)
			image := testManagerImage
			if tt.image != "" {
				image = tt.image
			}
			if changed := podSpecHash(c, image) != base; changed != tt.changes {
				t.Errorf("changing %s changes the pod hash: %v, want %v", tt.name, changed, tt.changes)
			}
		})
	}
	// Pods are built with the hash that the rollout compares with.
	c := customCluster()
	for serial := int32(1); serial <= 3; serial++ {
		pod := instancePod(c, instanceName(c.Name, serial), wantedRole(c, instanceName(c.Name, serial)), testManagerImage)
		if pod.Annotations[AnnotationHash] != base {
			t.Errorf("pod %s has hash %s, want %s", pod.Name, pod.Annotations[AnnotationHash], base)
		}
	}
}

func TestSetStatus(t *testing.T) {
	allReady := []inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true}, {serial: 3, ready: true, streaming: true}}
	tests := []struct {
		name      string
		phase     tuskv1alpha1.ClusterPhase
		instances []inst
		progress  progress
		wantReady metav1.ConditionStatus
		wantProg  metav1.ConditionStatus
		wantDeg   metav1.ConditionStatus
		reason    string // Ready's
		degReason string
		wantPhase tuskv1alpha1.ClusterPhase
	}{
		{"healthy", tuskv1alpha1.ClusterPhaseHealthy, allReady, progress{},
			metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionFalse, tuskv1alpha1.ReasonClusterReady, tuskv1alpha1.ReasonAllInstancesReady, tuskv1alpha1.ClusterPhaseHealthy},
		{"creating", "", []inst{{serial: 1}}, progress{creating: true},
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionTrue, tuskv1alpha1.ReasonPrimaryNotReady, tuskv1alpha1.ReasonPrimaryNotReady, tuskv1alpha1.ClusterPhaseCreating},
		{"a replica not ready", tuskv1alpha1.ClusterPhaseHealthy,
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true}, {serial: 3}}, progress{},
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionTrue, tuskv1alpha1.ReasonInstancesNotReady, tuskv1alpha1.ReasonInstancesNotReady, tuskv1alpha1.ClusterPhaseScaling},
		{"the primary not ready", tuskv1alpha1.ClusterPhaseHealthy,
			[]inst{{serial: 1}, {serial: 2, ready: true}, {serial: 3, ready: true}}, progress{},
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionTrue, tuskv1alpha1.ReasonPrimaryNotReady, tuskv1alpha1.ReasonPrimaryNotReady, tuskv1alpha1.ClusterPhaseScaling},
		{"scaling up, all present ready", tuskv1alpha1.ClusterPhaseHealthy,
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true}}, progress{scaling: true},
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, tuskv1alpha1.ReasonScaling, tuskv1alpha1.ReasonAllInstancesReady, tuskv1alpha1.ClusterPhaseScaling},
		{"fewer instances than spec", tuskv1alpha1.ClusterPhaseHealthy,
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true}}, progress{},
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, tuskv1alpha1.ReasonScaling, tuskv1alpha1.ReasonAllInstancesReady, tuskv1alpha1.ClusterPhaseScaling},
		{"rolling out", tuskv1alpha1.ClusterPhaseHealthy, allReady, progress{rollout: rollout{pending: true}},
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, tuskv1alpha1.ReasonRollingOut, tuskv1alpha1.ReasonAllInstancesReady, tuskv1alpha1.ClusterPhaseUpdating},
		{"rollout halted", tuskv1alpha1.ClusterPhaseHealthy, allReady, progress{rollout: rollout{pending: true, halted: true, waiting: "x"}},
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, tuskv1alpha1.ReasonRolloutHalted, tuskv1alpha1.ReasonAllInstancesReady, tuskv1alpha1.ClusterPhaseUpdating},
		{"switching over", tuskv1alpha1.ClusterPhaseHealthy, allReady, progress{switching: true},
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, tuskv1alpha1.ReasonSwitchingOver, tuskv1alpha1.ReasonAllInstancesReady, tuskv1alpha1.ClusterPhaseSwitchingOver},
		{"synchronous replication degraded is still ready", tuskv1alpha1.ClusterPhaseHealthy,
			[]inst{{serial: 1, ready: true}, {serial: 2, ready: true}, {serial: 3, ready: true}}, progress{syncDegrade: true},
			metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionTrue, tuskv1alpha1.ReasonClusterReady, tuskv1alpha1.ReasonSynchronousDegraded, tuskv1alpha1.ClusterPhaseDegraded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clusterWithPrimary(3, 1)
			c.Status.Phase = tt.phase
			v := testView(c, tt.instances...)
			setStatus(c, v, tt.progress)
			check := func(typ string, status metav1.ConditionStatus, reason string) {
				t.Helper()
				cond := meta.FindStatusCondition(c.Status.Conditions, typ)
				switch {
				case cond == nil:
					t.Fatalf("no %s condition", typ)
				case cond.Status != status || (reason != "" && cond.Reason != reason):
					t.Errorf("%s=%s (%s: %s), want %s (%s)", typ, cond.Status, cond.Reason, cond.Message, status, reason)
				case cond.Reason == "" || cond.ObservedGeneration != c.Generation:
					t.Errorf("%s has reason %q and observedGeneration %d", typ, cond.Reason, cond.ObservedGeneration)
				}
			}
			check(tuskv1alpha1.ConditionReady, tt.wantReady, tt.reason)
			check(tuskv1alpha1.ConditionProgressing, tt.wantProg, "")
			check(tuskv1alpha1.ConditionDegraded, tt.wantDeg, tt.degReason)
			if c.Status.Phase != tt.wantPhase {
				t.Errorf("phase %s, want %s", c.Status.Phase, tt.wantPhase)
			}
			if c.Status.ObservedGeneration != c.Generation || c.Status.ReadyInstances != int32(v.readyCount()) ||
				len(c.Status.Instances) != len(tt.instances) || c.Status.Selector != "tusk.dev/cluster=pg" {
				t.Errorf("status %+v does not describe the view", c.Status)
			}
		})
	}
}

func TestSetStatusReportsInstances(t *testing.T) {
	c := clusterWithPrimary(3, 1)
	v := testView(c, inst{serial: 1, ready: true}, inst{serial: 2, ready: true, streaming: true, received: "0/4000000"}, inst{serial: 3, noPod: true})
	setStatus(c, v, progress{})
	got := c.Status.Instances
	if len(got) != 3 {
		t.Fatalf("instances %+v", got)
	}
	if got[0].Role != tuskv1alpha1.RolePrimary || got[0].LSN != "0/5000000" || !got[0].Ready {
		t.Errorf("primary %+v", got[0])
	}
	if got[1].Role != tuskv1alpha1.RoleReplica || got[1].LagBytes == nil || *got[1].LagBytes != 0x1000000 {
		t.Errorf("replica %+v: want a lag of 16 MiB", got[1])
	}
	if got[2].Ready || got[2].Phase != "Pending" || got[2].Role != tuskv1alpha1.RoleUnknown {
		t.Errorf("instance without a pod %+v", got[2])
	}
}

func TestStillCreating(t *testing.T) {
	progressing := func(reason string) []metav1.Condition {
		return []metav1.Condition{{Type: tuskv1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: reason}}
	}
	tests := []struct {
		name  string
		phase tuskv1alpha1.ClusterPhase
		conds []metav1.Condition
		want  bool
	}{
		{"new", "", nil, true},
		{"creating", tuskv1alpha1.ClusterPhaseCreating, progressing(tuskv1alpha1.ReasonCreating), true},
		{"a spec error before anything ran", tuskv1alpha1.ClusterPhaseFailed, nil, true},
		{"a spec error while creating", tuskv1alpha1.ClusterPhaseFailed, progressing(tuskv1alpha1.ReasonCreating), true},
		{"a spec error after creation", tuskv1alpha1.ClusterPhaseFailed, progressing(tuskv1alpha1.ReasonRollingOut), false},
		{"healthy", tuskv1alpha1.ClusterPhaseHealthy, progressing(tuskv1alpha1.ReasonUpToDate), false},
		{"degraded", tuskv1alpha1.ClusterPhaseDegraded, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaultCluster()
			c.Status.Phase, c.Status.Conditions = tt.phase, tt.conds
			if got := stillCreating(c); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLowersHotStandbySetting(t *testing.T) {
	tests := []struct {
		name    string
		pending []instanceapi.PendingValue
		want    bool
	}{
		{"nothing pending", nil, false},
		{"raised", []instanceapi.PendingValue{{Name: "max_connections", Running: "100", Pending: "150"}}, false},
		{"lowered", []instanceapi.PendingValue{{Name: "max_connections", Running: "150", Pending: "100"}}, true},
		{"lowered, among others", []instanceapi.PendingValue{
			{Name: "shared_buffers", Running: "16384", Pending: "8192"},
			{Name: "max_wal_senders", Running: "10", Pending: "5"},
		}, true},
		{"another setting lowered", []instanceapi.PendingValue{{Name: "shared_buffers", Running: "16384", Pending: "8192"}}, false},
		{"unparsable", []instanceapi.PendingValue{{Name: "max_connections", Running: "150", Pending: "lots"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lowersHotStandbySetting(&instanceapi.Status{PendingValues: tt.pending}); got != tt.want {
				t.Fatalf("lowersHotStandbySetting = %v, want %v", got, tt.want)
			}
		})
	}
	if lowersHotStandbySetting(nil) {
		t.Fatal("an instance that did not answer lowers nothing")
	}
}

func TestSwitchoverStep(t *testing.T) {
	primary := instanceapi.Status{Role: instanceapi.RolePrimary, CurrentLSN: "0/5000000"}
	stepped := instanceapi.Status{Role: instanceapi.RoleReplica, ReplayedLSN: "0/5000100"}
	starting := instanceapi.Status{Role: instanceapi.RoleUnknown}
	hasAll := instanceapi.Status{Role: instanceapi.RoleReplica, ReceivedLSN: "0/5000100"}
	lacks := instanceapi.Status{Role: instanceapi.RoleReplica, ReceivedLSN: "0/5000000"}
	promoted := instanceapi.Status{Role: instanceapi.RolePrimary, CurrentLSN: "0/5000200"}
	tests := []struct {
		name        string
		old, target instanceapi.Status
		want        switchoverAction
	}{
		{"the old primary steps down first", primary, hasAll, stepDownFirst},
		{"a target with every record is promoted", stepped, hasAll, promoteTarget},
		{"a target lacking the last records: give up, never promote", stepped, lacks, giveUp},
		{"an old primary restarting: wait, never promote blind", starting, hasAll, waitForRoles},
		{"a target restarting: wait, never give up blind", stepped, starting, waitForRoles},
		{"already promoted in an earlier pass: only record it", stepped, promoted, recordOnly},
		{"already promoted, the old one restarting: only record it", starting, promoted, recordOnly},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := switchoverStep(&tt.old, &tt.target); got != tt.want {
				t.Fatalf("switchoverStep = %d, want %d", got, tt.want)
			}
		})
	}
}

// A switchover that completed in this pass is reported from instance
// reports taken before it: status must not claim Ready from them.
func TestJustSwitchedIsNotReadyYet(t *testing.T) {
	c := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: "pg", Generation: 1}}
	c.Spec.Instances = 1
	c.Status.CurrentPrimary, c.Status.TargetPrimary = "pg-1", "pg-1"
	setStatus(c, &view{}, progress{switched: true})
	ready := meta.FindStatusCondition(c.Status.Conditions, tuskv1alpha1.ConditionReady)
	progressing := meta.FindStatusCondition(c.Status.Conditions, tuskv1alpha1.ConditionProgressing)
	if ready.Status != metav1.ConditionFalse || progressing.Reason != tuskv1alpha1.ReasonSwitchingOver || c.Status.Phase != tuskv1alpha1.ClusterPhaseSwitchingOver {
		t.Fatalf("just switched: Ready %s, Progressing %s, phase %s; want False, %s, SwitchingOver", ready.Status, progressing.Reason, c.Status.Phase, tuskv1alpha1.ReasonSwitchingOver)
	}
}

// A replica is re-cloned only for a crash loop: crashed now, after five
// crashes in a row. Many crashes of separate faults (restarts) are not
// one, and a primary is never re-cloned.
func TestBrokenReplica(t *testing.T) {
	cases := []struct {
		name             string
		phase            instanceapi.Phase
		restarts, streak int
		primary          bool
		outdated         bool
		want             bool
	}{
		{name: "crash loop", phase: instanceapi.PhaseCrashed, restarts: 5, streak: 5, want: true},
		{name: "many separate faults", phase: instanceapi.PhaseCrashed, restarts: 9, streak: 1},
		{name: "short streak", phase: instanceapi.PhaseCrashed, restarts: 4, streak: 4},
		{name: "running again", phase: instanceapi.PhaseRunning, restarts: 7, streak: 7},
		{name: "the primary", phase: instanceapi.PhaseCrashed, restarts: 5, streak: 5, primary: true},
		{name: "built from another spec", phase: instanceapi.PhaseCrashed, restarts: 5, streak: 5, outdated: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := clusterWithPrimary(2, 1)
			v := testView(c, inst{serial: 1, ready: true}, inst{serial: 2, outdated: tc.outdated})
			m := v.member(instanceName(c.Name, 2))
			if tc.primary {
				m = v.member(c.Status.CurrentPrimary)
			}
			m.status.Phase, m.status.Restarts, m.status.CrashStreak = tc.phase, tc.restarts, tc.streak
			if got := brokenReplica(m, v.member(c.Status.CurrentPrimary)); got != tc.want {
				t.Errorf("brokenReplica = %v, want %v", got, tc.want)
			}
		})
	}
}
