package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// Requeue intervals: instance managers report over HTTP, not through the
// API, so Tusk polls them; faster while something is changing.
const (
	pollSettled  = 30 * time.Second
	pollChanging = 2 * time.Second
	pollSpecErr  = time.Minute
	// pollCutover is how often a logical import's cutover is looked at:
	// the source is read-only meanwhile.
	pollCutover = 250 * time.Millisecond
	// leaseExpiryMargin is how long after the old primary's Lease
	// expires, by the operator's clock, the next pass comes.
	leaseExpiryMargin = 100 * time.Millisecond
)

// Config is what the operator's reconcilers need from their deployment.
type Config struct {
	// InstanceManagerImage is the image with the tusk binary that the
	// PostgreSQL pods' init container copies (the operator's own image).
	InstanceManagerImage string
	// PoolerImage is the PgBouncer image the PostgresPoolers' pods run
	// (`tusk pooler`, copied from InstanceManagerImage, supervises it).
	PoolerImage string
	// OperatorNamespace is where the operator's pods run, whom the
	// clusters' NetworkPolicies admit to the instance managers, and where
	// the clusters' private keys are kept (keyStore).
	OperatorNamespace string
	// Clock is the time backup schedules and retention go by: the real
	// clock when nil (tests set a fake one).
	Clock clock.PassiveClock
	// ObjectStoreAddressCheck is asked about every address the operator
	// connects to for an object store (retention):
	// objectstore.RefuseInternalAddresses when nil. Tests whose S3 server
	// listens on loopback allow it.
	ObjectStoreAddressCheck func(netip.Addr) error
	// AnyObjectStorePath lets a cluster archive to, and recover from, an
	// object-store path outside its namespace. Off, every such path must
	// be the namespace or start with "<namespace>/": with one bucket's
	// credentials shared by tenants, nobody then reads or squats another
	// namespace's location.
	AnyObjectStorePath bool
	// RetentionRunTimeout bounds one retention run: an object store that
	// answers slowly, or never stops listing, holds a worker no longer.
	// DefaultRetentionRunTimeout when zero.
	RetentionRunTimeout time.Duration
	// ImportAbandonGrace is how long a deleted cluster whose logical
	// import was not cut over asks its primary to drop the import's slots
	// on the source before it goes without: 2 minutes when zero.
	ImportAbandonGrace time.Duration
}

// ClusterReconciler drives PostgresClusters towards their spec.
type ClusterReconciler struct {
	client.Client
	Config   Config
	Recorder events.EventRecorder
	clients  instanceClients
	leases   *leaseObserver
	diverged firstSeen // replicas behind the primary's timeline
	// changingPrimary notes when each cluster's failover or switchover
	// started, for how long it took (observePrimaryChange).
	changingPrimary firstSeen
	caWarned        lastWarned // clusters whose CA expires soon
	// secrets reads Secrets, the user's with uncached GETs; api reads
	// what the cache does not hold; secretNames watches every Secret by
	// name (see CacheOptions).
	secrets     secretReader
	api         client.Reader
	secretNames secretNameCache
	// keys keeps the private keys of the clusters' CAs and of the
	// operator's certificates, in the operator's namespace.
	keys keyStore
	// results are what the BackupScheduleReconciler's retention did.
	results *retentionResults
}

// +kubebuilder:rbac:groups=tusk.dev,resources=postgresclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=tusk.dev,resources=postgresclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=tusk.dev,resources=postgresclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=tusk.dev,resources=postgresbackups,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;patch;delete;deletecollection
// +kubebuilder:rbac:groups="",resources=services;configmaps;secrets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;delete
// The instance managers' Role grants this; Kubernetes lets only holders grant a right.
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list

// Reconcile moves one PostgresCluster a step towards its spec: get →
// deletion → finalizer → phases → one status write.
func (r *ClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := &tuskv1alpha1.PostgresCluster{}
	if err := r.Get(ctx, req.NamespacedName, c); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, err
		}
		r.clients.forget(req.NamespacedName)
		forgetClusterCounters(req.NamespacedName)
		return ctrl.Result{}, r.forgetKeys(ctx, req.NamespacedName)
	}
	if !c.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, c)
	}
	if !controllerutil.ContainsFinalizer(c, FinalizerCleanup) {
		patch := client.MergeFrom(c.DeepCopy())
		controllerutil.AddFinalizer(c, FinalizerCleanup)
		if err := r.Patch(ctx, c, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("while adding the finalizer: %w", err)
		}
	}
	original := c.DeepCopy()
	result, err := r.reconcilePhases(ctx, c)
	if se, ok := asSpecError(err); ok {
		r.reportSpecError(c, se)
		result, err = ctrl.Result{RequeueAfter: pollSpecErr}, nil
	}
	if !equality.Semantic.DeepEqual(original.Status, c.Status) {
		if perr := ignoreConflict(ctx, r.writeStatus(ctx, c)); perr != nil {
			return ctrl.Result{}, errors.Join(err, perr)
		}
	}
	return result, err
}

// reconcilePhases runs the ordered phases and records progress in status.
func (r *ClusterReconciler) reconcilePhases(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (ctrl.Result, error) {
	if err := r.reconcileBackupStatus(ctx, c); err != nil {
		return ctrl.Result{}, err
	}
	tls, err := r.reconcileTLS(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.reconcileCredentials(ctx, c, tls.ca.CertPEM); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.checkBackupSecrets(ctx, c); err != nil {
		return ctrl.Result{}, err
	}
	recovery, waiting, err := r.reconcileBootstrapSource(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	if waiting {
		return ctrl.Result{RequeueAfter: pollSpecErr}, nil
	}
	servedBy, err := r.reconcileServices(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.reconcileNetworkPolicy(ctx, c); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.reconcilePDBs(ctx, c); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.reconcileProbe(ctx, c, tls); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.reconcileInstanceAccess(ctx, c); err != nil {
		return ctrl.Result{}, err
	}
	ic, err := r.clients.get(client.ObjectKeyFromObject(c), tls.keys, instanceServerName(c))
	if err != nil {
		return ctrl.Result{}, err
	}
	v, err := r.observe(ctx, c, ic)
	if err != nil {
		return ctrl.Result{}, err
	}
	v.recovery = recovery
	p, err := r.reconcileUpgradeOrMembers(ctx, c, v, ic)
	if err == nil {
		err = r.reconcileImport(ctx, c, v, ic)
	}
	if err == nil {
		err = r.recordServedBy(ctx, c, v, ic, servedBy)
	}
	setStatus(c, v, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: nextPass(c, v, p)}, nil
}

// nextPass is when the cluster is looked at again: soon while something
// changes, since the instance managers are polled.
func nextPass(c *tuskv1alpha1.PostgresCluster, v *view, p progress) time.Duration {
	switch {
	case p.failover.underway && p.failover.wait > 0:
		// Promotion waits for the old primary's Lease to expire.
		return min(p.failover.wait+leaseExpiryMargin, pollChanging)
	case cuttingOver(c):
		// Clients wait on the cutover: the Services of the cluster this
		// one takes over from move when it is seen done.
		return pollCutover
	case p.creating || p.scaling || p.switching || p.switched || p.failover.underway || p.rollout.pending || p.upgrading || v.readyCount() < len(v.members):
		return pollChanging
	}
	return pollSettled
}

// reconcileUpgradeOrMembers runs a major upgrade when one owns the
// instances, and reconcileMembers otherwise.
func (r *ClusterReconciler) reconcileUpgradeOrMembers(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) (progress, error) {
	// A major upgrade stops, replaces and brings back instances on its
	// own terms: no failover, scaling or rollout meanwhile.
	upgrading, err := r.reconcileMajorUpgrade(ctx, c, v, ic)
	if err != nil || upgrading {
		return progress{upgrading: upgrading}, err
	}
	return r.reconcileMembers(ctx, c, v, ic)
}

// reconcileMembers creates, heals, scales, configures and updates the
// instances, one kind of step per reconcile.
func (r *ClusterReconciler) reconcileMembers(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) (progress, error) {
	var p progress
	var err error
	if c.Status.CurrentPrimary != "" {
		// Before anything else: a failed primary's pod must not be
		// recreated while a replica can take over.
		if p.failover, err = r.reconcileLeavingPrimary(ctx, c, v, ic); err != nil || p.failover.underway {
			return p, err
		}
	}
	changed, err := r.reconcileInstances(ctx, c, v, ic)
	p.scaling = changed
	p.creating = creatingPrimary(c, v)
	if adopting(c, v) {
		return r.whileAdopting(ctx, c, v, p, err)
	}
	if err != nil || changed {
		return p, err
	}
	// A switchover asked for (kubectl tusk promote) or a target set by
	// hand is checked before any label moves.
	if err := r.reconcileSwitchoverRequests(ctx, c, v); err != nil {
		return p, err
	}
	// Labels first (labelledRole); once a switchover is done the new
	// primary gets the label at once.
	if err := r.reconcileRoleLabels(ctx, c, v); err != nil {
		return p, err
	}
	primaryBefore := c.Status.CurrentPrimary
	if p.switching, err = r.reconcileSwitchover(ctx, c, v, ic); err != nil || p.switching {
		return p, err
	}
	// The instances' reports in v predate a switchover that just
	// completed: status keeps saying SwitchingOver until the next pass
	// sees the new roles.
	p.switched = c.Status.CurrentPrimary != primaryBefore
	if err := r.reconcileRoleLabels(ctx, c, v); err != nil {
		return p, err
	}
	if !p.switched {
		// After a switchover in this pass the old primary's report still
		// says primary: it is not a former primary to demote.
		if err := r.demoteFormerPrimaries(ctx, c, v, ic); err != nil {
			return p, err
		}
		refreshUpstreams(ctx, c, v, ic)
	}
	if err := r.reconcileFencing(ctx, c, v, ic); err != nil {
		return p, err
	}
	if err := r.rewindDivergedReplicas(ctx, c, v, ic); err != nil {
		return p, err
	}
	if err := r.reconcileSecretPropagation(ctx, c, v); err != nil {
		return p, err
	}
	if err := r.reconcileConfig(ctx, c, v, ic); err != nil {
		return p, err
	}
	p.syncDegrade = synchronousDegraded(c, v)
	p.rollout, err = r.reconcileRollout(ctx, c, v, ic)
	return p, err
}

// creatingPrimary says the cluster is being created: until the first
// primary has served once.
func creatingPrimary(c *tuskv1alpha1.PostgresCluster, v *view) bool {
	primary := v.member(c.Status.CurrentPrimary)
	return (primary == nil || !primary.ready()) && stillCreating(c)
}

// whileAdopting ends a pass of a cluster adopting kept volumes: nothing
// else runs before the adoption has a primary, as every other step goes by
// a current primary; the pods need the configuration they mount.
func (r *ClusterReconciler) whileAdopting(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, p progress, err error) (progress, error) {
	p.adopting = adoptionProgress(c, v)
	if err == nil {
		_, err = r.applyConfigMap(ctx, c, v)
	}
	return p, err
}

// reconcileBootstrapSource resolves what a new cluster's first instance
// recovers or clones from, and reports whether the cluster must wait for
// it: then status says so and no pod is created; the PostgresBackup and
// PostgresCluster watches wake it, the requeue is a safety net.
func (r *ClusterReconciler) reconcileBootstrapSource(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (*recoverySource, bool, error) {
	src, wait, err := r.reconcileRecoverySource(ctx, c)
	reason := tuskv1alpha1.ReasonWaitingForBackup
	if err == nil && src == nil && wait == "" {
		src, wait, err = r.reconcileCloneSource(ctx, c)
		reason = tuskv1alpha1.ReasonWaitingForSource
	}
	if err == nil && src == nil && wait == "" {
		src, err = r.reconcileImportSource(ctx, c)
	}
	if err != nil {
		return nil, false, err
	}
	if wait != "" {
		setWaitingForSource(c, reason, wait)
		return nil, true, nil
	}
	return src, false, nil
}

// reportSpecError says in status and in a Warning Event what the user
// must fix.
func (r *ClusterReconciler) reportSpecError(c *tuskv1alpha1.PostgresCluster, se *specError) {
	setSpecError(c, se)
	r.event(c, corev1.EventTypeWarning, se.reason, "Reconcile", "%s", se.message)
}

// event records an Event about obj for users (kubectl describe).
func (r *ClusterReconciler) event(obj runtime.Object, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(obj, nil, eventType, reason, action, note, args...)
	}
}

func ctrlLog(ctx context.Context) logr.Logger { return ctrl.LoggerFrom(ctx) }

func ctrlSetOwner(owner, obj client.Object, s *runtime.Scheme) error {
	return controllerutil.SetControllerReference(owner, obj, s)
}

// clustersReading maps a Secret to the clusters of its namespace that read
// it as the user's. It filters the cached list rather than keeping a field
// index: an index would make the operator's start (and so its leader
// election) wait for the PostgresCluster informer to sync.
func (r *ClusterReconciler) clustersReading(ctx context.Context, o client.Object) []reconcile.Request {
	var list tuskv1alpha1.PostgresClusterList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrlLog(ctx).Error(err, "Listing the clusters that read a Secret", "secret", o.GetName())
		return nil
	}
	var requests []reconcile.Request
	for i := range list.Items {
		if slices.Contains(userSecrets(&list.Items[i]), o.GetName()) {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return requests
}

// clustersOfBackup maps a PostgresBackup to its cluster (whose status
// tells the schedule's last run) and to the clusters recovering from it.
func (r *ClusterReconciler) clustersOfBackup(ctx context.Context, o client.Object) []reconcile.Request {
	return append(requestClusterOfBackup(ctx, o), r.clustersRecoveringFrom(ctx, o)...)
}

// SetupWithManager registers the reconciler with mgr. Volumes have no
// owner (they may outlive the cluster), so they are mapped by label.
func (r *ClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.leases == nil {
		r.leases = newLeaseObserver()
	}
	if r.results == nil {
		r.results = newRetentionResults()
	}
	byLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[LabelCluster]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&tuskv1alpha1.PostgresCluster{}).
		WatchesRawSource(r.secretNames.secretChanges(r.clustersReading)).
		Watches(&tuskv1alpha1.PostgresBackup{}, handler.EnqueueRequestsFromMapFunc(r.clustersOfBackup)).
		WatchesRawSource(r.results.source()).
		Watches(&tuskv1alpha1.PostgresCluster{}, handler.EnqueueRequestsFromMapFunc(r.clustersCloning)).
		Watches(&tuskv1alpha1.PostgresCluster{}, handler.EnqueueRequestsFromMapFunc(r.clustersTakenOver)).
		Owns(&corev1.Pod{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.Secret{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.keys.clusterOf)).
		Owns(&corev1.ConfigMap{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Watches(&corev1.PersistentVolumeClaim{}, byLabel).
		Watches(&coordinationv1.Lease{}, r.leases.handler()).
		Named("postgrescluster").
		Complete(r)
}
