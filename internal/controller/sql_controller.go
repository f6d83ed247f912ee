package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// SQLStatusOwner is the field manager of the declarative SQL objects'
// status: their SQLReconciler's writeStatus is its only writer.
const SQLStatusOwner = "tusk-sql-status"

// FinalizerSQL holds a declarative SQL object whose deletion drops what it
// made (a database with reclaimPolicy delete, a publication, a
// subscription) until the primary dropped it.
const FinalizerSQL = "tusk.dev/sql-object"

// How often an applied object is applied again, which puts back what was
// changed by hand; how soon after a wait for the primary, and after a
// refusal (the world may change: an owner role created meanwhile).
const (
	sqlResync       = 5 * time.Minute
	sqlWaitPrimary  = 5 * time.Second
	sqlRetryRefused = 30 * time.Second
	sqlCallTimeout  = 60 * time.Second
	sqlObserveEvery = time.Minute
)

// SQLReconciler applies one kind of declarative SQL object (kind) through
// the primary's instance manager: get → cluster → finalizer → deleting?
// → name conflict → build the request → apply on the primary → one
// status write. The instance manager compares and changes the catalogs;
// the operator runs no SQL.
type SQLReconciler struct {
	client.Client
	Recorder    events.EventRecorder
	kind        sqlKind
	secrets     secretReader
	secretNames secretNameCache
	// api reads what the cache does not hold (objectApplier).
	api     client.Reader
	clients instanceClients
	// keys holds the operator's certificate for each cluster.
	keys keyStore
}

// sqlApply is the outcome of one attempt to apply an object.
type sqlApply struct {
	result  instanceapi.ApplyResult
	reason  string // a condition reason; ReasonApplied on success
	message string
	retry   time.Duration
}

// +kubebuilder:rbac:groups=tusk.dev,resources=postgresroles;postgresdatabases;postgrespublications;postgressubscriptions,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=tusk.dev,resources=postgresroles/status;postgresdatabases/status;postgrespublications/status;postgressubscriptions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=tusk.dev,resources=postgresroles/finalizers;postgresdatabases/finalizers;postgrespublications/finalizers;postgressubscriptions/finalizers,verbs=update

// Reconcile applies one object.
func (r *SQLReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	o := r.kind.newObject()
	if err := r.Get(ctx, req.NamespacedName, o); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	original := o.DeepCopyObject().(client.Object)
	outcome, err := r.reconcileObject(ctx, o)
	if err != nil {
		return ctrl.Result{}, err
	}
	if outcome == nil { // the finalizer went: the object is gone
		return ctrl.Result{}, nil
	}
	r.record(o, *outcome)
	if err := ignoreConflict(ctx, r.writeStatus(ctx, original, o)); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: outcome.retry}, nil
}

func (r *SQLReconciler) reconcileObject(ctx context.Context, o client.Object) (*sqlApply, error) {
	c := &tuskv1alpha1.PostgresCluster{}
	err := r.Get(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: r.kind.cluster(o)}, c)
	if apierrors.IsNotFound(err) {
		if !o.GetDeletionTimestamp().IsZero() {
			// The cluster and its data are gone; nothing is left to drop.
			return nil, r.removeFinalizer(ctx, o)
		}
		return &sqlApply{reason: tuskv1alpha1.ReasonWaitingForPrimary,
			message: fmt.Sprintf("the PostgresCluster %s does not exist in namespace %s", r.kind.cluster(o), o.GetNamespace())}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("while reading the PostgresCluster %s: %w", r.kind.cluster(o), err)
	}
	if !o.GetDeletionTimestamp().IsZero() {
		if !c.DeletionTimestamp.IsZero() {
			// The cluster goes too (a namespace deleted, say): its primary
			// will not come back to drop anything.
			return nil, r.removeFinalizer(ctx, o)
		}
		return r.delete(ctx, o, c)
	}
	if err := r.syncFinalizer(ctx, o); err != nil {
		return nil, err
	}
	if older, err := r.olderNamesake(ctx, o); err != nil || older != "" {
		return &sqlApply{reason: tuskv1alpha1.ReasonNameConflict, message: fmt.Sprintf("%s %s already manages %q in the PostgresCluster %s; "+
			"only the oldest object of a name is applied", r.kind.name, older, r.kind.sqlName(o), c.Name), retry: sqlRetryRefused}, err
	}
	body, err := r.kind.request(ctx, r, o, c)
	if err != nil {
		if invalid, ok := errors.AsType[*sqlSpecError](err); ok {
			return &sqlApply{reason: invalid.reason, message: invalid.msg, retry: sqlRetryRefused}, nil
		}
		return nil, err
	}
	outcome := r.apply(ctx, c, body)
	if r.kind.afterApply != nil {
		if err := r.kind.afterApply(ctx, r, o, c, &outcome); err != nil {
			return nil, err
		}
	}
	if r.kind.observe != nil && outcome.reason == tuskv1alpha1.ReasonApplied {
		r.kind.observe(ctx, r, o, c)
		// A slot fills pg_wal in minutes under a bulk load: look often.
		outcome.retry = min(outcome.retry, sqlObserveEvery)
	}
	return &outcome, nil
}

// delete drops what the object made, when its kind and spec say so, then
// lets the object go.
func (r *SQLReconciler) delete(ctx context.Context, o client.Object, c *tuskv1alpha1.PostgresCluster) (*sqlApply, error) {
	if !controllerutil.ContainsFinalizer(o, FinalizerSQL) {
		return nil, nil
	}
	body, err := r.kind.drop(ctx, r, o, c)
	if err != nil {
		return nil, err
	}
	outcome := r.apply(ctx, c, body)
	if outcome.reason != tuskv1alpha1.ReasonApplied {
		// Kept, saying why: a drop refused (sessions open, a publisher
		// unreachable) holds the object until the spec or the world changes.
		return &outcome, nil
	}
	if outcome.result.Statements > 0 {
		r.Recorder.Eventf(o, nil, corev1.EventTypeNormal, tuskv1alpha1.ReasonSQLChanged, "Delete", "%s", strings.Join(outcome.result.Changes, "; "))
	}
	return nil, r.removeFinalizer(ctx, o)
}

// syncFinalizer keeps the finalizer exactly while deleting the object
// should drop something.
func (r *SQLReconciler) syncFinalizer(ctx context.Context, o client.Object) error {
	want := r.kind.dropsOnDelete(o)
	if want == controllerutil.ContainsFinalizer(o, FinalizerSQL) {
		return nil
	}
	patch := client.MergeFromWithOptions(o.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	if want {
		controllerutil.AddFinalizer(o, FinalizerSQL)
	} else {
		controllerutil.RemoveFinalizer(o, FinalizerSQL)
	}
	if err := r.Patch(ctx, o, patch); err != nil {
		return fmt.Errorf("while updating the finalizer of %s: %w", o.GetName(), err)
	}
	return nil
}

func (r *SQLReconciler) removeFinalizer(ctx context.Context, o client.Object) error {
	if !controllerutil.ContainsFinalizer(o, FinalizerSQL) {
		return nil
	}
	patch := client.MergeFromWithOptions(o.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(o, FinalizerSQL)
	if err := r.Patch(ctx, o, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("while removing the finalizer of %s: %w", o.GetName(), err)
	}
	return nil
}

// olderNamesake names an older object of the same kind that manages the
// same PostgreSQL name in the same cluster, if any: two objects applying
// one role would undo each other.
func (r *SQLReconciler) olderNamesake(ctx context.Context, o client.Object) (string, error) {
	list := r.kind.newList()
	if err := r.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		return "", fmt.Errorf("while listing the %ss: %w", r.kind.name, err)
	}
	var older string
	err := meta.EachListItem(list, func(item runtimeObject) error {
		other := item.(client.Object)
		if other.GetUID() == o.GetUID() || r.kind.cluster(other) != r.kind.cluster(o) || r.kind.sqlName(other) != r.kind.sqlName(o) {
			return nil
		}
		if olderThan(other, o) {
			older = other.GetName()
		}
		return nil
	})
	return older, err
}

// olderThan orders objects by creation, then name.
func olderThan(a, b client.Object) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.GetName() < b.GetName()
}

// apply sends body to the cluster's primary and says what came of it.
func (r *SQLReconciler) apply(ctx context.Context, c *tuskv1alpha1.PostgresCluster, body any) sqlApply {
	pod, why, err := r.primaryPod(ctx, c)
	if err != nil || pod == nil {
		return sqlApply{reason: tuskv1alpha1.ReasonWaitingForPrimary, message: errString(err, why), retry: sqlWaitPrimary}
	}
	ic, err := r.instanceClient(ctx, c)
	if err != nil || ic == nil {
		return sqlApply{reason: tuskv1alpha1.ReasonWaitingForPrimary, message: "waiting for the cluster's certificates: " + errString(err, "the CA Secret does not exist yet"), retry: sqlWaitPrimary}
	}
	callCtx, cancel := context.WithTimeout(ctx, sqlCallTimeout)
	defer cancel()
	var res instanceapi.ApplyResult
	err = ic.call(callCtx, pod, http.MethodPut, r.kind.path, body, &res)
	return applyOutcome(pod.Name, res, err)
}

// applyOutcome is what the primary's answer to an apply (res, or err)
// means for the object: a refusal is told and retried slowly, a primary
// busy or not writable is waited for, anything else failed.
func applyOutcome(pod string, res instanceapi.ApplyResult, err error) sqlApply {
	code, apiErr := apiErrorCode(err)
	switch {
	case err == nil:
		return sqlApply{result: res, reason: tuskv1alpha1.ReasonApplied, message: appliedMessage(pod, res), retry: sqlResync}
	case code == http.StatusUnprocessableEntity:
		return sqlApply{reason: tuskv1alpha1.ReasonApplyRefused, message: apiErr.message(), retry: sqlRetryRefused}
	case code == http.StatusLocked:
		return sqlApply{reason: tuskv1alpha1.ReasonApplyBusy, message: fmt.Sprintf("the primary %s is busy, Tusk tries again: %s", pod, apiErr.message()), retry: sqlWaitPrimary}
	case code == http.StatusConflict || code == http.StatusServiceUnavailable || code == 0:
		return sqlApply{reason: tuskv1alpha1.ReasonWaitingForPrimary, message: fmt.Sprintf("waiting for the primary %s: %s", pod, errMessage(err, apiErr)), retry: sqlWaitPrimary}
	default:
		return sqlApply{reason: tuskv1alpha1.ReasonApplyFailed, message: errMessage(err, apiErr), retry: sqlRetryRefused}
	}
}

func errMessage(err error, apiErr *instanceAPIError) string {
	if apiErr != nil {
		return apiErr.message()
	}
	return err.Error()
}

func appliedMessage(pod string, res instanceapi.ApplyResult) string {
	if res.Statements == 0 {
		return fmt.Sprintf("the catalogs of the primary %s match the spec", pod)
	}
	return fmt.Sprintf("applied on the primary %s: %s", pod, strings.Join(res.Changes, "; "))
}

// primaryPod is the pod of the cluster's primary when there is one to
// send SQL to; otherwise why not. A cluster failing or switching over has
// a target primary other than its current one: objects wait for it.
func (r *SQLReconciler) primaryPod(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (*corev1.Pod, string, error) {
	current, target := c.Status.CurrentPrimary, c.Status.TargetPrimary
	switch {
	case current == "":
		return nil, fmt.Sprintf("the PostgresCluster %s has no primary yet", c.Name), nil
	case target != "" && target != current:
		return nil, fmt.Sprintf("the PostgresCluster %s is changing its primary from %s to %s", c.Name, current, target), nil
	}
	pod := &corev1.Pod{}
	err := r.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: current}, pod)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Sprintf("the primary's pod %s does not exist", current), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("while reading the primary's pod %s: %w", current, err)
	}
	if !pod.DeletionTimestamp.IsZero() || pod.Status.PodIP == "" {
		return nil, fmt.Sprintf("the primary's pod %s is not running", current), nil
	}
	return pod, "", nil
}

func (r *SQLReconciler) instanceClient(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (*instanceClient, error) {
	return instanceClientFor(ctx, r.keys, &r.clients, c)
}

// record sets the object's conditions from the outcome, and tells of a
// change, or of a new reason for not applying, with an Event.
func (r *SQLReconciler) record(o client.Object, outcome sqlApply) {
	st := r.kind.status(o)
	st.ObservedGeneration = o.GetGeneration()
	status := metav1.ConditionFalse
	if outcome.reason == tuskv1alpha1.ReasonApplied {
		status = metav1.ConditionTrue
		st.Exists = outcome.result.Exists
	}
	previous := meta.FindStatusCondition(st.Conditions, tuskv1alpha1.ConditionApplied)
	if outcome.result.Statements > 0 {
		now := metav1.Now()
		st.LastAppliedAt, st.LastChanges = &now, outcome.result.Changes
		r.Recorder.Eventf(o, nil, corev1.EventTypeNormal, tuskv1alpha1.ReasonSQLChanged, "Apply", "%s", outcome.message)
	} else if status == metav1.ConditionFalse && (previous == nil || previous.Reason != outcome.reason || previous.Message != outcome.message) {
		r.Recorder.Eventf(o, nil, corev1.EventTypeWarning, outcome.reason, "Apply", "%s", outcome.message)
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: tuskv1alpha1.ConditionApplied, Status: status,
		Reason: outcome.reason, Message: outcome.message, ObservedGeneration: o.GetGeneration()})
	ready := metav1.Condition{Type: tuskv1alpha1.ConditionReady, Status: status, Reason: outcome.reason,
		Message: outcome.message, ObservedGeneration: o.GetGeneration()}
	if lag := meta.FindStatusCondition(st.Conditions, tuskv1alpha1.ConditionSlotLagging); status == metav1.ConditionTrue &&
		lag != nil && lag.Status == metav1.ConditionTrue {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, lag.Reason, lag.Message
	}
	meta.SetStatusCondition(&st.Conditions, ready)
}

// writeStatus is the one write of the object's status: a merge patch
// from what was read, under SQLStatusOwner, skipped when nothing changed.
func (r *SQLReconciler) writeStatus(ctx context.Context, original, o client.Object) error {
	if equality.Semantic.DeepEqual(r.kind.status(original), r.kind.status(o)) {
		return nil
	}
	patch := client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})
	if err := r.Status().Patch(ctx, o, patch, client.FieldOwner(SQLStatusOwner)); err != nil {
		return fmt.Errorf("while writing the status of %s %s: %w", r.kind.name, client.ObjectKeyFromObject(o), err)
	}
	return nil
}

// SetupWithManager watches the kind, the clusters (a new primary gets
// every object applied), and the Secrets the objects name.
func (r *SQLReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(r.kind.newObject()).
		Owns(&corev1.Secret{}). // a role's certificate
		Watches(&tuskv1alpha1.PostgresCluster{}, handler.EnqueueRequestsFromMapFunc(r.objectsOfCluster)).
		WatchesRawSource(r.secretNames.secretChanges(r.objectsReading)).
		Named(strings.ToLower(r.kind.name)).
		Complete(r)
}

// objectsOfCluster wakes the objects of a cluster whose primary changed.
func (r *SQLReconciler) objectsOfCluster(ctx context.Context, o client.Object) []reconcile.Request {
	return r.objectsWhere(ctx, o.GetNamespace(), func(item client.Object) bool {
		return r.kind.cluster(item) == o.GetName() || r.kind.sourceCluster(item) == o.GetName()
	})
}

// objectsReading wakes the objects that name a Secret that changed.
func (r *SQLReconciler) objectsReading(ctx context.Context, secret client.Object) []reconcile.Request {
	return r.objectsWhere(ctx, secret.GetNamespace(), func(item client.Object) bool {
		for _, name := range r.kind.secrets(item) {
			if name == secret.GetName() {
				return true
			}
		}
		return false
	})
}

func (r *SQLReconciler) objectsWhere(ctx context.Context, namespace string, match func(client.Object) bool) []reconcile.Request {
	list := r.kind.newList()
	if err := r.List(ctx, list, client.InNamespace(namespace)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing objects to wake failed", "kind", r.kind.name)
		return nil
	}
	var requests []reconcile.Request
	_ = meta.EachListItem(list, func(item runtimeObject) error {
		if o := item.(client.Object); match(o) {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		}
		return nil
	})
	return requests
}
