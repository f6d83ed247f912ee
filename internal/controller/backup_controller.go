package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// How often a backup is looked at while it runs, and while it waits for a
// ready instance.
const (
	backupPoll         = 5 * time.Second
	backupWaitInstance = 15 * time.Second
	backupCallTimeout  = 15 * time.Second
	// walSwitchFollowUp is when a backup is looked at again after the
	// primary was asked to switch WAL for it: it completes within seconds.
	walSwitchFollowUp = 2 * time.Second
	// backupTurnRetry is when a backup whose cluster's turn was taken is
	// looked at again: as often as a running backup, so that many backups
	// of a cluster whose passes are slow cost little while they wait.
	backupTurnRetry = backupPoll
)

// BackupReconciler takes the base backups PostgresBackups ask for: it
// chooses an instance, asks its instance manager to take the backup, and
// follows it to Completed or Failed.
type BackupReconciler struct {
	client.Client
	Recorder events.EventRecorder
	clients  instanceClients
	// keys holds the operator's certificate for each cluster.
	keys keyStore

	// started are the backups this operator started and has not seen end,
	// by cluster: the cache may not show a Running status written a moment
	// ago, and one cluster takes one backup at a time.
	mu      sync.Mutex
	started map[types.NamespacedName]startedBackup
	// walSwitchAsked is when the primary was last asked to switch WAL for
	// a running backup, by backup (see walSwitchTarget).
	walSwitchAsked map[types.NamespacedName]time.Time
	// turns lets one pass per cluster run at a time.
	turns clusterTurns
}

// clusterTurns lets one pass per cluster run at a time: "one base backup
// of a cluster at a time" is a check (otherRunning) then an act
// (startOn, markStarted) on two backups of the same cluster, which two
// workers could otherwise interleave. A pass that finds its cluster's
// turn taken does not wait for it: a cluster with many backups, whose
// instance managers do not answer, holds one worker, not all.
type clusterTurns struct {
	mu   sync.Mutex
	busy map[types.NamespacedName]bool
}

// take takes cluster's turn, and says whether it was free.
func (t *clusterTurns) take(cluster types.NamespacedName) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.busy[cluster] {
		return false
	}
	if t.busy == nil {
		t.busy = map[types.NamespacedName]bool{}
	}
	t.busy[cluster] = true
	return true
}

// give gives cluster's turn back.
func (t *clusterTurns) give(cluster types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.busy, cluster)
}

// startedBackup is a backup this operator asked an instance to take.
type startedBackup struct{ name, instance string }

// +kubebuilder:rbac:groups=tusk.dev,resources=postgresbackups,verbs=get;list;watch
// +kubebuilder:rbac:groups=tusk.dev,resources=postgresbackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=tusk.dev,resources=postgresclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods;persistentvolumeclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile moves one PostgresBackup a step: get → ended? → find the
// cluster → start or follow the backup → one status write.
func (r *BackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &tuskv1alpha1.PostgresBackup{}
	if err := r.Get(ctx, req.NamespacedName, b); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName) // deleted, perhaps while running
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if backupEnded(b) {
		return ctrl.Result{}, nil
	}
	if !r.turns.take(clusterOfBackup(b)) {
		return ctrl.Result{RequeueAfter: backupTurnRetry}, nil
	}
	defer r.turns.give(clusterOfBackup(b))
	original := b.DeepCopy()
	result, err := r.reconcileBackup(ctx, b)
	if backupEnded(b) {
		r.ended(b)
	}
	if perr := ignoreConflict(ctx, r.writeStatus(ctx, original, b)); perr != nil {
		return ctrl.Result{}, errors.Join(err, perr)
	}
	return result, err
}

func backupEnded(b *tuskv1alpha1.PostgresBackup) bool {
	return b.Status.Phase == tuskv1alpha1.BackupPhaseCompleted || b.Status.Phase == tuskv1alpha1.BackupPhaseFailed
}

func (r *BackupReconciler) reconcileBackup(ctx context.Context, b *tuskv1alpha1.PostgresBackup) (ctrl.Result, error) {
	c := &tuskv1alpha1.PostgresCluster{}
	err := r.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.Cluster.Name}, c)
	if apierrors.IsNotFound(err) {
		if b.Status.Phase == tuskv1alpha1.BackupPhaseRunning {
			r.fail(b, tuskv1alpha1.ReasonBackupFailed, fmt.Sprintf("the PostgresCluster %s was deleted during the backup", b.Spec.Cluster.Name))
			return ctrl.Result{}, nil
		}
		r.waitForCluster(b)
		return ctrl.Result{}, nil // the PostgresCluster watch wakes it
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("while reading the PostgresCluster %s: %w", b.Spec.Cluster.Name, err)
	}
	if b.Status.Phase == tuskv1alpha1.BackupPhaseRunning {
		return r.follow(ctx, b, c)
	}
	return r.start(ctx, b, c)
}

// waitForCluster keeps the backup Pending until its cluster exists.
func (r *BackupReconciler) waitForCluster(b *tuskv1alpha1.PostgresBackup) {
	b.Status.Phase = tuskv1alpha1.BackupPhasePending
	msg := fmt.Sprintf("the PostgresCluster %s does not exist in namespace %s; the backup starts when it is created",
		b.Spec.Cluster.Name, b.Namespace)
	if cond := meta.FindStatusCondition(b.Status.Conditions, tuskv1alpha1.ConditionReady); cond == nil || cond.Reason != tuskv1alpha1.ReasonClusterNotFound {
		r.event(b, corev1.EventTypeWarning, tuskv1alpha1.ReasonClusterNotFound, "%s", msg)
	}
	setBackupCondition(b, metav1.ConditionFalse, tuskv1alpha1.ReasonClusterNotFound, msg)
}

// waitForInstance keeps the backup Pending until an instance can take it.
func (r *BackupReconciler) waitForInstance(b *tuskv1alpha1.PostgresBackup, why string) (ctrl.Result, error) {
	b.Status.Phase = tuskv1alpha1.BackupPhasePending
	setBackupCondition(b, metav1.ConditionFalse, tuskv1alpha1.ReasonWaitingForInstance, why)
	return ctrl.Result{RequeueAfter: backupWaitInstance}, nil
}

// start refuses what cannot be backed up, chooses the instance and asks
// its instance manager to take the backup.
func (r *BackupReconciler) start(ctx context.Context, b *tuskv1alpha1.PostgresBackup, c *tuskv1alpha1.PostgresCluster) (ctrl.Result, error) {
	if c.Spec.Backup == nil {
		r.fail(b, tuskv1alpha1.ReasonBackupNotConfigured, fmt.Sprintf("the PostgresCluster %s has no spec.backup: set spec.backup.objectStore "+
			"to archive its WAL and take base backups, then create the PostgresBackup again", c.Name))
		return ctrl.Result{}, nil
	}
	other, err := r.otherRunning(ctx, b)
	if err != nil {
		return ctrl.Result{}, err
	}
	if other != "" {
		r.fail(b, tuskv1alpha1.ReasonBackupAlreadyRunning, fmt.Sprintf("backup %s of the PostgresCluster %s is already running: Tusk takes one "+
			"base backup of a cluster at a time; create this one again once %s has ended", other, c.Name, other))
		return ctrl.Result{}, nil
	}
	ic, v, err := r.observe(ctx, c)
	if err != nil || ic == nil {
		return r.waitForInstance(b, "waiting for the cluster's certificates: "+errString(err, "the CA Secret does not exist yet"))
	}
	target := backupTarget(b, c)
	name := r.startedOn(b)
	if name == "" {
		name = chooseBackupInstance(target, backupCandidates(c, v))
	}
	if m := v.member(name); m == nil || m.pod == nil || m.status == nil {
		name = ""
	}
	if name == "" {
		return r.waitForInstance(b, fmt.Sprintf("waiting for a ready instance to back up (target %s)", target))
	}
	return r.startOn(ctx, b, c, ic, v.member(name))
}

func errString(err error, otherwise string) string {
	if err != nil {
		return err.Error()
	}
	return otherwise
}

// startOn asks m's instance manager for the backup. A repeated request
// (the answer to the first was lost) reports the same backup.
func (r *BackupReconciler) startOn(ctx context.Context, b *tuskv1alpha1.PostgresBackup, c *tuskv1alpha1.PostgresCluster,
	ic *instanceClient, m *member) (ctrl.Result, error) {
	callCtx, cancel := context.WithTimeout(ctx, backupCallTimeout)
	defer cancel()
	rep, err := ic.startBackup(callCtx, m.pod, b.Name)
	if code, apiErr := apiErrorCode(err); code == http.StatusConflict || code == http.StatusBadRequest {
		r.fail(b, tuskv1alpha1.ReasonBackupFailed, fmt.Sprintf("instance %s refused the backup: %s", m.name, apiErr.message()))
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("while starting the backup on %s: %w", m.name, err)
	}
	r.markStarted(b, m.name)
	role := "replica"
	if m.status.Role == instanceapi.RolePrimary {
		role = "primary"
	}
	st := &b.Status
	st.Phase, st.Instance = tuskv1alpha1.BackupPhaseRunning, m.name
	st.StartedAt = ptrTime(time.Now())
	st.ObjectStore = c.Spec.Backup.ObjectStore.DeepCopy()
	st.ObjectStore.Path = archivePath(c) // the default resolved: it may change, the backup's place does not
	st.Location = backupLocation(c, b.Name)
	if rep.Location != "" {
		st.Location = rep.Location
	}
	msg := fmt.Sprintf("taking a base backup of %s on instance %s (%s) to %s", c.Name, m.name, role, st.Location)
	setBackupCondition(b, metav1.ConditionFalse, tuskv1alpha1.ReasonBackupRunning, msg)
	r.event(b, corev1.EventTypeNormal, tuskv1alpha1.ReasonBackupStarted, "Taking a base backup of %s on instance %s (%s)", c.Name, m.name, role)
	ctrlLog(ctx).Info("Started a base backup", "cluster", c.Name, "instance", m.name, "role", role)
	return ctrl.Result{RequeueAfter: backupPoll}, nil
}

// follow asks the instance that takes the backup how it goes. When its
// manager restarted it no longer knows the backup: it looks for the
// backup's record in the store, and answers 404 when the backup did not
// complete. When the instance is gone, the others look in the store.
func (r *BackupReconciler) follow(ctx context.Context, b *tuskv1alpha1.PostgresBackup, c *tuskv1alpha1.PostgresCluster) (ctrl.Result, error) {
	ic, v, err := r.observe(ctx, c)
	if err != nil || ic == nil {
		ctrlLog(ctx).Info("Cannot reach the instances to follow the backup", "error", errString(err, "no CA Secret"))
		return ctrl.Result{RequeueAfter: backupPoll}, nil
	}
	var own *backupAnswer
	var others []backupAnswer
	if m := v.member(b.Status.Instance); m != nil && m.pod != nil && m.pod.DeletionTimestamp == nil {
		own = ptr.To(r.askBackup(ctx, ic, m, b.Name))
	} else {
		for _, m := range v.members {
			if m.status != nil && m.name != b.Status.Instance {
				others = append(others, r.askBackup(ctx, ic, m, b.Name))
			}
		}
	}
	action, rep := decideFollow(own, others)
	switch action {
	case followReport:
		result := r.report(ctx, b, c, rep)
		if r.askWALSwitch(ctx, b, c, ic, v, rep) {
			result.RequeueAfter = walSwitchFollowUp
		}
		return result, nil
	case followRestarted:
		r.fail(b, tuskv1alpha1.ReasonBackupFailed, fmt.Sprintf("the instance manager of %s restarted during the backup, which did not complete "+
			"(the object store has no record of it); create a new PostgresBackup", b.Status.Instance))
		return ctrl.Result{}, nil
	case followInstanceGone:
		r.fail(b, tuskv1alpha1.ReasonBackupFailed, fmt.Sprintf("instance %s was deleted during the backup, which did not complete "+
			"(the object store has no record of it); create a new PostgresBackup", b.Status.Instance))
		return ctrl.Result{}, nil
	}
	if own != nil && own.err != nil {
		ctrlLog(ctx).Info("Asking about the backup", "instance", b.Status.Instance, "error", own.err.Error())
	}
	return ctrl.Result{RequeueAfter: backupPoll}, nil
}

func (r *BackupReconciler) askBackup(ctx context.Context, ic *instanceClient, m *member, name string) backupAnswer {
	ctx, cancel := context.WithTimeout(ctx, backupCallTimeout)
	defer cancel()
	rep, err := ic.backupStatus(ctx, m.pod, name)
	code, _ := apiErrorCode(err)
	return backupAnswer{rep: rep, notFound: code == http.StatusNotFound, err: err}
}

// report records the instance manager's report of a running backup.
func (r *BackupReconciler) report(ctx context.Context, b *tuskv1alpha1.PostgresBackup, c *tuskv1alpha1.PostgresCluster,
	rep instanceapi.BackupStatus) ctrl.Result {
	switch applyBackupReport(b, rep, time.Now()) {
	case backupSucceeded:
		st := b.Status
		msg := fmt.Sprintf("base backup of %s completed on instance %s: WAL %s to %s on timeline %d, %d bytes at %s",
			c.Name, st.Instance, st.BeginLSN, st.EndLSN, st.Timeline, st.SizeBytes, st.Location)
		setBackupCondition(b, metav1.ConditionTrue, tuskv1alpha1.ReasonBackupCompleted, msg)
		r.event(b, corev1.EventTypeNormal, tuskv1alpha1.ReasonBackupCompleted, "%s", msg)
		ctrlLog(ctx).Info("Base backup completed", "instance", st.Instance, "endLSN", st.EndLSN, "sizeBytes", st.SizeBytes)
		observeBackupEnd(b)
		return ctrl.Result{}
	case backupFailedOnInstance:
		r.event(b, corev1.EventTypeWarning, tuskv1alpha1.ReasonBackupFailed, "%s", b.Status.Error)
		observeBackupEnd(b)
		return ctrl.Result{}
	}
	msg := fmt.Sprintf("taking a base backup of %s on instance %s", c.Name, b.Status.Instance)
	if rep.WaitingForWAL != "" {
		msg += fmt.Sprintf("; waiting for the primary to archive WAL segment %s, the backup's last (the primary is asked to switch WAL)",
			rep.WaitingForWAL)
	}
	setBackupCondition(b, metav1.ConditionFalse, tuskv1alpha1.ReasonBackupRunning, msg)
	return ctrl.Result{RequeueAfter: backupPoll}
}

// askWALSwitch asks the primary to switch WAL when the backup waits for
// its last segment to be archived (see walSwitchTarget), and says whether
// it did. A failed request is logged and tried again after
// walSwitchInterval; the backup's own wait bounds the whole.
func (r *BackupReconciler) askWALSwitch(ctx context.Context, b *tuskv1alpha1.PostgresBackup, c *tuskv1alpha1.PostgresCluster,
	ic *instanceClient, v *view, rep instanceapi.BackupStatus) bool {
	key := client.ObjectKeyFromObject(b)
	now := time.Now()
	r.mu.Lock()
	name := walSwitchTarget(rep, c.Status.CurrentPrimary, v, r.walSwitchAsked[key], now)
	if name != "" {
		if r.walSwitchAsked == nil {
			r.walSwitchAsked = map[types.NamespacedName]time.Time{}
		}
		r.walSwitchAsked[key] = now
	}
	r.mu.Unlock()
	if name == "" {
		return false
	}
	callCtx, cancel := context.WithTimeout(ctx, backupCallTimeout)
	defer cancel()
	res, err := ic.switchWAL(callCtx, v.member(name).pod)
	if err != nil {
		ctrlLog(ctx).Info("Asking the primary to switch WAL for a standby's backup", "primary", name,
			"segment", rep.WaitingForWAL, "error", err.Error())
		return false
	}
	ctrlLog(ctx).Info("Asked the primary to switch WAL for a standby's backup", "primary", name,
		"segment", rep.WaitingForWAL, "switchedAt", res.LSN, "completed", res.Segment, "throttled", res.Throttled)
	return true
}

// fail marks the backup Failed, with a Warning Event.
func (r *BackupReconciler) fail(b *tuskv1alpha1.PostgresBackup, reason, message string) {
	failBackup(b, reason, message, time.Now())
	r.event(b, corev1.EventTypeWarning, tuskv1alpha1.ReasonBackupFailed, "%s", message)
	observeBackupEnd(b)
}

// observe reads the cluster's instances: nil client (and no error) while
// it has no keys Secret yet.
func (r *BackupReconciler) observe(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (*instanceClient, *view, error) {
	ic, err := instanceClientFor(ctx, r.keys, &r.clients, c)
	if err != nil || ic == nil {
		return nil, nil, err
	}
	v, err := observeCluster(ctx, r.Client, c, ic)
	return ic, v, err
}

// otherRunning names another Running backup of the same cluster, from the
// cache or from what this operator started.
func (r *BackupReconciler) otherRunning(ctx context.Context, b *tuskv1alpha1.PostgresBackup) (string, error) {
	var list tuskv1alpha1.PostgresBackupList
	if err := r.List(ctx, &list, client.InNamespace(b.Namespace)); err != nil {
		return "", fmt.Errorf("while listing the backups: %w", err)
	}
	if other := otherRunningBackup(b, list.Items); other != "" {
		return other, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if other := r.started[clusterOfBackup(b)].name; other != "" && other != b.Name {
		for i := range list.Items {
			if o := &list.Items[i]; o.Name == other && !backupEnded(o) {
				return other, nil
			}
		}
	}
	return "", nil
}

func clusterOfBackup(b *tuskv1alpha1.PostgresBackup) types.NamespacedName {
	return types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.Cluster.Name}
}

func (r *BackupReconciler) markStarted(b *tuskv1alpha1.PostgresBackup, instance string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started == nil {
		r.started = map[types.NamespacedName]startedBackup{}
	}
	r.started[clusterOfBackup(b)] = startedBackup{name: b.Name, instance: instance}
}

// startedOn is the instance this operator asked for backup b, when its
// Running status was not written (or not seen yet): asking it again
// reports the same backup instead of starting a second one elsewhere.
func (r *BackupReconciler) startedOn(b *tuskv1alpha1.PostgresBackup) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.started[clusterOfBackup(b)]; s.name == b.Name {
		return s.instance
	}
	return ""
}

func (r *BackupReconciler) ended(b *tuskv1alpha1.PostgresBackup) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started[clusterOfBackup(b)].name == b.Name {
		delete(r.started, clusterOfBackup(b))
	}
	delete(r.walSwitchAsked, client.ObjectKeyFromObject(b))
}

// forget drops what this operator remembers of a deleted backup.
func (r *BackupReconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.walSwitchAsked, key)
	for cluster, s := range r.started {
		if cluster.Namespace == key.Namespace && s.name == key.Name {
			delete(r.started, cluster)
		}
	}
}

func (r *BackupReconciler) event(b *tuskv1alpha1.PostgresBackup, eventType, reason, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(b, nil, eventType, reason, "Backup", note, args...)
	}
}

// backupsOfCluster maps a PostgresCluster to its backups that have not
// ended: one waiting for the cluster to exist starts when it does.
func (r *BackupReconciler) backupsOfCluster(ctx context.Context, o client.Object) []reconcile.Request {
	var list tuskv1alpha1.PostgresBackupList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrlLog(ctx).Error(err, "Listing the backups of a cluster", "cluster", o.GetName())
		return nil
	}
	var requests []reconcile.Request
	for i := range list.Items {
		if b := &list.Items[i]; b.Spec.Cluster.Name == o.GetName() && !backupEnded(b) {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(b)})
		}
	}
	return requests
}

// SetupWithManager registers the reconciler with mgr, with the manager's
// workers: one pass per cluster at a time (clusterTurns).
func (r *BackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&tuskv1alpha1.PostgresBackup{}).
		Watches(&tuskv1alpha1.PostgresCluster{}, handler.EnqueueRequestsFromMapFunc(r.backupsOfCluster)).
		Named("postgresbackup").
		Complete(r)
}
