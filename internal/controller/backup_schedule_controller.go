package controller

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
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
// failover. It writes no status: the ClusterReconciler, the one writer of
// a cluster's status, derives what the schedule did from the spec and the
// scheduled PostgresBackups, and reads retention's outcome from results.
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
	// results tell the ClusterReconciler what retention did.
	results *retentionResults
	// retentionTimeout bounds one retention run (Config.RetentionRunTimeout;
	// DefaultRetentionRunTimeout when zero).
	retentionTimeout time.Duration

	mu        sync.Mutex
	retention map[client.ObjectKey]*retentionState
}

// +kubebuilder:rbac:groups=tusk.dev,resources=postgresbackups,verbs=get;list;watch;create;delete

// Reconcile takes the backup the schedule says is due, and runs retention
// when a backup completed or an hour went by.
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
	if c.Spec.Backup == nil {
		r.forgetRetention(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	backups, err := clusterBackups(ctx, r.Client, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.now()
	next, err := r.reconcileSchedule(ctx, c, backups, now)
	retry := r.reconcileRetention(ctx, c, backups, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: r.until(next, retry)}, nil
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

// reconcileSchedule creates the PostgresBackup of the run that is due and
// says when the next is (zero without a valid schedule: the
// ClusterReconciler reports an invalid one). The last run taken is the
// latest of those the scheduled PostgresBackups and status record, so a
// restarted operator neither takes a run again nor more than one
// catch-up.
func (r *BackupScheduleReconciler) reconcileSchedule(ctx context.Context, c *tuskv1alpha1.PostgresCluster, backups []tuskv1alpha1.PostgresBackup, now time.Time) (time.Time, error) {
	if c.Spec.Backup.Schedule == "" {
		return time.Time{}, nil
	}
	s, err := parseSchedule(c.Spec.Backup.Schedule, now)
	if err != nil {
		return time.Time{}, nil
	}
	last, ok := lastScheduledRun(c, backups, now)
	if !ok {
		last = c.CreationTimestamp.Time
	}
	run := nextRuns(s, last, now)
	if !run.due.IsZero() {
		if err := r.createScheduledBackup(ctx, c, run.due); err != nil {
			return time.Time{}, err
		}
	}
	return run.next, nil
}

// createScheduledBackup creates the PostgresBackup of the run at t. It is
// labelled with the cluster but not owned by it: deleting the cluster
// leaves its backups.
func (r *BackupScheduleReconciler) createScheduledBackup(ctx context.Context, c *tuskv1alpha1.PostgresCluster, t time.Time) error {
	b := &tuskv1alpha1.PostgresBackup{
		ObjectMeta: metav1.ObjectMeta{Name: scheduledBackupName(c.Name, t), Namespace: c.Namespace, Labels: clusterLabels(c)},
		Spec:       tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: c.Name}},
	}
	ctrlLog(ctx).Info("Creating a scheduled backup", "backup", b.Name, "scheduledTime", t)
	err := r.Create(ctx, b)
	if apierrors.IsAlreadyExists(err) {
		// This run's backup was created before the cache saw it.
		return nil
	}
	if err != nil {
		return fmt.Errorf("while creating the scheduled backup %s: %w", b.Name, err)
	}
	r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonBackupCreated, "Schedule", "Created PostgresBackup %s for the run at %s", b.Name, t.UTC().Format(time.RFC3339))
	return nil
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
