package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// The private keys of a cluster's CAs, and the operator's client
// certificate and key, are kept in the operator's namespace, one Secret per
// cluster, never in the cluster's own: whoever may read Secrets there (the
// built-in edit role does) could otherwise issue themselves the
// operator's identity and drive the instance managers directly, past every
// check the operator makes (promote a lagging replica, apply a superuser
// role). The cluster's namespace holds certificates only (<cluster>-ca).
// Labels of a keys Secret tie it to its cluster: Secrets cannot be owned
// across namespaces, so it goes when its cluster does by the cluster's
// finalizer (releaseVolumes), or on the pass that finds the cluster gone.
const (
	// LabelClusterNamespace is the namespace of the cluster a keys
	// Secret belongs to (LabelCluster names the cluster).
	LabelClusterNamespace = "tusk.dev/cluster-namespace"
	// LabelClusterUID is the UID of that cluster: a cluster created again
	// under the same name never inherits the keys of the one before.
	LabelClusterUID = "tusk.dev/cluster-uid"
)

// keysSecretName names the keys Secret of the cluster name of namespace,
// in the operator's namespace. A namespace's name has no dot, so the
// first one ends it and no two clusters share a name.
func keysSecretName(namespace, name string) string { return namespace + "." + name + ".keys" }

// keyStore reads and writes the clusters' keys Secrets in the operator's
// namespace.
type keyStore struct {
	secrets secretReader
	// namespace is the operator's.
	namespace string
}

// of is the keys Secret of c; nil when it has none, or when the one of
// its name belongs to an earlier cluster of that name.
func (k keyStore) of(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (*corev1.Secret, error) {
	s, err := k.secrets.get(ctx, k.namespace, keysSecretName(c.Namespace, c.Name))
	if err != nil || s == nil || s.Labels[LabelClusterUID] != string(c.UID) {
		return nil, err
	}
	return s, nil
}

// write makes c's keys Secret hold data, and returns it as written.
func (k keyStore) write(ctx context.Context, w objectApplier, c *tuskv1alpha1.PostgresCluster, data map[string][]byte) (*corev1.Secret, error) {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: k.namespace, Name: keysSecretName(c.Namespace, c.Name), Labels: map[string]string{
			LabelCluster: c.Name, LabelClusterNamespace: c.Namespace, LabelClusterUID: string(c.UID),
		}},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	hash, err := hashOf(s)
	if err != nil {
		return nil, err
	}
	setAnnotation(s, AnnotationHash, hash)
	existing := &corev1.Secret{}
	created, err := w.getOrCreate(ctx, s, existing)
	if err != nil || created || existing.Annotations[AnnotationHash] == hash {
		return s, err
	}
	// Only the operator and the cluster administrators write Secrets in
	// the operator's namespace: one of this name is the cluster's, or an
	// earlier cluster's of the same name, replaced.
	s.ResourceVersion = existing.ResourceVersion
	if err := w.Update(ctx, s); err != nil {
		return nil, fmt.Errorf("while updating the keys Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return s, nil
}

// remove deletes the keys Secret of the cluster name of namespace.
func (k keyStore) remove(ctx context.Context, w client.Writer, namespace, name string) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: k.namespace, Name: keysSecretName(namespace, name)}}
	if err := w.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("while deleting the keys Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// clusterOf maps a keys Secret to its cluster, so that a deleted or
// changed one is made good at once.
func (k keyStore) clusterOf(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if o.GetNamespace() != k.namespace || l[LabelClusterNamespace] == "" || o.GetName() != keysSecretName(l[LabelClusterNamespace], l[LabelCluster]) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[LabelClusterNamespace], Name: l[LabelCluster]}}}
}

// isKeysSecret says whether m is, by where it is and its name, a keys
// Secret: the cache keeps those whole (trimSecretsAndConfigMaps).
func isKeysSecret(m *metav1.ObjectMeta, operatorNamespace string) bool {
	return operatorNamespace != "" && m.Namespace == operatorNamespace && m.Labels[LabelClusterNamespace] != "" &&
		m.Name == keysSecretName(m.Labels[LabelClusterNamespace], m.Labels[LabelCluster])
}

// instanceClientFor is the client of c's instance managers, presenting
// the operator's certificate from c's keys Secret; nil (and no error)
// while c has none yet.
func instanceClientFor(ctx context.Context, keys keyStore, clients *instanceClients, c *tuskv1alpha1.PostgresCluster) (*instanceClient, error) {
	s, err := keys.of(ctx, c)
	if err != nil || s == nil {
		return nil, err
	}
	return clients.get(client.ObjectKeyFromObject(c), s, instanceServerName(c))
}

// legacyKeys are the keys an earlier Tusk kept in the cluster's own
// <cluster>-ca, to be moved to the operator's namespace: only for a
// cluster that has made instances (status, which only the operator
// writes, says so), whose instances and clients trust those CAs. A new
// cluster's <cluster>-ca is never read for keys: a tenant could have put
// there a CA whose key they know.
func (r *ClusterReconciler) legacyKeys(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (map[string][]byte, error) {
	if c.Status.LastInstanceSerial == 0 {
		return nil, nil
	}
	s, err := r.secrets.get(ctx, c.Namespace, caSecretName(c))
	if err != nil || s == nil || !metav1.IsControlledBy(s, c) {
		return nil, err
	}
	if len(s.Data[keyCAKey]) == 0 && len(s.Data[keyClientCAKey]) == 0 {
		return nil, nil
	}
	return s.Data, nil
}

// forgetKeys deletes the keys Secret of a cluster the cache no longer
// holds, once the API server confirms it is gone: its finalizer deletes
// them (releaseVolumes) unless someone removed the finalizer first. A
// cluster the cache lags behind on, or of a namespace this operator does
// not watch, keeps them.
func (r *ClusterReconciler) forgetKeys(ctx context.Context, cluster types.NamespacedName) error {
	err := r.api.Get(ctx, cluster, &tuskv1alpha1.PostgresCluster{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	return r.keys.remove(ctx, r.Client, cluster.Namespace, cluster.Name)
}
