// Package controller holds Tusk's reconcilers: one per kind, one file per
// concern. The reconcilers read and write the Kubernetes API only; what
// happens inside a PostgreSQL pod is the instance manager's job.
package controller

import (
	"errors"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"tusk.dev/tusk/internal/objectstore"
)

// SetupWithManager registers every Tusk reconciler with mgr. namespaces
// are those the operator watches (every namespace when empty), as given to
// CacheOptions.
func SetupWithManager(mgr ctrl.Manager, cfg Config, namespaces []string) error {
	if cfg.OperatorNamespace == "" {
		return errors.New("the operator's namespace is required (--operator-namespace, or POD_NAMESPACE): the clusters' private keys are kept there")
	}
	secretNames, err := newSecretNameCache(mgr, namespaces)
	if err != nil {
		return err
	}
	if err := mgr.Add(secretNames); err != nil {
		return fmt.Errorf("while adding the Secret name cache: %w", err)
	}
	secrets := secretReader{cached: mgr.GetClient(), api: mgr.GetAPIReader()}
	keys := keyStore{secrets: secrets, namespace: cfg.OperatorNamespace}
	results := newRetentionResults()
	clusters := &ClusterReconciler{Client: mgr.GetClient(), Config: cfg, Recorder: mgr.GetEventRecorder("tusk"),
		secrets: secrets, api: mgr.GetAPIReader(), secretNames: secretNames, keys: keys, results: results}
	if err := clusters.SetupWithManager(mgr); err != nil {
		return err
	}
	schedules := &BackupScheduleReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("tusk"), Clock: cfg.Clock, secrets: secrets,
		storeAddressCheck: cfg.ObjectStoreAddressCheck, results: results, retentionTimeout: cfg.RetentionRunTimeout}
	if schedules.storeAddressCheck == nil {
		schedules.storeAddressCheck = objectstore.RefuseInternalAddresses
	}
	if err := schedules.SetupWithManager(mgr); err != nil {
		return err
	}
	for _, kind := range sqlKinds() {
		r := &SQLReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("tusk"), kind: kind, secrets: secrets, secretNames: secretNames,
			api: mgr.GetAPIReader(), keys: keys}
		if err := r.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	poolers := &PoolerReconciler{Client: mgr.GetClient(), Config: cfg, Recorder: mgr.GetEventRecorder("tusk"), api: mgr.GetAPIReader(),
		secrets: secrets, keys: keys}
	if err := poolers.SetupWithManager(mgr); err != nil {
		return err
	}
	return (&BackupReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("tusk"), keys: keys}).SetupWithManager(mgr)
}

// CacheOptions limit what the manager's cache holds to the objects Tusk
// made: of every kind but its own custom resources, only objects labelled
// with a cluster (Tusk labels all it creates), without their managedFields;
// of the Secrets and ConfigMaps so labelled that Tusk did not make, little
// more than their names.
// Caching a kind cluster-wide holds every object of it in memory: the
// Secrets of a large cluster alone run to gigabytes. A Secret the user
// names is read with an uncached GET (secretReader) and watched by name
// only (newSecretNameCache). namespaces limit the cache to those
// namespaces; every namespace when empty. The Secrets of operatorNamespace
// are cached too: the clusters' keys are there (keyStore).
func CacheOptions(namespaces []string, operatorNamespace string) cache.Options {
	ours := tuskObjects()
	byObject := map[client.Object]cache.ByObject{}
	for _, o := range []client.Object{
		&corev1.Pod{}, &corev1.PersistentVolumeClaim{}, &corev1.Service{},
		&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &policyv1.PodDisruptionBudget{}, &networkingv1.NetworkPolicy{},
		&appsv1.Deployment{}, &appsv1.StatefulSet{},
		// Every node renews a Lease of its own every few seconds.
		&coordinationv1.Lease{},
	} {
		byObject[o] = cache.ByObject{Label: ours, Transform: trimLabelledObjects}
	}
	// Anyone may label a Secret or ConfigMap, of a MiB each: of those Tusk
	// did not make the cache keeps little (trimSecretsAndConfigMaps).
	trim := trimSecretsAndConfigMaps(operatorNamespace)
	byObject[&corev1.ConfigMap{}] = cache.ByObject{Label: ours, Transform: trim}
	byObject[&corev1.Secret{}] = cache.ByObject{Label: ours, Transform: trim, Namespaces: keysNamespaces(namespaces, operatorNamespace)}
	return cache.Options{
		ByObject:          byObject,
		DefaultNamespaces: namespaceConfigs(namespaces),
		DefaultTransform:  cache.TransformStripManagedFields(),
	}
}

// tuskObjects selects the objects Tusk made for a cluster.
func tuskObjects() labels.Selector {
	ours, err := labels.NewRequirement(LabelCluster, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label key: cannot fail
	}
	return labels.NewSelector().Add(*ours)
}

// keysNamespaces are the namespaces whose Secrets are cached when the
// operator watches namespaces only: those and its own, which holds the
// clusters' keys. Every namespace (nil) when it watches all.
func keysNamespaces(namespaces []string, operatorNamespace string) map[string]cache.Config {
	if len(namespaces) == 0 || slices.Contains(namespaces, operatorNamespace) {
		return namespaceConfigs(namespaces)
	}
	return namespaceConfigs(append(slices.Clone(namespaces), operatorNamespace))
}

func namespaceConfigs(namespaces []string) map[string]cache.Config {
	if len(namespaces) == 0 {
		return nil
	}
	configs := make(map[string]cache.Config, len(namespaces))
	for _, ns := range namespaces {
		configs[ns] = cache.Config{}
	}
	return configs
}
