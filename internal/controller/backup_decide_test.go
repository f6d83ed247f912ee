package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

func TestBackupTarget(t *testing.T) {
	const primary, replica = tuskv1alpha1.BackupTargetPrimary, tuskv1alpha1.BackupTargetPreferReplica
	tests := []struct {
		backup, cluster tuskv1alpha1.BackupTarget
		noBackupSpec    bool
		want            tuskv1alpha1.BackupTarget
	}{
		{"", "", false, replica},
		{"", "", true, replica},
		{"", primary, false, primary},
		{replica, primary, false, replica}, // the backup's own wins
		{primary, "", false, primary},
	}
	for _, tt := range tests {
		b := &tuskv1alpha1.PostgresBackup{Spec: tuskv1alpha1.PostgresBackupSpec{Target: tt.backup}}
		c := &tuskv1alpha1.PostgresCluster{}
		if !tt.noBackupSpec {
			c.Spec.Backup = &tuskv1alpha1.BackupSpec{Target: tt.cluster}
		}
		if got := backupTarget(b, c); got != tt.want {
			t.Errorf("backup %q, cluster %q (spec.backup %v): %q, want %q", tt.backup, tt.cluster, !tt.noBackupSpec, got, tt.want)
		}
	}
}

func TestChooseBackupInstance(t *testing.T) {
	const primary, replica = tuskv1alpha1.BackupTargetPrimary, tuskv1alpha1.BackupTargetPreferReplica
	p := backupCandidate{name: "pg-1", primary: true, ready: true}
	r := func(name string, lag int64) backupCandidate {
		return backupCandidate{name: name, ready: true, streaming: true, lagBytes: lag}
	}
	notReady := r("pg-2", 0)
	notReady.ready = false
	notStreaming := r("pg-3", 0)
	notStreaming.streaming = false
	downPrimary := p
	downPrimary.ready = false
	tests := []struct {
		name   string
		target tuskv1alpha1.BackupTarget
		cands  []backupCandidate
		want   string
	}{
		{"least lag", replica, []backupCandidate{p, r("pg-2", 900), r("pg-3", 100)}, "pg-3"},
		{"a tie by name", replica, []backupCandidate{p, r("pg-3", 0), r("pg-2", 0)}, "pg-2"},
		{"no replica: the primary", replica, []backupCandidate{p}, "pg-1"},
		{"replica not ready", replica, []backupCandidate{p, notReady}, "pg-1"},
		{"replica not streaming", replica, []backupCandidate{p, notStreaming}, "pg-1"},
		{"primary asked", primary, []backupCandidate{p, r("pg-2", 0)}, "pg-1"},
		{"primary asked, not ready", primary, []backupCandidate{downPrimary, r("pg-2", 0)}, ""},
		{"replica even with the primary down", replica, []backupCandidate{downPrimary, r("pg-2", 0)}, "pg-2"},
		{"nothing ready", replica, []backupCandidate{downPrimary, notReady}, ""},
		{"no instances", replica, nil, ""},
	}
	for _, tt := range tests {
		if got := chooseBackupInstance(tt.target, tt.cands); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestBackupCandidates(t *testing.T) {
	c := &tuskv1alpha1.PostgresCluster{}
	c.Status.CurrentPrimary = "pg-1"
	v := &view{members: []*member{
		readyMember("pg-1", &instanceapi.Status{Role: instanceapi.RolePrimary, Ready: true,
			Replicas: []instanceapi.ReplicaConnection{{Name: "pg-2", LagBytes: 4096}}}),
		readyMember("pg-2", &instanceapi.Status{Role: instanceapi.RoleReplica, Ready: true, Streaming: true, ReplayLagBytes: 1}),
		readyMember("pg-3", &instanceapi.Status{Role: instanceapi.RoleReplica, Ready: true, Streaming: true, ReplayLagBytes: 7}),
		readyMember("pg-4", &instanceapi.Status{Role: instanceapi.RolePrimary, Ready: true}), // not the current primary
		{name: "pg-5"}, // did not answer
	}}
	got := backupCandidates(c, v)
	want := []backupCandidate{
		{name: "pg-1", primary: true, ready: true},
		{name: "pg-2", ready: true, streaming: true, lagBytes: 4096}, // the primary's view
		{name: "pg-3", ready: true, streaming: true, lagBytes: 7},    // its own
		{name: "pg-4"},
	}
	if len(got) != len(want) {
		t.Fatalf("candidates %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("candidate %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func readyMember(name string, st *instanceapi.Status) *member {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	return &member{name: name, pod: pod, status: st}
}

func TestOtherRunningBackup(t *testing.T) {
	at := func(sec int) metav1.Time { return metav1.NewTime(time.Unix(int64(sec), 0)) }
	backup := func(name, cluster string, phase tuskv1alpha1.BackupPhase, created int) tuskv1alpha1.PostgresBackup {
		return tuskv1alpha1.PostgresBackup{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at(created)},
			Spec:       tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: cluster}},
			Status:     tuskv1alpha1.PostgresBackupStatus{Phase: phase},
		}
	}
	self := backup("new", "pg", "", 9)
	tests := []struct {
		name string
		all  []tuskv1alpha1.PostgresBackup
		want string
	}{
		{"none", []tuskv1alpha1.PostgresBackup{self}, ""},
		{"one running", []tuskv1alpha1.PostgresBackup{self, backup("b1", "pg", tuskv1alpha1.BackupPhaseRunning, 1)}, "b1"},
		{"other cluster", []tuskv1alpha1.PostgresBackup{self, backup("b1", "other", tuskv1alpha1.BackupPhaseRunning, 1)}, ""},
		{"ended or pending", []tuskv1alpha1.PostgresBackup{self, backup("b1", "pg", tuskv1alpha1.BackupPhaseCompleted, 1),
			backup("b2", "pg", tuskv1alpha1.BackupPhaseFailed, 2), backup("b3", "pg", tuskv1alpha1.BackupPhasePending, 3)}, ""},
		{"the oldest", []tuskv1alpha1.PostgresBackup{backup("b2", "pg", tuskv1alpha1.BackupPhaseRunning, 5), self,
			backup("b3", "pg", tuskv1alpha1.BackupPhaseRunning, 2)}, "b3"},
		{"itself running", []tuskv1alpha1.PostgresBackup{backup("new", "pg", tuskv1alpha1.BackupPhaseRunning, 9)}, ""},
	}
	for _, tt := range tests {
		if got := otherRunningBackup(&self, tt.all); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestApplyBackupReport(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	done := now.Add(-time.Minute)
	tests := []struct {
		name  string
		rep   instanceapi.BackupStatus
		want  backupOutcome
		check func(st tuskv1alpha1.PostgresBackupStatus) string
	}{
		{"running", instanceapi.BackupStatus{Phase: instanceapi.BackupRunning, WaitingForWAL: "000000010000000000000003"}, backupStillRunning,
			func(st tuskv1alpha1.PostgresBackupStatus) string {
				if st.Phase != tuskv1alpha1.BackupPhaseRunning || st.CompletedAt != nil {
					return "changed"
				}
				return ""
			}},
		{"completed", instanceapi.BackupStatus{Phase: instanceapi.BackupCompleted, CompletedAt: &done, Location: "s3://b/pg/base/x/",
			Record: &instanceapi.BackupRecord{BeginLSN: "0/2000028", EndLSN: "0/3000100", Timeline: 2, CompressedSize: 4242}}, backupSucceeded,
			func(st tuskv1alpha1.PostgresBackupStatus) string {
				if st.Phase != tuskv1alpha1.BackupPhaseCompleted || st.BeginLSN != "0/2000028" || st.EndLSN != "0/3000100" ||
					st.Timeline != 2 || st.SizeBytes != 4242 || !st.CompletedAt.Time.Equal(done) || st.Location != "s3://b/pg/base/x/" {
					return "not copied"
				}
				return ""
			}},
		{"failed with a kind", instanceapi.BackupStatus{Phase: instanceapi.BackupFailed, Error: "while listing: access denied",
			ErrorKind: instanceapi.BackupErrorWrongCredentials}, backupFailedOnInstance,
			func(st tuskv1alpha1.PostgresBackupStatus) string {
				if st.Phase != tuskv1alpha1.BackupPhaseFailed || st.Error != "WrongCredentials: while listing: access denied" ||
					!st.CompletedAt.Time.Equal(now) || len(st.Conditions) != 1 || st.Conditions[0].Reason != tuskv1alpha1.ReasonBackupFailed {
					return "not failed with the kind and the error"
				}
				return ""
			}},
		{"failed without a reason", instanceapi.BackupStatus{Phase: instanceapi.BackupFailed}, backupFailedOnInstance,
			func(st tuskv1alpha1.PostgresBackupStatus) string {
				if !strings.Contains(st.Error, "without a reason") {
					return "no message"
				}
				return ""
			}},
	}
	for _, tt := range tests {
		b := &tuskv1alpha1.PostgresBackup{Status: tuskv1alpha1.PostgresBackupStatus{Phase: tuskv1alpha1.BackupPhaseRunning, Location: "s3://b/pg/base/x/"}}
		if got := applyBackupReport(b, tt.rep, now); got != tt.want {
			t.Errorf("%s: outcome %v, want %v", tt.name, got, tt.want)
		}
		if msg := tt.check(b.Status); msg != "" {
			t.Errorf("%s: status %+v: %s", tt.name, b.Status, msg)
		}
	}
}

func TestBackupLocation(t *testing.T) {
	c := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: "orders"}}
	c.Spec.Backup = &tuskv1alpha1.BackupSpec{ObjectStore: tuskv1alpha1.ObjectStoreSpec{Bucket: "bk"}}
	if got := backupLocation(c, "b1"); got != "s3://bk/orders/base/b1/" {
		t.Errorf("default path: %q", got)
	}
	c.Spec.Backup.ObjectStore.Path = "/prod/orders/"
	if got := backupLocation(c, "b1"); got != "s3://bk/prod/orders/base/b1/" {
		t.Errorf("path /prod/orders/: %q", got)
	}
}

func TestDecideFollow(t *testing.T) {
	running := backupAnswer{rep: instanceapi.BackupStatus{Name: "b", Phase: instanceapi.BackupRunning}}
	completed := backupAnswer{rep: instanceapi.BackupStatus{Name: "b", Phase: instanceapi.BackupCompleted}}
	failed := backupAnswer{rep: instanceapi.BackupStatus{Name: "b", Phase: instanceapi.BackupFailed, Error: "x"}}
	notFound := backupAnswer{notFound: true, err: errors.New("answered 404")}
	silent := backupAnswer{err: errors.New("connection refused")}
	tests := []struct {
		name   string
		own    *backupAnswer
		others []backupAnswer
		want   followAction
		phase  instanceapi.BackupPhase
	}{
		{"running", &running, nil, followReport, instanceapi.BackupRunning},
		{"completed", &completed, nil, followReport, instanceapi.BackupCompleted},
		{"failed", &failed, nil, followReport, instanceapi.BackupFailed},
		{"the manager restarted", &notFound, nil, followRestarted, ""},
		{"no answer", &silent, nil, followWait, ""},
		{"gone, another finds it complete", nil, []backupAnswer{notFound, completed}, followReport, instanceapi.BackupCompleted},
		{"gone, not in the store", nil, []backupAnswer{silent, notFound}, followInstanceGone, ""},
		{"gone, nobody answers", nil, []backupAnswer{silent}, followWait, ""},
		{"gone, no other instance", nil, nil, followWait, ""},
		{"gone, another says running (cannot be: ignored)", nil, []backupAnswer{running}, followWait, ""},
	}
	for _, tt := range tests {
		got, rep := decideFollow(tt.own, tt.others)
		if got != tt.want || rep.Phase != tt.phase {
			t.Errorf("%s: %v with phase %q, want %v with %q", tt.name, got, rep.Phase, tt.want, tt.phase)
		}
	}
}

func TestWALSwitchTarget(t *testing.T) {
	now := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	waiting := instanceapi.BackupStatus{Name: "b1", Phase: instanceapi.BackupRunning, WaitingForWAL: "000000010000000000000005"}
	running := waiting
	running.WaitingForWAL = ""
	completed := waiting
	completed.Phase = instanceapi.BackupCompleted
	inst := func(name string, role instanceapi.Role) *member {
		return &member{name: name, pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}, status: &instanceapi.Status{Role: role}}
	}
	cluster := func(primaryRole instanceapi.Role) *view {
		return &view{members: []*member{inst("pg-1", primaryRole), inst("pg-2", instanceapi.RoleReplica)}}
	}
	deleting := cluster(instanceapi.RolePrimary)
	deleting.members[0].pod.DeletionTimestamp = &metav1.Time{Time: now}
	silent := cluster(instanceapi.RolePrimary)
	silent.members[0].status = nil
	tests := []struct {
		name      string
		rep       instanceapi.BackupStatus
		primary   string
		v         *view
		lastAsked time.Time
		want      string
	}{
		{"waiting, never asked", waiting, "pg-1", cluster(instanceapi.RolePrimary), time.Time{}, "pg-1"},
		{"waiting, asked long enough ago", waiting, "pg-1", cluster(instanceapi.RolePrimary), now.Add(-walSwitchInterval), "pg-1"},
		{"waiting, asked a moment ago", waiting, "pg-1", cluster(instanceapi.RolePrimary), now.Add(-walSwitchInterval + time.Second), ""},
		{"still copying", running, "pg-1", cluster(instanceapi.RolePrimary), time.Time{}, ""},
		{"completed", completed, "pg-1", cluster(instanceapi.RolePrimary), time.Time{}, ""},
		{"the primary changed: the new one", waiting, "pg-2", &view{members: []*member{
			inst("pg-1", instanceapi.RoleReplica), inst("pg-2", instanceapi.RolePrimary)}}, time.Time{}, "pg-2"},
		{"the current primary does not say it is primary yet", waiting, "pg-1", cluster(instanceapi.RoleReplica), time.Time{}, ""},
		{"no current primary", waiting, "", cluster(instanceapi.RolePrimary), time.Time{}, ""},
		{"the primary's pod is being deleted", waiting, "pg-1", deleting, time.Time{}, ""},
		{"the primary did not answer", waiting, "pg-1", silent, time.Time{}, ""},
	}
	for _, tt := range tests {
		if got := walSwitchTarget(tt.rep, tt.primary, tt.v, tt.lastAsked, now); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestClusterTurnsLetOnePassPerCluster: a cluster's turn, taken, is
// refused to a second pass of the same cluster (which does not wait) and
// not to another cluster's; given back, it can be taken again, and
// nothing is kept of a cluster with no pass running.
func TestClusterTurnsLetOnePassPerCluster(t *testing.T) {
	var turns clusterTurns
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "other", Name: "a"}
	steps := []struct {
		take bool // take, else give
		key  types.NamespacedName
		want bool
	}{
		{true, a, true},
		{true, a, false},
		{true, b, true},
		{false, a, false},
		{true, a, true},
		{false, a, false},
		{false, b, false},
	}
	for i, s := range steps {
		if !s.take {
			turns.give(s.key)
			continue
		}
		if got := turns.take(s.key); got != s.want {
			t.Errorf("step %d: take(%s) = %v, want %v", i, s.key, got, s.want)
		}
	}
	if len(turns.busy) != 0 {
		t.Errorf("turns kept %v after every pass ended", turns.busy)
	}
}
