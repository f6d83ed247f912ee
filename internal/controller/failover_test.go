package controller

import (
	"cmp"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

func TestPrimaryFailure(t *testing.T) {
	cases := []struct {
		name   string
		change func(p *member)
		want   string // a word of the reason; "" for healthy
		target string // status.targetPrimary, when a switchover is under way
	}{
		{"healthy", func(*member) {}, "", ""},
		{"pod gone", func(p *member) { p.pod = nil }, "gone", ""},
		{"pod being deleted, postgres stopped", func(p *member) {
			p.pod.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			p.status.Phase, p.status.Role = instanceapi.PhaseStopped, instanceapi.RoleUnknown
		}, "being deleted", ""},
		{"pod being deleted, manager gone", func(p *member) {
			p.pod.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			p.status = nil
		}, "being deleted", ""},
		// Still serving: handed over (reconcileHandover), not failed over.
		{"pod being deleted, still the primary", func(p *member) { p.pod.DeletionTimestamp = &metav1.Time{Time: time.Now()} }, "", ""},
		{"manager does not answer", func(p *member) { p.status, p.err = nil, errTest }, "does not answer", ""},
		{"fenced itself", func(p *member) { p.status.Phase, p.status.Role = instanceapi.PhaseFenced, instanceapi.RoleUnknown }, "fenced itself", ""},
		// A switchover whose target never became the primary (every pod
		// deleted at once) leaves the stepped-down one waiting to rejoin.
		{"stepped down, waiting for a primary to rejoin", func(p *member) {
			p.status.Phase, p.status.Role = instanceapi.PhaseRejoining, instanceapi.RoleUnknown
		}, "waits for a primary to rejoin", "pg-3"},
		// Rejoining outside a switchover is the demote path's business.
		{"rejoining, no switchover under way", func(p *member) {
			p.status.Phase, p.status.Role = instanceapi.PhaseRejoining, instanceapi.RoleUnknown
		}, "", ""},
		// The manager restarts a crashed postgres faster than a failover.
		{"postgres crashed", func(p *member) { p.status.Phase, p.status.Role = instanceapi.PhaseCrashed, instanceapi.RoleUnknown }, "", ""},
		// Fenced by hand: stopped on purpose, not replaced.
		{"fenced by hand", func(p *member) { p.status.Phase, p.status.Fenced = instanceapi.PhaseFenced, true }, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := clusterWithPrimary(3, 1)
			if tc.target != "" {
				c.Status.TargetPrimary = tc.target
			}
			v := testView(c, inst{serial: 1, ready: true}, inst{serial: 2, ready: true, streaming: true}, inst{serial: 3, ready: true, streaming: true})
			tc.change(v.member(c.Status.CurrentPrimary))
			got := primaryFailure(c, v)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("primaryFailure = %q, want one saying %q", got, tc.want)
			}
		})
	}
}

var errTest = testError("connection refused")

type testError string

func (e testError) Error() string { return string(e) }

func TestFailoverCandidate(t *testing.T) {
	quorum := func(n int32, serials ...int32) *tuskv1alpha1.QuorumStatus {
		q := &tuskv1alpha1.QuorumStatus{Number: n}
		for _, s := range serials {
			q.Standbys = append(q.Standbys, instanceName("pg", s))
		}
		return q
	}
	lastSeen := func(serial int32, lsn string) tuskv1alpha1.InstanceStatus {
		return tuskv1alpha1.InstanceStatus{Name: instanceName("pg", serial), Role: tuskv1alpha1.RoleReplica, LSN: lsn}
	}
	cases := []struct {
		name      string
		instances []inst
		quorum    *tuskv1alpha1.QuorumStatus
		lastSeen  []tuskv1alpha1.InstanceStatus
		target    int32
		want      int32  // 0: none
		blocked   string // a word of why none
	}{
		{
			name:      "async: the most advanced replica",
			instances: []inst{{serial: 2, received: "0/3000000"}, {serial: 3, received: "0/4000000"}},
			want:      3,
		},
		{
			name:      "a tie goes to the older instance",
			instances: []inst{{serial: 2, received: "0/4000000"}, {serial: 3, received: "0/4000000"}},
			want:      2,
		},
		{
			name:      "async: one replica left answering is enough",
			instances: []inst{{serial: 2, received: "0/3000000"}, {serial: 3, noStatus: true}},
			want:      2,
		},
		{
			name:      "quorum ANY 1 of 2: both answer",
			instances: []inst{{serial: 2, received: "0/3000000"}, {serial: 3, received: "0/2000000"}},
			quorum:    quorum(1, 2, 3),
			want:      2,
		},
		{
			// The acknowledged commits may be on 3 alone.
			name:      "quorum ANY 1 of 2: one answers",
			instances: []inst{{serial: 2, received: "0/3000000"}, {serial: 3, noStatus: true}},
			quorum:    quorum(1, 2, 3),
			blocked:   "only 1 of the 2 standbys",
		},
		{
			name:      "quorum ANY 2 of 3: two answer",
			instances: []inst{{serial: 2, received: "0/3000000"}, {serial: 3, received: "0/5000000"}, {serial: 4, noPod: true}},
			quorum:    quorum(2, 2, 3, 4),
			want:      3,
		},
		{
			// Ahead or not, 4 was not in the quorum: its WAL proves nothing
			// about acknowledged commits, and the quorum's best has them.
			name:      "quorum: only a standby of the quorum",
			instances: []inst{{serial: 2, received: "0/3000000"}, {serial: 3, received: "0/3000000"}, {serial: 4, received: "0/9000000"}},
			quorum:    quorum(1, 2, 3),
			want:      2,
		},
		{
			name:      "a replica not running is no candidate",
			instances: []inst{{serial: 2, noPod: true}, {serial: 3, noStatus: true}},
			blocked:   "no replica answers",
		},
		{
			// After an outage the first replica back must not win by
			// being first.
			name:      "a silent replica was last seen ahead",
			instances: []inst{{serial: 2, received: "0/3000000"}, {serial: 3, noStatus: true}},
			lastSeen:  []tuskv1alpha1.InstanceStatus{lastSeen(2, "0/3000000"), lastSeen(3, "0/3500000")},
			blocked:   "last seen at 0/3500000",
		},
		{
			name:      "a silent replica was last seen behind",
			instances: []inst{{serial: 2, received: "0/3000000"}, {serial: 3, noStatus: true}},
			lastSeen:  []tuskv1alpha1.InstanceStatus{lastSeen(3, "0/2000000")},
			want:      2,
		},
		{
			name:      "a target chosen by hand wins when safe",
			instances: []inst{{serial: 2, received: "0/3000000"}, {serial: 3, received: "0/3000100"}},
			target:    2,
			want:      2,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := clusterWithPrimary(int32(len(tc.instances)+1), 1)
			c.Status.SynchronousQuorum = tc.quorum
			c.Status.Instances = tc.lastSeen
			if tc.target != 0 {
				c.Status.TargetPrimary = instanceName(c.Name, tc.target)
			}
			// The primary's pod is gone.
			v := testView(c, append([]inst{{serial: 1, noPod: true}}, tc.instances...)...)
			checkFailoverCandidate(t, c, v, tc.want, tc.blocked)
		})
	}
}

// TestFailoverAfterACleanShutdown: a switchover's step-down cut short by
// its pod's deletion, then every pod deleted; the former primary (pg-1)
// comes back cleanly shut down at 0/5248138 on timeline 2 and waits for a
// primary to rejoin, and so does the quorum's other standby (pg-2, a
// former primary of timeline 1): nothing can answer for the quorum, yet a
// replica that received the shutdown checkpoint has every write.
func TestFailoverAfterACleanShutdown(t *testing.T) {
	const checkpoint = "0/5248138"
	clean := &instanceapi.DataDirState{State: instanceapi.StateShutDown, Timeline: 2, CheckpointLSN: checkpoint}
	cases := []struct {
		name      string
		stopped   *instanceapi.DataDirState // the former primary's StoppedForRejoin
		phase     instanceapi.Phase         // the former primary's
		instances []inst                    // pg-2 is rejoining; pg-3 and on
		lastSeen  string                    // pg-4's last LSN in status
		target    int32
		want      int32
		blocked   string
	}{
		{
			name:      "a replica that received the shutdown checkpoint",
			stopped:   clean,
			instances: []inst{{serial: 3, received: "0/52481B0", timeline: 2}},
			want:      3,
		},
		{
			// What the rule replaces: the quorum's rule alone blocks.
			name:      "no stopped data directory reported",
			instances: []inst{{serial: 3, received: "0/52481B0", timeline: 2}},
			blocked:   "only 1 of the 2 standbys",
		},
		{
			name:      "the replica stopped short of the checkpoint",
			stopped:   clean,
			instances: []inst{{serial: 3, received: checkpoint, timeline: 2}},
			blocked:   "only 1 of the 2 standbys",
		},
		{
			// Its LSNs say nothing of timeline 2: it may have diverged.
			name:      "the replica is on another timeline",
			stopped:   clean,
			instances: []inst{{serial: 3, received: "0/6000000", timeline: 1}},
			blocked:   "only 1 of the 2 standbys",
		},
		{
			// A crashed primary may have written past its last checkpoint.
			name:      "the former primary did not shut down cleanly",
			stopped:   &instanceapi.DataDirState{State: "in production", Timeline: 2, CheckpointLSN: checkpoint},
			instances: []inst{{serial: 3, received: "0/52481B0", timeline: 2}},
			blocked:   "only 1 of the 2 standbys",
		},
		{
			name:      "a standby's data directory bounds nothing",
			stopped:   &instanceapi.DataDirState{State: instanceapi.StateShutDown, Standby: true, Timeline: 2, CheckpointLSN: checkpoint},
			instances: []inst{{serial: 3, received: "0/52481B0", timeline: 2}},
			blocked:   "only 1 of the 2 standbys",
		},
		{
			// Only while it waits to rejoin is the report current.
			name:      "the former primary is not waiting to rejoin",
			stopped:   clean,
			phase:     instanceapi.PhaseStopped,
			instances: []inst{{serial: 3, received: "0/52481B0", timeline: 2}},
			blocked:   "only 1 of the 2 standbys",
		},
		{
			name:      "the switchover's target among those that have everything",
			stopped:   clean,
			instances: []inst{{serial: 3, received: "0/52481B0", timeline: 2}, {serial: 4, received: "0/5300000", timeline: 2}},
			target:    3,
			want:      3,
		},
		{
			name:      "else the most advanced of them",
			stopped:   clean,
			instances: []inst{{serial: 3, received: "0/52481B0", timeline: 2}, {serial: 4, received: "0/5300000", timeline: 2}},
			want:      4,
		},
		{
			// Nobody has more than everything the primary wrote.
			name:      "a silent standby last seen ahead does not block",
			stopped:   clean,
			instances: []inst{{serial: 3, received: "0/52481B0", timeline: 2}, {serial: 4, noStatus: true}},
			lastSeen:  "0/6000000",
			want:      3,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := clusterWithPrimary(int32(len(tc.instances)+2), 1)
			c.Status.SynchronousQuorum = &tuskv1alpha1.QuorumStatus{Number: 1, Standbys: []string{instanceName(c.Name, 2), instanceName(c.Name, 3)}}
			if tc.lastSeen != "" {
				c.Status.Instances = []tuskv1alpha1.InstanceStatus{{Name: instanceName(c.Name, 4), Role: tuskv1alpha1.RoleReplica, LSN: tc.lastSeen}}
			}
			if tc.target != 0 {
				c.Status.TargetPrimary = instanceName(c.Name, tc.target)
			}
			v := testView(c, append([]inst{{serial: 1}, {serial: 2}}, tc.instances...)...)
			p := v.member(c.Status.CurrentPrimary)
			p.status.Phase, p.status.Role, p.status.CurrentLSN, p.status.StoppedForRejoin = cmp.Or(tc.phase, instanceapi.PhaseRejoining), instanceapi.RoleUnknown, "", tc.stopped
			rejoining := v.member(instanceName(c.Name, 2)).status
			rejoining.Phase, rejoining.Role, rejoining.ReceivedLSN, rejoining.ReplayedLSN = instanceapi.PhaseRejoining, instanceapi.RoleUnknown, "", ""
			checkFailoverCandidate(t, c, v, tc.want, tc.blocked)
		})
	}
}

// checkFailoverCandidate checks that failoverCandidate picks the instance
// of serial want (0: none) and, when none, says blocked.
func checkFailoverCandidate(t *testing.T, c *tuskv1alpha1.PostgresCluster, v *view, want int32, blocked string) {
	t.Helper()
	got, why := failoverCandidate(c, v)
	wantName := ""
	if want != 0 {
		wantName = instanceName(c.Name, want)
	}
	if nameOf(got) != wantName {
		t.Fatalf("candidate = %s (%s), want %q", nameOf(got), why, wantName)
	}
	if !strings.Contains(why, blocked) || (blocked == "") != (why == "") {
		t.Errorf("why = %q, want one saying %q", why, blocked)
	}
}

func TestStricterQuorum(t *testing.T) {
	q := func(n int32, names ...string) *tuskv1alpha1.QuorumStatus {
		return &tuskv1alpha1.QuorumStatus{Number: n, Standbys: names}
	}
	cases := []struct {
		name      string
		old, next *tuskv1alpha1.QuorumStatus
		want      *tuskv1alpha1.QuorumStatus
	}{
		{"async before: nothing guaranteed yet", nil, q(1, "a", "b"), nil},
		{"async next: the old one holds until it is in force", q(1, "a", "b"), nil, q(1, "a", "b")},
		{"a standby added", q(1, "a", "b"), q(1, "a", "b", "c"), q(1, "a", "b", "c")},
		{"a standby swapped", q(1, "a", "b"), q(1, "b", "c"), q(1, "a", "b", "c")},
		{"number lowered", q(2, "a", "b", "c"), q(1, "a", "b", "c"), q(1, "a", "b", "c")},
		{"number raised", q(1, "a", "b", "c"), q(2, "a", "b", "c"), q(1, "a", "b", "c")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := stricterQuorum(tc.old, tc.next)
			if (got == nil) != (tc.want == nil) || (got != nil && (got.Number != tc.want.Number || strings.Join(got.Standbys, ",") != strings.Join(tc.want.Standbys, ","))) {
				t.Errorf("stricterQuorum = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDesiredQuorum(t *testing.T) {
	c := clusterWithPrimary(3, 1)
	c.Spec.PostgreSQL.Synchronous = tuskv1alpha1.SynchronousSpec{Mode: tuskv1alpha1.SynchronousQuorum, Number: 1, WhenTooFewStandbys: tuskv1alpha1.StandbyShortageDegrade}
	v := testView(c, inst{serial: 1, ready: true}, inst{serial: 3, ready: true, streaming: true}, inst{serial: 2, ready: true, streaming: true})
	q := desiredQuorum(c, v)
	if q == nil || q.Number != 1 || strings.Join(q.Standbys, ",") != "pg-2,pg-3" {
		t.Fatalf("desiredQuorum = %+v, want ANY 1 of pg-2, pg-3", q)
	}
	// Degrade with no standby streaming is asynchronous: nothing to record.
	v = testView(c, inst{serial: 1, ready: true}, inst{serial: 2}, inst{serial: 3})
	if q := desiredQuorum(c, v); q != nil {
		t.Errorf("desiredQuorum with no standby streaming in degrade mode = %+v, want nil", q)
	}
	c.Spec.PostgreSQL.Synchronous.WhenTooFewStandbys = tuskv1alpha1.StandbyShortageBlock
	if q := desiredQuorum(c, v); q == nil || q.Number != 1 {
		t.Errorf("desiredQuorum in block mode = %+v, want ANY 1 kept", q)
	}
}

func TestLeaseObserver(t *testing.T) {
	now := time.Unix(1000, 0)
	o := newLeaseObserver()
	o.now = func() time.Time { return now }
	key := types.NamespacedName{Namespace: "ns", Name: "pg-primary"}
	lease := func(version, holder string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pg-primary", ResourceVersion: version}}
		l.Spec.LeaseDurationSeconds = ptr.To(int32(10))
		if holder != "" {
			l.Spec.HolderIdentity = ptr.To(holder)
		}
		return l
	}
	if s := o.state(key); s.known || s.free {
		t.Fatalf("an unseen Lease is %+v, want unknown and not free", s)
	}
	if !o.observe(lease("1", "pg-1")) {
		t.Error("the first sighting should count as a change of holder")
	}
	now = now.Add(4 * time.Second)
	if o.observe(lease("2", "pg-1")) {
		t.Error("a renewal is not a change of holder")
	}
	now = now.Add(9 * time.Second)
	if s := o.state(key); s.free || s.holder != "pg-1" || s.wait != time.Second {
		t.Errorf("9 s after a renewal of a 10 s Lease: %+v, want held by pg-1 for 1 s more", s)
	}
	// The same version seen again (a resync) does not restart the clock.
	o.observe(lease("2", "pg-1"))
	now = now.Add(2 * time.Second)
	if s := o.state(key); !s.free {
		t.Errorf("11 s after the last renewal: %+v, want free", s)
	}
	if !o.observe(lease("3", "")) {
		t.Error("a release is a change of holder")
	}
	if s := o.state(key); !s.free || s.holder != "" {
		t.Errorf("a released Lease is %+v, want free", s)
	}
}

func TestFencedInstances(t *testing.T) {
	c := clusterWithPrimary(3, 1)
	for raw, want := range map[string][]bool{ // fenced pg-1, pg-2, pg-3
		"":                {false, false, false},
		`["pg-2"]`:        {false, true, false},
		`["*"]`:           {true, true, true},
		`["pg-1","pg-3"]`: {true, false, true},
	} {
		c.Annotations = map[string]string{tuskv1alpha1.AnnotationFencedInstances: raw}
		names, err := fencedInstances(c)
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		for i, w := range want {
			if got := fenced(names, instanceName(c.Name, int32(i+1))); got != w {
				t.Errorf("%q: fenced(pg-%d) = %v, want %v", raw, i+1, got, w)
			}
		}
	}
	c.Annotations = map[string]string{tuskv1alpha1.AnnotationFencedInstances: "pg-2"}
	if _, err := fencedInstances(c); err == nil || !strings.Contains(err.Error(), "must be a JSON array") {
		t.Errorf("a bare name: %v, want a spec error saying what is expected", err)
	}
}

func TestDivergedReplica(t *testing.T) {
	c := clusterWithPrimary(3, 1)
	v := testView(c, inst{serial: 1, ready: true}, inst{serial: 2, ready: true, streaming: true}, inst{serial: 3, ready: true})
	primary := v.member("pg-1")
	primary.status.Timeline = 3
	streaming, stuck := v.member("pg-2"), v.member("pg-3")
	streaming.status.Timeline, stuck.status.Timeline = 2, 2
	if divergedReplica(streaming, primary) {
		t.Error("a replica streaming on an older timeline is catching up, not diverged")
	}
	if !divergedReplica(stuck, primary) {
		t.Error("a replica on an older timeline that does not stream is diverged")
	}
	stuck.status.Timeline = 3
	if divergedReplica(stuck, primary) {
		t.Error("a replica on the primary's timeline is not diverged, streaming or not")
	}
	if divergedReplica(primary, primary) {
		t.Error("the primary is never diverged from itself")
	}

	// A replica that says it diverged is taken at its word, streaming
	// (it reconnects and is turned away, again and again) or not.
	if reportsDiverged(streaming, primary) {
		t.Error("a replica that said nothing reported a divergence")
	}
	streaming.status.Diverged = "LOG:  new timeline 3 forked off current database system timeline 2 before current recovery point 0/41E11C0"
	if !reportsDiverged(streaming, primary) {
		t.Error("a replica that said it diverged was not taken at its word")
	}
	streaming.status.Phase = instanceapi.PhaseRejoining
	if reportsDiverged(streaming, primary) {
		t.Error("a replica already rejoining was reported diverged again")
	}

	var f firstSeen
	at := time.Unix(100, 0)
	if d := f.heldFor("a", at); d != 0 {
		t.Errorf("first sighting held for %s, want 0", d)
	}
	if d := f.heldFor("a", at.Add(5*time.Second)); d != 5*time.Second {
		t.Errorf("held for %s, want 5s", d)
	}
	f.forget("a")
	if d := f.heldFor("a", at.Add(9*time.Second)); d != 0 {
		t.Errorf("after forget held for %s, want 0", d)
	}
}

// A rollout never replaces or restarts an instance fenced by hand, even an
// outdated one that is down: its pod is kept for inspection.
func TestRolloutLeavesAFencedInstanceAlone(t *testing.T) {
	c := clusterWithPrimary(3, 1)
	v := testView(c, inst{serial: 1, ready: true}, inst{serial: 2, ready: true, streaming: true}, inst{serial: 3, outdated: true, fenced: true})
	r := &ClusterReconciler{Config: Config{InstanceManagerImage: testManagerImage}}
	ro, err := r.reconcileRollout(t.Context(), c, v, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !ro.pending || !strings.Contains(ro.waiting, "pg-3 is fenced by hand") {
		t.Errorf("rollout = %+v, want it pending and waiting on the fenced pg-3", ro)
	}
}

func TestStatusTimeouts(t *testing.T) {
	tests := []struct {
		name  string
		lease leaseState
		want  map[string]time.Duration
	}{
		{"lease never seen", leaseState{}, map[string]time.Duration{"pg-1": statusTimeout, "pg-2": statusTimeout}},
		{"held and renewed", leaseState{known: true, holder: "pg-1", wait: 4 * time.Second}, map[string]time.Duration{"pg-1": statusTimeout, "pg-2": statusTimeout}},
		{"released", leaseState{known: true, free: true}, map[string]time.Duration{"pg-1": statusTimeout, "pg-2": statusTimeout}},
		{"expired: its holder is not waited for long", leaseState{known: true, holder: "pg-1", free: true},
			map[string]time.Duration{"pg-1": lapsedPrimaryStatusTimeout, "pg-2": statusTimeout}},
	}
	for _, tc := range tests {
		timeout := statusTimeouts(tc.lease)
		for instance, want := range tc.want {
			if got := timeout(instance); got != want {
				t.Errorf("%s: timeout(%s) = %s, want %s", tc.name, instance, got, want)
			}
		}
	}
}

func TestStaleHostAddr(t *testing.T) {
	tests := []struct {
		name string
		up   *instanceapi.Upstream
		want bool
	}{
		{"no upstream reported", nil, false},
		{"the -rw Service only", &instanceapi.Upstream{Host: "c-rw", Port: 5432}, false},
		{"the primary's address", &instanceapi.Upstream{Host: "c-rw", HostAddr: "10.0.0.7", Port: 5432}, false},
		{"another address", &instanceapi.Upstream{Host: "c-rw", HostAddr: "10.0.0.9", Port: 5432}, true},
	}
	for _, tt := range tests {
		if got := staleHostAddr(tt.up, "10.0.0.7"); got != tt.want {
			t.Errorf("%s: staleHostAddr = %t, want %t", tt.name, got, tt.want)
		}
	}
}
