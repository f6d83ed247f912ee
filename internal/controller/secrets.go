package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// secretReader reads Secrets: from the cache, which holds only the
// Secrets Tusk made (CacheOptions), else, and for one the cache keeps
// little of (trimSecretsAndConfigMaps), with a GET to the API server.
// A Secret the user names (S3 keys, a CA, a password) is one of the
// latter: it is read when needed and never kept.
type secretReader struct {
	cached client.Reader
	api    client.Reader
}

// data returns a Secret's data; nil when it does not exist.
func (s secretReader) data(ctx context.Context, namespace, name string) (map[string][]byte, error) {
	secret, err := s.get(ctx, namespace, name)
	if secret == nil || err != nil {
		return nil, err
	}
	return secret.Data, nil
}

// get returns the Secret; nil when it does not exist.
func (s secretReader) get(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	secret := &corev1.Secret{}
	err := s.cached.Get(ctx, key, secret)
	if apierrors.IsNotFound(err) || err == nil && secret.Annotations[annotationTrimmed] != "" {
		secret = &corev1.Secret{}
		err = s.api.Get(ctx, key, secret)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("while reading the Secret %s: %w", name, err)
	}
	return secret, nil
}

// secretNameCache keeps the namespace, name and resourceVersion of every
// Secret the operator may read, and nothing else (not even labels or
// annotations, which may hold a copy of the data): enough to wake a
// cluster when a Secret it names changes, at a cost that does not grow
// with what the Secrets hold. It starts with the manager's own cache.
type secretNameCache struct{ cache.Cache }

// GetCache puts the cache in the manager's group of caches, which start
// (and sync) before the controllers.
func (c secretNameCache) GetCache() cache.Cache { return c.Cache }

func newSecretNameCache(mgr ctrl.Manager, namespaces []string) (secretNameCache, error) {
	opts := secretNameCacheOptions(namespaces)
	opts.HTTPClient, opts.Scheme, opts.Mapper = mgr.GetHTTPClient(), mgr.GetScheme(), mgr.GetRESTMapper()
	c, err := cache.New(mgr.GetConfig(), opts)
	if err != nil {
		return secretNameCache{}, fmt.Errorf("while creating the Secret name cache: %w", err)
	}
	return secretNameCache{c}, nil
}

func secretNameCacheOptions(namespaces []string) cache.Options {
	return cache.Options{DefaultNamespaces: namespaceConfigs(namespaces), DefaultTransform: keepSecretIdentity}
}

// keepSecretIdentity drops all of a Secret's metadata but what names it
// and tells one version from another.
func keepSecretIdentity(in any) (any, error) {
	m, ok := in.(*metav1.PartialObjectMetadata)
	if !ok {
		return in, nil
	}
	return &metav1.PartialObjectMetadata{
		TypeMeta: m.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion,
		},
	}, nil
}

// secretChanges is a source of the changes to any Secret (by name only),
// mapped to requests by toRequests.
func (c secretNameCache) secretChanges(toRequests func(context.Context, client.Object) []reconcile.Request) source.Source {
	secret := &metav1.PartialObjectMetadata{}
	secret.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return source.Kind(c.Cache, secret, handler.TypedEnqueueRequestsFromMapFunc(
		func(ctx context.Context, o *metav1.PartialObjectMetadata) []reconcile.Request {
			return toRequests(ctx, o)
		}))
}
