package controller

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// cloneTLSMount is where a cloning first instance mounts the source
// cluster's replication client certificate and CA.
const cloneTLSMount = "/etc/tusk/tls/clone-source"

// clonePending says the cluster bootstraps as a clone and its first
// primary has not served yet.
func clonePending(c *tuskv1alpha1.PostgresCluster) bool {
	return c.Spec.Bootstrap != nil && c.Spec.Bootstrap.Clone != nil && stillCreating(c)
}

// resolveClone decides whether the source cluster (nil when it does not
// exist) can be cloned now: it returns a reason to wait (missing, not
// Ready) or a spec error (the cluster itself).
func resolveClone(c, source *tuskv1alpha1.PostgresCluster) (*recoverySource, string, error) {
	name := c.Spec.Bootstrap.Clone.Cluster
	switch {
	case name == c.Name:
		return nil, "", userError(tuskv1alpha1.ReasonCloneSourceInvalid, "spec.bootstrap.clone.cluster names this cluster itself: clone another cluster")
	case source == nil:
		return nil, fmt.Sprintf("Waiting for the PostgresCluster %s named by spec.bootstrap.clone.cluster: it does not exist", name), nil
	case !meta.IsStatusConditionTrue(source.Status.Conditions, tuskv1alpha1.ConditionReady):
		return nil, fmt.Sprintf("Waiting for the PostgresCluster %s named by spec.bootstrap.clone.cluster to be Ready", name), nil
	case archivesTogether(c, source):
		return nil, "", userError(tuskv1alpha1.ReasonCloneSourceInvalid, "refusing to clone %s: this cluster's spec.backup location is the one %s archives to, "+
			"and two clusters archiving there would mix their WAL; give spec.backup.objectStore another path", name, name)
	}
	return &recoverySource{clone: source}, "", nil
}

// archivesTogether says whether both clusters archive to one location.
func archivesTogether(c, source *tuskv1alpha1.PostgresCluster) bool {
	if c.Spec.Backup == nil || source.Spec.Backup == nil {
		return false
	}
	theirs := source.Spec.Backup.ObjectStore
	theirs.Path = archivePath(source)
	return sameLocation(c.Spec.Backup.ObjectStore, archivePath(c), theirs)
}

// reconcileCloneSource resolves the source of a pending clone.
func (r *ClusterReconciler) reconcileCloneSource(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (*recoverySource, string, error) {
	if !clonePending(c) {
		return nil, "", nil
	}
	source := &tuskv1alpha1.PostgresCluster{}
	err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Spec.Bootstrap.Clone.Cluster}, source)
	if apierrors.IsNotFound(err) {
		source = nil
	} else if err != nil {
		return nil, "", fmt.Errorf("while reading the PostgresCluster %s to clone: %w", c.Spec.Bootstrap.Clone.Cluster, err)
	}
	return resolveClone(c, source)
}

// cloneArgs tell the first instance's manager which cluster to copy.
func cloneArgs(source *tuskv1alpha1.PostgresCluster) []string {
	return []string{
		"--clone-host=" + rwServiceName(source),
		"--clone-port=" + strconv.Itoa(postgresPort),
		"--clone-tls-dir=" + cloneTLSMount,
	}
}

// withClone adds the clone source to a primary's pod: the flags and the
// source's replication client certificate with its CA.
func withClone(pod *corev1.Pod, source *tuskv1alpha1.PostgresCluster) {
	pod.Spec.Volumes = append(pod.Spec.Volumes, secretItemsVolume("clone-source-tls", replicationSecretName(source),
		corev1.KeyToPath{Key: "tls.crt", Path: "tls.crt"}, corev1.KeyToPath{Key: "tls.key", Path: "tls.key"},
		corev1.KeyToPath{Key: keyCACert, Path: keyCACert}))
	ctr := &pod.Spec.Containers[0]
	ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "clone-source-tls", MountPath: cloneTLSMount, ReadOnly: true})
	ctr.Command = append(ctr.Command, cloneArgs(source)...)
}

// clustersCloning maps a PostgresCluster to the clusters of its namespace
// that wait to clone it.
func (r *ClusterReconciler) clustersCloning(ctx context.Context, o client.Object) []reconcile.Request {
	var list tuskv1alpha1.PostgresClusterList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrlLog(ctx).Error(err, "Listing the clusters that clone a cluster", "cluster", o.GetName())
		return nil
	}
	var requests []reconcile.Request
	for i := range list.Items {
		c := &list.Items[i]
		if clonePending(c) && c.Spec.Bootstrap.Clone.Cluster == o.GetName() {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)})
		}
	}
	return requests
}
