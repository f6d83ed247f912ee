package controller

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// How often retention runs without a new backup, and how long it waits
// after a failure.
const (
	retentionInterval       = time.Hour
	retentionRetryAfterFail = 5 * time.Minute
)

// BackupScheduleReconciler creates a cluster's scheduled PostgresBackups
// and applies its retention to the object store. It is apart from the
// ClusterReconciler so that a slow or unreachable store never delays a
// failover; it writes only status.backup and its own two conditions.
type BackupScheduleReconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Clock is the time schedules and retention go by (the real clock
	// when nil).
	Clock clock.PassiveClock
	// secrets reads the object store's keys (the user's Secrets).
	secrets secretReader
	// storeAddressCheck refuses the object store addresses the operator
	// must not reach (Config.ObjectStoreAddressCheck).
	storeAddressCheck func(netip.Addr) error

	mu        sync.Mutex
	retention map[client.ObjectKey]*retentionState
}

// +kubebuilder:rbac:groups=tusk.dev,resources=postgresbackups,verbs=get;list;watch;create;delete

// Reconcile takes the backup the schedule says is due, runs retention
// when a backup completed or an hour went by, and writes status.backup.
func (r *BackupScheduleReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := &tuskv1alpha1.PostgresCluster{}
	if err := r.Get(ctx, req.NamespacedName, c); err != nil {
		if apierrors.IsNotFound(err) {
			r.forgetRetention(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !c.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	original := c.DeepCopy()
	var wake []time.Time
	var err error
	if c.Spec.Backup == nil {
		c.Status.Backup = nil
		meta.RemoveStatusCondition(&c.Status.Conditions, tuskv1alpha1.ConditionScheduledBackups)
		meta.RemoveStatusCondition(&c.Status.Conditions, tuskv1alpha1.ConditionBackupRetention)
	} else {
		if c.Status.Backup == nil {
			c.Status.Backup = &tuskv1alpha1.BackupStatus{}
		}
		now := r.now()
		var next time.Time
		next, err = r.reconcileSchedule(ctx, c, now)
		wake = append(wake, next, r.reconcileRetention(ctx, c, now))
		if *c.Status.Backup == (tuskv1alpha1.BackupStatus{}) {
			c.Status.Backup = nil
		}
	}
	if perr := r.patchStatus(ctx, original, c); perr != nil {
		return ctrl.Result{}, perr
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: r.until(wake...)}, nil
}

func (r *BackupScheduleReconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

// until is how long until the earliest of times (zero ones ignored); 0,
// no requeue, when all are zero.
func (r *BackupScheduleReconciler) until(times ...time.Time) time.Duration {
	var first time.Time
	for _, t := range times {
		if !t.IsZero() && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	if first.IsZero() {
		return 0
	}
	return max(first.Sub(r.now()), time.Second)
}

// patchStatus writes status.backup and the conditions with an optimistic
// lock: the conditions list is replaced as a whole by a merge patch, so
// one written on an old copy could drop the ClusterReconciler's latest.
// When the ClusterReconciler wrote in between (a conflict), what this
// reconciler decided is put on the newer copy and written again: the
// decision stands (a retention run is not repeated for a status write).
func (r *BackupScheduleReconciler) patchStatus(ctx context.Context, original, c *tuskv1alpha1.PostgresCluster) error {
	if equality.Semantic.DeepEqual(original.Status, c.Status) {
		return nil
	}
	err := r.Status().Patch(ctx, c, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsConflict(err) {
		err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			return r.patchOwnStatusOnto(ctx, c)
		})
	}
	if err != nil {
		return fmt.Errorf("while updating the backup status of %s: %w", client.ObjectKeyFromObject(c), err)
	}
	return nil
}

// patchOwnStatusOnto copies what this reconciler owns in c's status
// (status.backup, the ScheduledBackups and BackupRetention conditions)
// onto the cluster as it is now, and writes it.
func (r *BackupScheduleReconciler) patchOwnStatusOnto(ctx context.Context, c *tuskv1alpha1.PostgresCluster) error {
	fresh := &tuskv1alpha1.PostgresCluster{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(c), fresh); err != nil {
		return err
	}
	before := fresh.DeepCopy()
	fresh.Status.Backup = c.Status.Backup.DeepCopy()
	for _, typ := range []string{tuskv1alpha1.ConditionScheduledBackups, tuskv1alpha1.ConditionBackupRetention} {
		if cond := meta.FindStatusCondition(c.Status.Conditions, typ); cond != nil {
			meta.SetStatusCondition(&fresh.Status.Conditions, *cond)
		} else {
			meta.RemoveStatusCondition(&fresh.Status.Conditions, typ)
		}
	}
	if equality.Semantic.DeepEqual(before.Status, fresh.Status) {
		return nil
	}
	return r.Status().Patch(ctx, fresh, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

// reconcileSchedule creates the PostgresBackup of the run that is due and
// says when the next is (zero without a valid schedule).
func (r *BackupScheduleReconciler) reconcileSchedule(ctx context.Context, c *tuskv1alpha1.PostgresCluster, now time.Time) (time.Time, error) {
	st := c.Status.Backup
	if c.Spec.Backup.Schedule == "" {
		st.NextScheduleTime = nil
		meta.RemoveStatusCondition(&c.Status.Conditions, tuskv1alpha1.ConditionScheduledBackups)
		return time.Time{}, nil
	}
	s, err := parseSchedule(c.Spec.Backup.Schedule, now)
	if err != nil {
		st.NextScheduleTime = nil
		r.setCondition(c, tuskv1alpha1.ConditionScheduledBackups, metav1.ConditionFalse, tuskv1alpha1.ReasonScheduleInvalid, err.Error())
		return time.Time{}, nil
	}
	last := c.CreationTimestamp.Time
	if st.LastScheduleTime != nil {
		last = st.LastScheduleTime.Time
	}
	run := nextRuns(s, last, now)
	if !run.due.IsZero() {
		name, err := r.createScheduledBackup(ctx, c, run.due)
		if err != nil {
			return time.Time{}, err
		}
		st.LastScheduleTime = ptr.To(metav1.NewTime(run.due))
		st.LastScheduledBackup = name
	}
	st.NextScheduleTime = ptr.To(metav1.NewTime(run.next))
	r.setCondition(c, tuskv1alpha1.ConditionScheduledBackups, metav1.ConditionTrue, tuskv1alpha1.ReasonScheduled,
		fmt.Sprintf("Backups are taken on the schedule %q (UTC)", c.Spec.Backup.Schedule))
	return run.next, nil
}

// createScheduledBackup creates the PostgresBackup of the run at t. It is
// labelled with the cluster but not owned by it: deleting the cluster
// leaves its backups.
func (r *BackupScheduleReconciler) createScheduledBackup(ctx context.Context, c *tuskv1alpha1.PostgresCluster, t time.Time) (string, error) {
	b := &tuskv1alpha1.PostgresBackup{
		ObjectMeta: metav1.ObjectMeta{Name: scheduledBackupName(c.Name, t), Namespace: c.Namespace, Labels: clusterLabels(c)},
		Spec:       tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: c.Name}},
	}
	ctrlLog(ctx).Info("Creating a scheduled backup", "backup", b.Name, "scheduledTime", t)
	err := r.Create(ctx, b)
	if apierrors.IsAlreadyExists(err) {
		// This run's backup was created before its status was recorded.
		return b.Name, nil
	}
	if err != nil {
		return "", fmt.Errorf("while creating the scheduled backup %s: %w", b.Name, err)
	}
	r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonBackupCreated, "Schedule", "Created PostgresBackup %s for the run at %s", b.Name, t.UTC().Format(time.RFC3339))
	return b.Name, nil
}

// setCondition sets one of this reconciler's conditions, and records an
// Event when its reason or message changes to a failure.
func (r *BackupScheduleReconciler) setCondition(c *tuskv1alpha1.PostgresCluster, typ string, status metav1.ConditionStatus, reason, message string) {
	old := meta.FindStatusCondition(c.Status.Conditions, typ)
	if status == metav1.ConditionFalse && (old == nil || old.Reason != reason || old.Message != message) {
		r.event(c, corev1.EventTypeWarning, reason, "Backup", "%s", message)
	}
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: c.Generation,
	})
}

func (r *BackupScheduleReconciler) event(obj *tuskv1alpha1.PostgresCluster, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(obj, nil, eventType, reason, action, note, args...)
	}
}

// requestClusterOfBackup maps a PostgresBackup to its cluster.
func requestClusterOfBackup(_ context.Context, o client.Object) []reconcile.Request {
	b, ok := o.(*tuskv1alpha1.PostgresBackup)
	if !ok || b.Spec.Cluster.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.Cluster.Name}}}
}

// SetupWithManager registers the reconciler with mgr.
func (r *BackupScheduleReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&tuskv1alpha1.PostgresCluster{}).
		Watches(&tuskv1alpha1.PostgresBackup{}, handler.EnqueueRequestsFromMapFunc(requestClusterOfBackup)).
		Named("backupschedule").
		Complete(r)
}
