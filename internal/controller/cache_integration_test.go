//go:build integration

package controller

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"tusk.dev/tusk/internal/testenv"
)

// startCache starts a cache with opts against the test's API server until
// the test ends.
func startCache(t *testing.T, opts cache.Options) cache.Cache {
	t.Helper()
	opts.Scheme = env.Client.Scheme()
	c, err := cache.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("cache: %v", err)
		}
	})
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not start")
	}
	return c
}

func secretNamed(ns, name string, labels map[string]string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels,
			Annotations: map[string]string{"note": strings.Repeat("a", 4096)}},
		Data: map[string][]byte{"payload": []byte(strings.Repeat("x", 64<<10))},
	}
}

func cachedSecretNames(t *testing.T, c cache.Cache) []string {
	t.Helper()
	var list corev1.SecretList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list.Items {
		if len(s.ManagedFields) > 0 {
			t.Errorf("Secret %s/%s is cached with its managedFields", s.Namespace, s.Name)
		}
		names = append(names, s.Namespace+"/"+s.Name)
	}
	return names
}

// TestCacheHoldsOnlyTuskObjects: the operator's cache holds the Secrets
// Tusk made (labelled with a cluster), never the others of the namespace or
// of the Kubernetes cluster, and only the watched namespaces' when it is
// limited to some, with the clusters' keys Secrets in the operator's
// namespace, whole. The Secret name cache holds every Secret's name and
// version, without its data, labels or annotations.
func TestCacheHoldsOnlyTuskObjects(t *testing.T) {
	ns, other := newNamespace(t), newNamespace(t)
	everywhere := startCache(t, CacheOptions(nil, operatorNamespace))
	namespaced := startCache(t, CacheOptions([]string{ns}, operatorNamespace))
	names := startCache(t, secretNameCacheOptions(nil))

	users := secretNamed(ns, "users", nil)
	tusks := secretNamed(ns, "tusks", map[string]string{LabelCluster: "pg"})
	elsewhere := secretNamed(other, "tusks", map[string]string{LabelCluster: "pg"})
	for _, s := range []*corev1.Secret{users, tusks, elsewhere} {
		create(t, s)
	}
	// A cluster of the other namespace: its keys are in the operator's.
	cluster := newCluster(other)
	create(t, cluster)
	keys := keysOf(t, cluster)
	// One watch delivers a kind's events in order: once a cache holds the
	// Secret created last, it holds whatever it would of those before.
	for c, last := range map[cache.Cache]*corev1.Secret{everywhere: keys, namespaced: keys} {
		testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
			return c.Get(ctx, client.ObjectKeyFromObject(last), &corev1.Secret{})
		})
	}

	all := cachedSecretNames(t, everywhere)
	if slices.Contains(all, ns+"/users") {
		t.Errorf("the cache holds the user's Secret %s/users; it holds %v", ns, all)
	}
	if !slices.Contains(all, ns+"/tusks") || !slices.Contains(all, other+"/tusks") {
		t.Errorf("the cache holds %v, want both of Tusk's Secrets", all)
	}
	got := slices.DeleteFunc(cachedSecretNames(t, namespaced), func(name string) bool { return strings.HasPrefix(name, operatorNamespace+"/") })
	if !slices.Equal(got, []string{ns + "/tusks"}) {
		t.Errorf("the cache of namespace %s holds %v beside the operator's namespace, want only %s/tusks", ns, got, ns)
	}
	for _, c := range []cache.Cache{everywhere, namespaced} {
		cached := &corev1.Secret{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(keys), cached); err != nil || !maps.EqualFunc(cached.Data, keys.Data, bytes.Equal) {
			t.Errorf("the cache holds the keys Secret with %d bytes of data (%v), want it whole", dataBytes(cached.Data), err)
		}
	}

	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		if err := names.Get(ctx, client.ObjectKeyFromObject(users), meta); err != nil {
			return err
		}
		if meta.ResourceVersion != users.ResourceVersion || meta.UID != users.UID {
			return fmt.Errorf("the name cache holds version %s (uid %s), want %s (%s)", meta.ResourceVersion, meta.UID, users.ResourceVersion, users.UID)
		}
		if len(meta.Labels)+len(meta.Annotations)+len(meta.ManagedFields) > 0 {
			t.Errorf("the name cache holds more than the name of %s: %+v", users.Name, meta.ObjectMeta)
		}
		return nil
	})
}

// TestCacheKeepsLittleOfLabelledObjects: a tenant's Secrets and ConfigMaps
// labelled as Tusk's, of a MiB each, are in the operator's cache without
// their data, annotations or other labels (marked trimmed); a Secret of
// the name Tusk gives the cluster's CA, which the cluster controls, is
// there whole.
func TestCacheKeepsLittleOfLabelledObjects(t *testing.T) {
	ns := newNamespace(t)
	c := startCache(t, CacheOptions([]string{ns}, operatorNamespace))
	labels := map[string]string{LabelCluster: "pg", "stuffing.example/x": "y"}
	annotations := map[string]string{"note": strings.Repeat("a", 100<<10)}
	payload := strings.Repeat("x", 1000<<10)
	stuffedSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stuffing", Labels: labels, Annotations: annotations},
		Data: map[string][]byte{"payload": []byte(payload)}}
	stuffedMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stuffing", Labels: labels, Annotations: annotations},
		Data: map[string]string{"payload": payload}}
	owner := metav1.OwnerReference{APIVersion: "tusk.dev/v1alpha1", Kind: "PostgresCluster", Name: "pg", UID: "0f1e2d3c", Controller: ptr.To(true)}
	ca := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg-ca", Labels: labels, Annotations: annotations,
		OwnerReferences: []metav1.OwnerReference{owner}}, Data: map[string][]byte{keyCACert: []byte(payload)}}
	for _, o := range []client.Object{stuffedSecret, stuffedMap, ca} {
		create(t, o)
	}
	// One watch delivers a kind's events in order: the Secret created last.
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		return c.Get(ctx, client.ObjectKeyFromObject(ca), &corev1.Secret{})
	})
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		return c.Get(ctx, client.ObjectKeyFromObject(stuffedMap), &corev1.ConfigMap{})
	})

	s := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(stuffedSecret), s); err != nil {
		t.Fatal(err)
	}
	if len(s.Data) > 0 || len(s.Annotations) != 1 || s.Annotations[annotationTrimmed] == "" || len(s.Labels) != 1 {
		t.Errorf("the cache holds the tenant's labelled Secret with %d bytes of data, annotations %d, labels %v", dataBytes(s.Data), len(s.Annotations), s.Labels)
	}
	m := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(stuffedMap), m); err != nil {
		t.Fatal(err)
	}
	if len(m.Data) > 0 || len(m.Annotations) != 1 || m.Annotations[annotationTrimmed] == "" || len(m.Labels) != 1 {
		t.Errorf("the cache holds the tenant's labelled ConfigMap with %d bytes of data, annotations %d, labels %v", stringDataBytes(m.Data), len(m.Annotations), m.Labels)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(ca), s); err != nil {
		t.Fatal(err)
	}
	if string(s.Data[keyCACert]) != payload || len(s.Annotations) != 1 || len(s.ManagedFields) > 0 {
		t.Errorf("the cache holds the cluster's CA Secret with %d bytes of %s and annotations %d, managedFields %d; want it whole but for managedFields",
			len(s.Data[keyCACert]), keyCACert, len(s.Annotations), len(s.ManagedFields))
	}
}

// TestCacheKeepsLittleOfOtherLabelledKinds: a tenant's Role and Service
// labelled as Tusk's, stuffed with rules and annotations, are in the
// operator's cache without them (marked trimmed); the cluster's own
// Service keeps its spec, without the annotations Tusk does not read.
func TestCacheKeepsLittleOfOtherLabelledKinds(t *testing.T) {
	ns := newNamespace(t)
	c := startCache(t, CacheOptions([]string{ns}, operatorNamespace))
	labels := map[string]string{LabelCluster: "pg", "stuffing.example/x": "y"}
	annotations := map[string]string{"note": strings.Repeat("a", 200<<10)}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stuffing", Labels: labels, Annotations: annotations},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}, ResourceNames: []string{strings.Repeat("r", 500<<10)}}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stuffing", Labels: labels, Annotations: annotations},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 5432}}}}
	owner := metav1.OwnerReference{APIVersion: "tusk.dev/v1alpha1", Kind: "PostgresCluster", Name: "pg", UID: "0f1e2d3c", Controller: ptr.To(true)}
	rw := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg-rw", Labels: labels, Annotations: annotations,
		OwnerReferences: []metav1.OwnerReference{owner}}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 5432}}}}
	for _, o := range []client.Object{role, svc, rw} {
		create(t, o)
	}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		return c.Get(ctx, client.ObjectKeyFromObject(rw), &corev1.Service{})
	})
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		return c.Get(ctx, client.ObjectKeyFromObject(role), &rbacv1.Role{})
	})

	r := &rbacv1.Role{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(role), r); err != nil {
		t.Fatal(err)
	}
	if len(r.Rules) > 0 || len(r.Annotations) != 1 || r.Annotations[annotationTrimmed] == "" || len(r.Labels) != 1 {
		t.Errorf("the cache holds the tenant's labelled Role with %d rules, annotations %d, labels %v", len(r.Rules), len(r.Annotations), r.Labels)
	}
	s := &corev1.Service{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(svc), s); err != nil {
		t.Fatal(err)
	}
	if len(s.Spec.Ports) > 0 || len(s.Annotations) != 1 || s.Annotations[annotationTrimmed] == "" {
		t.Errorf("the cache holds the tenant's labelled Service with ports %v, annotations %d", s.Spec.Ports, len(s.Annotations))
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(rw), s); err != nil {
		t.Fatal(err)
	}
	if len(s.Spec.Ports) != 1 || len(s.Annotations) != 0 || len(s.Labels) != 1 {
		t.Errorf("the cache holds the cluster's Service with ports %v, annotations %d, labels %v; want its spec, none of the others' annotations and labels",
			s.Spec.Ports, len(s.Annotations), s.Labels)
	}
}
