package controller

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// backupTarget is where a backup is taken from: its own spec.target, else
// the cluster's spec.backup.target, else prefer-replica.
func backupTarget(b *tuskv1alpha1.PostgresBackup, c *tuskv1alpha1.PostgresCluster) tuskv1alpha1.BackupTarget {
	if b.Spec.Target != "" {
		return b.Spec.Target
	}
	if c.Spec.Backup != nil && c.Spec.Backup.Target != "" {
		return c.Spec.Backup.Target
	}
	return tuskv1alpha1.BackupTargetPreferReplica
}

// backupCandidate is one instance as the backup controller sees it.
type backupCandidate struct {
	name string
	// primary: the cluster's current primary that reports itself primary.
	primary bool
	// ready: its pod is Ready and its manager answered ready.
	ready bool
	// streaming: a replica with a live WAL receiver.
	streaming bool
	// lagBytes: how far its replay is behind the primary.
	lagBytes int64
}

// chooseBackupInstance picks the instance to back up: with
// prefer-replica, the ready, streaming replica with the least lag (by name
// on a tie), else the primary; with primary, the primary. Only a ready
// instance is chosen; "" when there is none.
func chooseBackupInstance(target tuskv1alpha1.BackupTarget, cands []backupCandidate) string {
	var primary string
	var replicas []backupCandidate
	for _, c := range cands {
		switch {
		case !c.ready:
		case c.primary:
			primary = c.name
		case c.streaming:
			replicas = append(replicas, c)
		}
	}
	if target == tuskv1alpha1.BackupTargetPrimary || len(replicas) == 0 {
		return primary
	}
	best := slices.MinFunc(replicas, func(a, b backupCandidate) int {
		return cmp.Or(cmp.Compare(a.lagBytes, b.lagBytes), cmp.Compare(a.name, b.name))
	})
	return best.name
}

// backupCandidates turns the observed members into candidates. A replica's
// lag is the primary's view of it (pg_stat_replication) when the primary
// reports it, else its own replay lag.
func backupCandidates(c *tuskv1alpha1.PostgresCluster, v *view) []backupCandidate {
	primaryLag := map[string]int64{}
	if p := v.member(c.Status.CurrentPrimary); p != nil && p.status != nil {
		for _, r := range p.status.Replicas {
			primaryLag[r.Name] = r.LagBytes
		}
	}
	var cands []backupCandidate
	for _, m := range v.members {
		if m.status == nil {
			continue
		}
		cand := backupCandidate{name: m.name, ready: m.ready(), streaming: m.status.Streaming}
		cand.primary = m.name == c.Status.CurrentPrimary && m.status.Role == instanceapi.RolePrimary
		cand.lagBytes = m.status.ReplayLagBytes
		if lag, ok := primaryLag[m.name]; ok {
			cand.lagBytes = lag
		}
		if !cand.primary && m.status.Role != instanceapi.RoleReplica {
			cand.ready = false // a second primary, or unknown: never back it up
		}
		cands = append(cands, cand)
	}
	return cands
}

// otherRunningBackup names another backup of the same cluster that is
// Running (the oldest, by name on a tie), or "" when there is none.
func otherRunningBackup(b *tuskv1alpha1.PostgresBackup, all []tuskv1alpha1.PostgresBackup) string {
	var running []*tuskv1alpha1.PostgresBackup
	for i := range all {
		o := &all[i]
		if o.Name != b.Name && o.Spec.Cluster.Name == b.Spec.Cluster.Name && o.Status.Phase == tuskv1alpha1.BackupPhaseRunning {
			running = append(running, o)
		}
	}
	if len(running) == 0 {
		return ""
	}
	return slices.MinFunc(running, func(x, y *tuskv1alpha1.PostgresBackup) int {
		return cmp.Or(x.CreationTimestamp.Compare(y.CreationTimestamp.Time), cmp.Compare(x.Name, y.Name))
	}).Name
}

// backupOutcome is what one report of the instance manager does to a
// Running backup.
type backupOutcome int

const (
	backupStillRunning backupOutcome = iota
	backupSucceeded
	backupFailedOnInstance
)

// applyBackupReport copies the instance manager's report into the
// backup's status and says what it means.
func applyBackupReport(b *tuskv1alpha1.PostgresBackup, rep instanceapi.BackupStatus, now time.Time) backupOutcome {
	switch rep.Phase {
	case instanceapi.BackupCompleted:
		st := &b.Status
		st.Phase, st.Error = tuskv1alpha1.BackupPhaseCompleted, ""
		st.CompletedAt = ptrTime(now)
		if rep.CompletedAt != nil {
			st.CompletedAt = ptrTime(*rep.CompletedAt)
		}
		if r := rep.Record; r != nil {
			st.BeginLSN, st.EndLSN, st.Timeline, st.SizeBytes = r.BeginLSN, r.EndLSN, int32(r.Timeline), r.CompressedSize //nolint:gosec // timelines are small
		}
		if rep.Location != "" {
			st.Location = rep.Location
		}
		return backupSucceeded
	case instanceapi.BackupFailed:
		failBackup(b, tuskv1alpha1.ReasonBackupFailed, backupErrorMessage(rep), now)
		return backupFailedOnInstance
	}
	return backupStillRunning
}

// backupErrorMessage is the instance's error, led by its kind when it has
// one (WrongCredentials: ...).
func backupErrorMessage(rep instanceapi.BackupStatus) string {
	msg := cmp.Or(rep.Error, "the instance manager reported the backup failed without a reason")
	if rep.ErrorKind != "" {
		return rep.ErrorKind + ": " + msg
	}
	return msg
}

// failBackup marks the backup Failed for reason.
func failBackup(b *tuskv1alpha1.PostgresBackup, reason, message string, now time.Time) {
	b.Status.Phase, b.Status.Error = tuskv1alpha1.BackupPhaseFailed, message
	b.Status.CompletedAt = ptrTime(now)
	setBackupCondition(b, metav1.ConditionFalse, reason, message)
}

func setBackupCondition(b *tuskv1alpha1.PostgresBackup, status metav1.ConditionStatus, reason, message string) {
	b.Status.ObservedGeneration = b.Generation
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: tuskv1alpha1.ConditionReady, Status: status, Reason: reason,
		Message: message, ObservedGeneration: b.Generation})
}

func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t.UTC().Truncate(time.Second))
	return &mt
}

// backupLocation is where the backup goes: the cluster's location's base/.
func backupLocation(c *tuskv1alpha1.PostgresCluster, name string) string {
	return "s3://" + c.Spec.Backup.ObjectStore.Bucket + "/" + strings.Trim(archivePath(c), "/") + "/base/" + name + "/"
}

// backupAnswer is one instance manager's answer about a backup.
type backupAnswer struct {
	rep instanceapi.BackupStatus
	// notFound: the manager did not take it since it started, and the
	// store has no record of it (404).
	notFound bool
	// err: no answer, or another error (notFound included).
	err error
}

// followAction is what an answer about a Running backup leads to.
type followAction int

const (
	// followWait: ask again later (no answer yet).
	followWait followAction = iota
	// followReport: apply the report returned.
	followReport
	// followRestarted: the backup's instance manager restarted during it.
	followRestarted
	// followInstanceGone: the backup's instance is gone, and no other
	// instance finds the backup complete in the store.
	followInstanceGone
)

// decideFollow reads the answer of the backup's instance (own, nil when
// its pod is gone) or, without one, the other instances' answers.
func decideFollow(own *backupAnswer, others []backupAnswer) (followAction, instanceapi.BackupStatus) {
	if own != nil {
		switch {
		case own.notFound:
			return followRestarted, instanceapi.BackupStatus{}
		case own.err != nil:
			return followWait, instanceapi.BackupStatus{}
		}
		return followReport, own.rep
	}
	answered := false
	for _, a := range others {
		if a.err == nil && a.rep.Phase == instanceapi.BackupCompleted {
			return followReport, a.rep
		}
		answered = answered || a.notFound
	}
	if answered {
		return followInstanceGone, instanceapi.BackupStatus{}
	}
	return followWait, instanceapi.BackupStatus{}
}

// walSwitchInterval is the least time between two requests to switch WAL
// for one backup. One request usually suffices; asking again covers a
// request lost or sent to a primary that was being replaced. The primary's
// manager also switches at most once every five seconds, whoever asks.
const walSwitchInterval = 10 * time.Second

// walSwitchTarget names the instance to ask to switch WAL for a Running
// backup whose instance reported rep, or "" when none is to be asked.
//
// A backup taken on a standby is complete only once its last WAL segment
// is archived, and only the primary archives, when it leaves the segment:
// on an idle cluster that is at archive_timeout, a minute by default. So
// while the backup's instance reports it waits for a segment, the operator
// asks the primary's instance manager to switch WAL (POST /v1/wal/switch).
// The operator does it, rather than the standby's manager, because it is
// what knows the primary (status.currentPrimary, asked anew at every
// request, so a primary that changed during the backup is the one asked)
// and it already calls every manager with its client certificate; instance
// managers never call each other, and no one needs a new privilege
// (the primary's manager runs pg_switch_wal() over its own socket as the
// superuser). A switch is harmless: at worst it closes a segment early.
//
// The primary asked is the cluster's current primary, when its manager
// answered that it is primary and its pod is not being deleted; none is
// asked for a backup that waits for nothing, or within walSwitchInterval
// of the last request for the same backup.
func walSwitchTarget(rep instanceapi.BackupStatus, currentPrimary string, v *view, lastAsked, now time.Time) string {
	if rep.Phase != instanceapi.BackupRunning || rep.WaitingForWAL == "" {
		return ""
	}
	if !lastAsked.IsZero() && now.Sub(lastAsked) < walSwitchInterval {
		return ""
	}
	m := v.member(currentPrimary)
	if m == nil || m.pod == nil || m.pod.DeletionTimestamp != nil || m.status == nil || m.status.Role != instanceapi.RolePrimary {
		return ""
	}
	return m.name
}
