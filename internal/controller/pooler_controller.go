package controller

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/pki"
	"tusk.dev/tusk/internal/pooler"
)

// poolerWaitForCluster is when a pooler whose cluster has no certificates
// yet is looked at again (the cluster's changes also wake it).
const poolerWaitForCluster = 15 * time.Second

// poolerResync is when a settled pooler is looked at again: its
// certificates are renewed a month before they expire, and the cluster's
// changes (a new CA) wake it anyway.
const poolerResync = time.Hour

// PoolerStatusOwner is the field manager of a PostgresPooler's status.
const PoolerStatusOwner = "tusk-pooler-status"

// PoolerReconciler runs the PgBouncer pods of PostgresPoolers: it refuses
// what cannot work, issues the pooler's certificates from its cluster's
// CAs, applies the objects pooler_objects.go builds, and reports the
// StatefulSet's readiness.
type PoolerReconciler struct {
	client.Client
	Config   Config
	Recorder events.EventRecorder
	api      client.Reader
	secrets  secretReader
	keys     keyStore
}

// +kubebuilder:rbac:groups=tusk.dev,resources=postgrespoolers,verbs=get;list;watch
// +kubebuilder:rbac:groups=tusk.dev,resources=postgrespoolers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=tusk.dev,resources=postgrespoolers/finalizers,verbs=update
// +kubebuilder:rbac:groups=tusk.dev,resources=postgresclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=configmaps;secrets;services,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile moves one PostgresPooler a step: get → cluster → refusals →
// certificates and objects → status.
func (r *PoolerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &tuskv1alpha1.PostgresPooler{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil || !p.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	original := p.DeepCopy()
	result := ctrl.Result{RequeueAfter: poolerResync}
	err := r.reconcilePooler(ctx, p)
	if se, ok := asSpecError(err); ok {
		r.refuse(p, se)
		err, result = nil, ctrl.Result{}
		if se.reason == tuskv1alpha1.ReasonWaitingForCluster {
			result.RequeueAfter = poolerWaitForCluster
		}
	}
	if err == nil {
		p.Status.ObservedGeneration = p.Generation
	}
	if werr := ignoreConflict(ctx, r.writeStatus(ctx, original, p)); werr != nil && err == nil {
		err = werr
	}
	return result, err
}

func (r *PoolerReconciler) reconcilePooler(ctx context.Context, p *tuskv1alpha1.PostgresPooler) error {
	c, err := r.cluster(ctx, p)
	if err != nil {
		return err
	}
	if err := r.refusals(ctx, p, c); err != nil {
		return err
	}
	if err := r.refuseForeignObjects(ctx, p); err != nil {
		return err
	}
	inputs, err := r.applyInputs(ctx, p, c)
	if err != nil {
		return err
	}
	sts := poolerStatefulSet(p, r.Config.PoolerImage, r.Config.InstanceManagerImage, inputs)
	if err := r.applyObjects(ctx, p, sts); err != nil {
		return err
	}
	r.announce(p)
	settled, err := r.observe(ctx, p)
	if err != nil || !settled {
		return err
	}
	// An earlier Tusk ran the pods as a Deployment of p's name: it goes
	// once the StatefulSet's pods are all ready, so clients always have
	// pods to go to.
	return r.deleteOwned(ctx, p, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}})
}

// cluster is p's PostgresCluster; a spec error while it does not exist
// (the PostgresCluster watch wakes p when it appears).
func (r *PoolerReconciler) cluster(ctx context.Context, p *tuskv1alpha1.PostgresPooler) (*tuskv1alpha1.PostgresCluster, error) {
	c := &tuskv1alpha1.PostgresCluster{}
	err := r.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.Cluster.Name}, c)
	if apierrors.IsNotFound(err) {
		return nil, userError(tuskv1alpha1.ReasonClusterNotFound, "the PostgresCluster %s does not exist in namespace %s; "+
			"the pooler is created when it is", p.Spec.Cluster.Name, p.Namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("while reading the PostgresCluster %s: %w", p.Spec.Cluster.Name, err)
	}
	return c, nil
}

// refusals are the specs that cannot work, each with what to do instead.
func (r *PoolerReconciler) refusals(ctx context.Context, p *tuskv1alpha1.PostgresPooler, c *tuskv1alpha1.PostgresCluster) error {
	if p.Spec.Type == tuskv1alpha1.PoolerTypeRO && c.Spec.Instances < 2 {
		return userError(tuskv1alpha1.ReasonNoReplicas, "type ro sends clients to the replicas of the PostgresCluster %s (Service %s), "+
			"and it has one instance, so none: set type rw, or give the cluster 2 instances or more", c.Name, roServiceName(c))
	}
	var clusters tuskv1alpha1.PostgresClusterList
	if err := r.List(ctx, &clusters, client.InNamespace(p.Namespace)); err != nil {
		return fmt.Errorf("while listing the PostgresClusters of namespace %s: %w", p.Namespace, err)
	}
	for i := range clusters.Items {
		if msg := poolerNameCollision(p, clusters.Items[i].Name); msg != "" {
			return userError(tuskv1alpha1.ReasonNameCollision, "%s", msg)
		}
	}
	return nil
}

// refuseForeignObjects refuses p, before anything is made, while an object
// of a name it needs exists that p does not control: applyOwned would
// refuse it too, but only after making the objects applied before it. The
// objects are read from the API server (the cache holds only Tusk's), so
// only until p's StatefulSet is there. (A Deployment of p's name is not
// one of them: an earlier Tusk's, p's own, is deleted once the
// StatefulSet is ready; anyone else's is left alone.)
func (r *PoolerReconciler) refuseForeignObjects(ctx context.Context, p *tuskv1alpha1.PostgresPooler) error {
	sts := &appsv1.StatefulSet{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, sts); err == nil && metav1.IsControlledBy(sts, p) {
		return nil
	}
	objects := []client.Object{&appsv1.StatefulSet{}, &corev1.Service{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{},
		&corev1.ConfigMap{}, &corev1.Secret{}, &corev1.Secret{}}
	names := []string{p.Name, p.Name, poolerPeersServiceName(p), p.Name, poolerConfigMapName(p), poolerTLSSecretName(p),
		poolerAuthSecretName(p)}
	for i, o := range objects {
		err := r.api.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: names[i]}, o)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("while reading %s %s: %w", objectKind(o), names[i], err)
		}
		if !metav1.IsControlledBy(o, p) {
			return userError(tuskv1alpha1.ReasonObjectNotOwned, "%s %s/%s exists and %s does not control it: Tusk does not take over "+
				"objects it did not create; rename or delete it (it was left untouched)", objectKind(o), p.Namespace, names[i], p.Name)
		}
	}
	return nil
}

// clusterObjectNames are the names of the Services, ConfigMaps, Secrets
// and other namespaced objects a PostgresCluster named cluster makes.
func clusterObjectNames(cluster string) []string {
	names := []string{cluster}
	for _, suffix := range []string{"-rw", "-ro", "-r", "-primary", "-replicas", "-config", "-ca", "-server", "-replication",
		"-superuser", "-app", "-probe", "-probe-tls", "-instance"} {
		names = append(names, cluster+suffix)
	}
	return names
}

// poolerNameCollision says which of p's objects would take a name the
// PostgresCluster cluster uses, or "" when none would.
func poolerNameCollision(p *tuskv1alpha1.PostgresPooler, cluster string) string {
	taken := clusterObjectNames(cluster)
	for _, name := range poolerObjectNames(p) {
		if slices.Contains(taken, name) {
			return fmt.Sprintf("the pooler's objects would be named %s, a name the PostgresCluster %s uses for its own objects: "+
				"give the PostgresPooler another name (such as %s-pooler)", name, cluster, p.Spec.Cluster.Name)
		}
	}
	return ""
}

// applyInputs keeps what p's pods read: the configuration and the two
// certificate Secrets. It returns their hash, which rolls the pods when
// any changes.
func (r *PoolerReconciler) applyInputs(ctx context.Context, p *tuskv1alpha1.PostgresPooler, c *tuskv1alpha1.PostgresCluster) (string, error) {
	cm, err := poolerConfigMap(p)
	if err != nil {
		return "", userError(tuskv1alpha1.ReasonInvalidParameters, "%s", err.Error())
	}
	server, auth, err := r.poolerCertificates(ctx, p, c)
	if err != nil {
		return "", err
	}
	w := objectApplier{Client: r.Client, api: r.api}
	for _, o := range []client.Object{cm, server, auth} {
		if err := w.applyOwned(ctx, p, o); err != nil {
			return "", err
		}
	}
	return hashOf([]any{cm.Data, server.Data, auth.Data})
}

// applyObjects applies p's StatefulSet, its Services (clients', and the
// headless one that names each pod for the others) and disruption budget
// (for two pods or more: with one, a budget would block every drain).
func (r *PoolerReconciler) applyObjects(ctx context.Context, p *tuskv1alpha1.PostgresPooler, sts *appsv1.StatefulSet) error {
	w := objectApplier{Client: r.Client, api: r.api}
	for _, o := range []client.Object{poolerPeersService(p), sts, poolerService(p)} {
		if err := w.applyOwned(ctx, p, o); err != nil {
			return err
		}
	}
	pdb := poolerPDB(p)
	if p.Spec.Instances < 2 {
		return r.deleteOwned(ctx, p, pdb)
	}
	return w.applyOwned(ctx, p, pdb)
}

// deleteOwned deletes obj when p controls it: the budget of a pooler
// scaled to one pod, the Deployment an earlier Tusk ran the pods with.
func (r *PoolerReconciler) deleteOwned(ctx context.Context, p *tuskv1alpha1.PostgresPooler, obj client.Object) error {
	err := r.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("while reading %s %s: %w", objectKind(obj), obj.GetName(), err)
	}
	if !metav1.IsControlledBy(obj, p) {
		return nil
	}
	if err := r.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("while deleting %s %s: %w", objectKind(obj), obj.GetName(), err)
	}
	return nil
}

// poolerCertificates are p's server certificate Secret (for its Service's
// names and localhost, from the cluster's server CA, with that CA and the
// client CA) and its auth role's client certificate Secret (from the
// client CA, the only one the cluster's servers trust client certificates
// from), each kept while valid and renewed like the cluster's own.
func (r *PoolerReconciler) poolerCertificates(ctx context.Context, p *tuskv1alpha1.PostgresPooler, c *tuskv1alpha1.PostgresCluster) (server, auth *corev1.Secret, err error) {
	serverCA, clientCA, err := r.clusterCAs(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	names := poolerDNSNames(p)
	existing, err := r.secrets.data(ctx, p.Namespace, poolerTLSSecretName(p))
	if err != nil {
		return nil, nil, err
	}
	skp, err := keepOrIssue(existing, keyTLSCert, keyTLSKey, serverCA, names, func() (pki.KeyPair, error) {
		return pki.IssueServer(serverCA, p.Name, names, []net.IP{net.IPv4(127, 0, 0, 1)}, leafValidity, time.Now())
	})
	if err != nil {
		return nil, nil, fmt.Errorf("while issuing the server certificate of pooler %s: %w", p.Name, err)
	}
	existing, err = r.secrets.data(ctx, p.Namespace, poolerAuthSecretName(p))
	if err != nil {
		return nil, nil, err
	}
	akp, err := keepOrIssue(existing, keyTLSCert, keyTLSKey, clientCA, nil, func() (pki.KeyPair, error) {
		return pki.IssueClient(clientCA, pooler.AuthRole, leafValidity, time.Now())
	})
	if err != nil {
		return nil, nil, fmt.Errorf("while issuing the auth role's certificate of pooler %s: %w", p.Name, err)
	}
	server = poolerSecret(p, poolerTLSSecretName(p), map[string][]byte{keyTLSCert: skp.CertPEM, keyTLSKey: skp.KeyPEM,
		keyCACert: serverCA.CertPEM, keyPoolerClientCA: clientCA.CertPEM})
	auth = poolerSecret(p, poolerAuthSecretName(p), map[string][]byte{keyTLSCert: akp.CertPEM, keyTLSKey: akp.KeyPEM})
	return server, auth, nil
}

func poolerSecret(p *tuskv1alpha1.PostgresPooler, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: poolerObjectMeta(p, name), Type: corev1.SecretTypeTLS, Data: data}
}

// poolerDNSNames are the names clients reach p's Service by, and
// localhost (the manager's own calls).
func poolerDNSNames(p *tuskv1alpha1.PostgresPooler) []string {
	svc := p.Name + "." + p.Namespace + ".svc"
	return []string{p.Name, p.Name + "." + p.Namespace, svc, svc + ".cluster.local", "localhost"}
}

// clusterCAs are c's server CA and client CA with their keys: from its
// keys Secret, and the server CA from spec.tls.caSecret when it names the
// user's. A cluster without them yet is waited for.
func (r *PoolerReconciler) clusterCAs(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (pki.KeyPair, pki.KeyPair, error) {
	keys, err := r.keys.of(ctx, c)
	if err != nil {
		return pki.KeyPair{}, pki.KeyPair{}, err
	}
	_, clientCA := roleCertificateCAs(c, secretData(keys))
	serverCA := pki.KeyPair{CertPEM: secretData(keys)[keyCACert], KeyPEM: secretData(keys)[keyCAKey]}
	if name := userCASecret(c); name != "" {
		data, err := r.secrets.data(ctx, c.Namespace, name)
		if err != nil {
			return pki.KeyPair{}, pki.KeyPair{}, err
		}
		serverCA = pki.KeyPair{CertPEM: data[keyCACert], KeyPEM: data[keyCAKey]}
	}
	if len(serverCA.KeyPEM) == 0 || len(clientCA.KeyPEM) == 0 {
		return pki.KeyPair{}, pki.KeyPair{}, userError(tuskv1alpha1.ReasonWaitingForCluster,
			"the PostgresCluster %s has no certificates yet to issue the pooler's from", c.Name)
	}
	return serverCA, clientCA, nil
}

// observe reports p's StatefulSet: the pods it has and those ready, for
// the scale subresource, and Ready; settled when every pod of the current
// spec is ready.
func (r *PoolerReconciler) observe(ctx context.Context, p *tuskv1alpha1.PostgresPooler) (settled bool, err error) {
	sts := &appsv1.StatefulSet{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, sts); client.IgnoreNotFound(err) != nil {
		return false, fmt.Errorf("while reading the StatefulSet %s: %w", p.Name, err)
	}
	st := &p.Status
	st.Instances, st.ReadyInstances = sts.Status.Replicas, sts.Status.ReadyReplicas
	st.Selector = metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: poolerSelector(p)})
	settled = sts.Generation != 0 && sts.Status.ObservedGeneration >= sts.Generation &&
		sts.Status.UpdatedReplicas == p.Spec.Instances && sts.Status.Replicas == p.Spec.Instances &&
		sts.Status.ReadyReplicas == p.Spec.Instances
	if settled {
		setPoolerReady(p, metav1.ConditionTrue, tuskv1alpha1.ReasonPoolerReady,
			fmt.Sprintf("%d of %d PgBouncer pods ready", st.ReadyInstances, p.Spec.Instances))
		return true, nil
	}
	setPoolerReady(p, metav1.ConditionFalse, tuskv1alpha1.ReasonPodsNotReady,
		fmt.Sprintf("%d of %d PgBouncer pods ready (%d exist, %d of the current spec)", st.ReadyInstances, p.Spec.Instances,
			sts.Status.Replicas, sts.Status.UpdatedReplicas))
	return false, nil
}

// refuse reports a spec error: Ready False with its reason and message,
// and a Warning Event when the reason is new.
func (r *PoolerReconciler) refuse(p *tuskv1alpha1.PostgresPooler, se *specError) {
	if cond := meta.FindStatusCondition(p.Status.Conditions, tuskv1alpha1.ConditionReady); cond == nil || cond.Reason != se.reason || cond.Message != se.message {
		kind := corev1.EventTypeWarning
		if se.reason == tuskv1alpha1.ReasonWaitingForCluster {
			kind = corev1.EventTypeNormal
		}
		r.event(p, kind, se.reason, "%s", se.message)
	}
	setPoolerReady(p, metav1.ConditionFalse, se.reason, se.message)
}

// announce tells, once per generation, that p's objects were applied.
func (r *PoolerReconciler) announce(p *tuskv1alpha1.PostgresPooler) {
	switch p.Status.ObservedGeneration {
	case p.Generation:
	case 0:
		r.event(p, corev1.EventTypeNormal, tuskv1alpha1.ReasonPoolerCreated,
			"Created the pooler's StatefulSet, Services and certificates for the PostgresCluster %s", p.Spec.Cluster.Name)
	default:
		r.event(p, corev1.EventTypeNormal, tuskv1alpha1.ReasonPoolerUpdated, "Applied generation %d of the spec", p.Generation)
	}
}

func setPoolerReady(p *tuskv1alpha1.PostgresPooler, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: tuskv1alpha1.ConditionReady, Status: status,
		Reason: reason, Message: message, ObservedGeneration: p.Generation})
}

func (r *PoolerReconciler) event(p *tuskv1alpha1.PostgresPooler, eventType, reason, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(p, nil, eventType, reason, "Pooler", note, args...)
	}
}

func (r *PoolerReconciler) writeStatus(ctx context.Context, original, p *tuskv1alpha1.PostgresPooler) error {
	if equality.Semantic.DeepEqual(original.Status, p.Status) {
		return nil
	}
	patch := client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})
	if err := r.Status().Patch(ctx, p, patch, client.FieldOwner(PoolerStatusOwner)); err != nil {
		return fmt.Errorf("while writing the status of %s: %w", client.ObjectKeyFromObject(p), err)
	}
	return nil
}

// poolersOfCluster maps a PostgresCluster to the poolers of its namespace:
// one of them may wait for it, or collide with its name.
func (r *PoolerReconciler) poolersOfCluster(ctx context.Context, o client.Object) []reconcile.Request {
	var list tuskv1alpha1.PostgresPoolerList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrlLog(ctx).Error(err, "Listing the poolers of a cluster", "cluster", o.GetName())
		return nil
	}
	requests := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return requests
}

// SetupWithManager registers the reconciler with mgr.
func (r *PoolerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&tuskv1alpha1.PostgresPooler{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Secret{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Watches(&tuskv1alpha1.PostgresCluster{}, handler.EnqueueRequestsFromMapFunc(r.poolersOfCluster)).
		Named("postgrespooler").
		Complete(r)
}
