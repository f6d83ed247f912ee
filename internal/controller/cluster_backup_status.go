package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/retention"
)

// backupReport is what status says of a cluster's scheduled backups and
// their retention: status.backup and two conditions (nil: none).
type backupReport struct {
	status              *tuskv1alpha1.BackupStatus
	schedule, retention *metav1.Condition
}

// reconcileBackupStatus records the schedule's and retention's state in
// status, the BackupScheduleReconciler doing the work and writing no
// status: the last run from the scheduled PostgresBackups (and status,
// which keeps it once their backup is gone), the next from the schedule,
// retention's outcome from r.results. A condition turning false is told
// in a Warning Event too.
func (r *ClusterReconciler) reconcileBackupStatus(ctx context.Context, c *tuskv1alpha1.PostgresCluster) error {
	var backups []tuskv1alpha1.PostgresBackup
	if c.Spec.Backup != nil {
		var err error
		if backups, err = clusterBackups(ctx, r.Client, c); err != nil {
			return err
		}
	}
	var res *retentionResult
	if r.results != nil {
		if got, ok := r.results.get(client.ObjectKeyFromObject(c)); ok {
			res = &got
		}
	}
	rep := reportBackups(c, backups, res, r.now())
	c.Status.Backup = rep.status
	r.setBackupCondition(c, tuskv1alpha1.ConditionScheduledBackups, rep.schedule)
	r.setBackupCondition(c, tuskv1alpha1.ConditionBackupRetention, rep.retention)
	return nil
}

// setBackupCondition sets cond (removes the condition typ when nil) and
// records a Warning Event when it turns false or its failure changes.
func (r *ClusterReconciler) setBackupCondition(c *tuskv1alpha1.PostgresCluster, typ string, cond *metav1.Condition) {
	if cond == nil {
		meta.RemoveStatusCondition(&c.Status.Conditions, typ)
		return
	}
	old := meta.FindStatusCondition(c.Status.Conditions, typ)
	if cond.Status == metav1.ConditionFalse && (old == nil || old.Status != cond.Status || old.Reason != cond.Reason || old.Message != cond.Message) {
		r.event(c, corev1.EventTypeWarning, cond.Reason, "Backup", "%s", cond.Message)
	}
	setCondition(c, *cond)
}

// reportBackups says what status holds of c's scheduled backups and
// retention, given its PostgresBackups, retention's last outcome (nil
// when none is known since the operator started: status keeps its own)
// and the time.
func reportBackups(c *tuskv1alpha1.PostgresCluster, backups []tuskv1alpha1.PostgresBackup, res *retentionResult, now time.Time) backupReport {
	if c.Spec.Backup == nil {
		return backupReport{}
	}
	st := &tuskv1alpha1.BackupStatus{}
	if c.Status.Backup != nil {
		st = c.Status.Backup.DeepCopy()
	}
	rep := backupReport{status: st}
	rep.schedule = scheduleReport(c, st, backups, now)
	rep.retention = retentionReport(c, st, res)
	if *st == (tuskv1alpha1.BackupStatus{}) {
		rep.status = nil
	}
	return rep
}

// scheduleReport fills the schedule's part of st and says its condition.
func scheduleReport(c *tuskv1alpha1.PostgresCluster, st *tuskv1alpha1.BackupStatus, backups []tuskv1alpha1.PostgresBackup, now time.Time) *metav1.Condition {
	if last, ok := lastScheduledRun(c, backups, now); ok {
		st.LastScheduleTime = ptr.To(metav1.NewTime(last))
		st.LastScheduledBackup = scheduledBackupName(c.Name, last)
	}
	st.NextScheduleTime = nil
	if c.Spec.Backup.Schedule == "" {
		return nil
	}
	s, err := parseSchedule(c.Spec.Backup.Schedule, now)
	if err != nil {
		return &metav1.Condition{Type: tuskv1alpha1.ConditionScheduledBackups, Status: metav1.ConditionFalse,
			Reason: tuskv1alpha1.ReasonScheduleInvalid, Message: err.Error()}
	}
	st.NextScheduleTime = ptr.To(metav1.NewTime(s.Next(now.UTC())))
	return &metav1.Condition{Type: tuskv1alpha1.ConditionScheduledBackups, Status: metav1.ConditionTrue, Reason: tuskv1alpha1.ReasonScheduled,
		Message: fmt.Sprintf("Backups are taken on the schedule %q (UTC)", c.Spec.Backup.Schedule)}
}

// retentionReport fills retention's part of st and says its condition:
// what res says, or what status said while it is nil.
func retentionReport(c *tuskv1alpha1.PostgresCluster, st *tuskv1alpha1.BackupStatus, res *retentionResult) *metav1.Condition {
	if c.Spec.Backup.Retention == "" {
		st.FirstRecoverabilityPoint, st.LastRetentionTime = nil, nil
		return nil
	}
	if _, err := retention.ParsePeriod(c.Spec.Backup.Retention); err != nil {
		return &metav1.Condition{Type: tuskv1alpha1.ConditionBackupRetention, Status: metav1.ConditionFalse,
			Reason: tuskv1alpha1.ReasonRetentionInvalid, Message: "spec.backup.retention: " + err.Error()}
	}
	if res == nil {
		if old := meta.FindStatusCondition(c.Status.Conditions, tuskv1alpha1.ConditionBackupRetention); old != nil {
			return old.DeepCopy()
		}
		return nil
	}
	if !res.appliedAt.IsZero() {
		st.LastRetentionTime = ptr.To(metav1.NewTime(res.appliedAt.UTC().Truncate(time.Second)))
		st.FirstRecoverabilityPoint = nil
		if !res.firstRecoverability.IsZero() {
			st.FirstRecoverabilityPoint = ptr.To(metav1.NewTime(res.firstRecoverability))
		}
	}
	cond := res.condition()
	return &cond
}

func (r *ClusterReconciler) now() time.Time {
	if r.Config.Clock == nil {
		return time.Now()
	}
	return r.Config.Clock.Now()
}
