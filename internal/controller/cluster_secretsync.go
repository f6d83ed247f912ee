package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// AnnotationSecretsHash on a pod is the hash of the Secrets it mounts. The
// kubelet refreshes a pod's Secret volumes when it syncs the pod, which any
// change of the pod triggers at once and its periodic sync only after a
// minute or more; so changing this annotation brings a new password or
// certificate to the instance manager in seconds. It restarts nothing.
const AnnotationSecretsHash = "tusk.dev/secrets-hash" //nolint:gosec // an annotation name, not a credential

// mountedSecrets are the Secrets an instance pod mounts.
func mountedSecrets(c *tuskv1alpha1.PostgresCluster) []string {
	names := []string{superuserPasswordSecret(c), appPasswordSecret(c), serverSecretName(c), replicationSecretName(c)}
	names = append(names, recoverySecrets(c)...)
	return append(names, backupSecrets(c)...)
}

// mountedSecretsHash hashes the content of the Secrets the pods mount.
func (r *ClusterReconciler) mountedSecretsHash(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (string, error) {
	var data []map[string][]byte
	for _, name := range mountedSecrets(c) {
		d, err := r.secrets.data(ctx, c.Namespace, name)
		if err != nil {
			return "", err
		}
		data = append(data, d)
	}
	return hashOf(data)
}

// reconcileSecretPropagation marks every pod with the current hash of its
// Secrets, so the kubelet refreshes the files of those that changed.
func (r *ClusterReconciler) reconcileSecretPropagation(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) error {
	hash, err := r.mountedSecretsHash(ctx, c)
	if err != nil {
		return err
	}
	for _, m := range v.members {
		if m.pod == nil || m.pod.DeletionTimestamp != nil || m.pod.Annotations[AnnotationSecretsHash] == hash {
			continue
		}
		patch := client.MergeFrom(m.pod.DeepCopy())
		setAnnotation(m.pod, AnnotationSecretsHash, hash)
		if err := r.Patch(ctx, m.pod, patch); err != nil {
			return fmt.Errorf("while marking the Secrets of %s: %w", m.name, err)
		}
	}
	return nil
}

// userSecrets are the Secrets of the user's that a cluster reads; a change
// to one of them reconciles the cluster (see clustersReading).
func userSecrets(c *tuskv1alpha1.PostgresCluster) []string {
	var names []string
	if c.Spec.SuperuserSecret != nil {
		names = append(names, c.Spec.SuperuserSecret.Name)
	}
	if s := initDB(c).Secret; s != nil {
		names = append(names, s.Name)
	}
	if name := userCASecret(c); name != "" {
		names = append(names, name)
	}
	names = append(names, recoverySecrets(c)...)
	return append(names, backupSecrets(c)...)
}
