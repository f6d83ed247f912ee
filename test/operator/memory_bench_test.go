//go:build integration

// Package operator measures the operator as a whole against a real API
// server.
package operator

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/controller"
	"tusk.dev/tusk/internal/operator"
	"tusk.dev/tusk/internal/testenv"
)

const (
	foreignSecrets     = 2000
	foreignSecretBytes = 64 << 10
	foreignNamespaces  = 20
	// The operator may keep a name and a version per Secret; 2,000 of
	// them come to well under a MiB. Caching the Secrets would take 125.
	maxHeapGrowthMiB = 16
	// hostileObjects Secrets and as many ConfigMaps of hostileBytes each
	// come from a tenant who labels them as Tusk's (tusk.dev/cluster), half
	// of the Secrets controlled by the tenant's own cluster: the cache's
	// label selector takes them, and caching them whole would take 600 MiB.
	hostileObjects = 300
	hostileBytes   = 900 << 10
	// hostileNote is each hostile object's annotation.
	hostileNote = 200 << 10
)

// BenchmarkOperatorMemory runs the operator (in this process, as `tusk
// operator` does) with a few clusters, measures its live heap, then adds
// 2,000 Secrets of 64 KiB in other namespaces, none of them Tusk's, and
// measures again. The operator must not grow with them: it fails when the
// live heap grew by more than maxHeapGrowthMiB. The live heap is measured
// after a forced collection; the process also holds the test's client,
// which keeps no objects.
func BenchmarkOperatorMemory(b *testing.B) {
	env, err := testenv.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	defer startOperator(b, env)()
	for i := range b.N {
		measure(b, env.Client, i)
	}
}

// startOperator runs the operator in this process, as `tusk operator`
// does, until the function it returns stops it. The operator logs to
// nowhere: its log would hold this process's heap, and the figures are
// about what it caches.
func startOperator(b *testing.B, env *testenv.Env) (stop func()) {
	b.Helper()
	ctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), logr.Discard()))
	ctrl.SetLogger(logr.Discard())
	done := make(chan error, 1)
	go func() {
		done <- operator.Run(ctx, env.Config, operator.Options{
			MetricsAddr: "0", ProbeAddr: "0", GracefulShutdownTimeout: 10 * time.Second,
			Controllers: controller.Config{InstanceManagerImage: "tusk/operator:bench", OperatorNamespace: "default"},
		})
	}()
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("operator: %v", err)
		}
	}
}

// measure creates the clusters and the Secrets (in namespaces of run i)
// and reports the operator's live heap before and after the Secrets.
func measure(b *testing.B, c client.Client, i int) {
	b.Helper()
	tenant := fmt.Sprintf("tenant-%d", i)
	createNamespace(b, c, tenant)
	for _, name := range []string{"a", "b", "c"} {
		create(b, c, cluster(tenant, name))
	}
	// A cluster that waits for a Secret of the user's, made after the
	// others: once it moves on, the operator has seen every Secret made
	// before it (one watch delivers a kind's events in order).
	late := cluster(tenant, "late")
	late.Spec.SuperuserSecret = &corev1.LocalObjectReference{Name: "late-root"}
	create(b, c, late)
	for _, name := range []string{"a", "b", "c"} {
		waitFor(b, c, tenant, name+"-1", &corev1.Pod{})
	}
	waitForPhase(b, c, client.ObjectKeyFromObject(late), tuskv1alpha1.ClusterPhaseFailed)
	before := liveHeapMiB()

	start := time.Now()
	createForeignSecrets(b, c, i)
	made := time.Since(start)
	create(b, c, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "late-root"},
		Data:       map[string][]byte{"password": []byte("late")},
	})
	waitFor(b, c, tenant, "late-1", &corev1.Pod{})
	start = time.Now()
	createHostileObjects(b, c, tenant)
	hostile := time.Since(start)
	// One watch delivers a kind's events in order: once the operator has
	// made again the Secret and the ConfigMap of cluster a deleted after
	// the tenant's objects, it has seen those too.
	remade(b, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "a-app"}})
	remade(b, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "a-config"}})
	remade(b, c, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "a-rw"}})
	remade(b, c, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "a-instance"}})
	after := liveHeapMiB()

	growth := after - before
	b.ReportMetric(before, "heap-before-MiB")
	b.ReportMetric(after, "heap-after-MiB")
	b.ReportMetric(growth, "growth-MiB")
	b.Logf("figure: operator live heap %.1f MiB with 4 clusters, %.1f MiB after %d foreign Secrets of %d KiB (%.0f MiB, made in %s) "+
		"and %d Secrets, ConfigMaps and Roles of %d KiB and Services with %d KiB of annotations labelled as Tusk's (%.0f MiB, made in %s): grew %.1f MiB",
		before, after, foreignSecrets, foreignSecretBytes>>10, float64(foreignSecrets*foreignSecretBytes)/(1<<20), made.Round(time.Second),
		hostileObjects, hostileBytes>>10, hostileNote>>10, float64(hostileObjects*(3*hostileBytes+2*hostileNote))/(1<<20), hostile.Round(time.Second), growth)
	if growth > maxHeapGrowthMiB {
		b.Errorf("the operator's live heap grew by %.1f MiB with objects that are not Tusk's (bound %d MiB): it caches them", growth, maxHeapGrowthMiB)
	}
}

// liveHeapMiB is the heap still reachable after a full collection.
func liveHeapMiB() float64 {
	runtime.GC()
	runtime.GC() // finalizers queued by the first run free memory in the second
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

func cluster(ns, name string) *tuskv1alpha1.PostgresCluster {
	return &tuskv1alpha1.PostgresCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: tuskv1alpha1.PostgresClusterSpec{
			Instances: 3,
			Storage:   tuskv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
		},
	}
}

// createForeignSecrets makes foreignSecrets Secrets of random (so
// incompressible) data, spread over foreignNamespaces namespaces.
func createForeignSecrets(b *testing.B, c client.Client, run int) {
	b.Helper()
	for n := range foreignNamespaces {
		createNamespace(b, c, fmt.Sprintf("other-%d-%d", run, n))
	}
	createAll(b, c, "the foreign Secrets", foreignSecrets, func(k int) []client.Object {
		return []client.Object{&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("other-%d-%d", run, k%foreignNamespaces), Name: "s-" + strconv.Itoa(k)},
			Data:       map[string][]byte{"data": randomBytes(foreignSecretBytes)},
		}}
	})
}

// createHostileObjects makes hostileObjects Secrets and ConfigMaps of
// random data in the tenant's namespace, labelled with cluster a and
// annotated to the limit, half of the Secrets controlled by cluster a.
func createHostileObjects(b *testing.B, c client.Client, ns string) {
	b.Helper()
	owner := &tuskv1alpha1.PostgresCluster{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "a"}, owner); err != nil {
		b.Fatal(err)
	}
	note := strings.Repeat("n", hostileNote)
	createAll(b, c, "the hostile objects", hostileObjects, func(k int) []client.Object {
		data := randomBytes(hostileBytes)
		meta := metav1.ObjectMeta{Namespace: ns, Name: "hostile-" + strconv.Itoa(k),
			Labels: map[string]string{tuskv1alpha1.LabelCluster: "a"}, Annotations: map[string]string{"note": note}}
		if k%2 == 0 {
			meta.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, tuskv1alpha1.GroupVersion.WithKind("PostgresCluster"))}
		}
		unowned := *meta.DeepCopy()
		unowned.OwnerReferences = nil
		return []client.Object{
			&corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"data": data}},
			&corev1.ConfigMap{ObjectMeta: *meta.DeepCopy(), BinaryData: map[string][]byte{"data": data}},
			&corev1.Service{ObjectMeta: *meta.DeepCopy(), Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Port: 5432}}}},
			// A Role's rules are kept whole when a Tusk object controls it
			// (docs/security.md: a forged controller is a known gap).
			&rbacv1.Role{ObjectMeta: unowned, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""},
				Resources: []string{"pods"}, ResourceNames: []string{base64.StdEncoding.EncodeToString(data)[:hostileBytes]}}}},
		}
	})
}

// createAll creates the objects objectsOf makes for 0…n-1, with eight
// writers; the first error fails the benchmark once all have stopped.
func createAll(b *testing.B, c client.Client, what string, n int, objectsOf func(k int) []client.Object) {
	b.Helper()
	work := make(chan int)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range 8 {
		wg.Go(func() {
			for k := range work { // drained to the end, also after an error
				for _, o := range objectsOf(k) {
					if err := c.Create(context.Background(), o); err != nil {
						mu.Lock()
						first = cmp.Or(first, err)
						mu.Unlock()
					}
				}
			}
		})
	}
	for k := range n {
		work <- k
	}
	close(work)
	wg.Wait()
	if first != nil {
		b.Fatalf("creating %s: %v", what, first)
	}
}

func randomBytes(n int) []byte {
	data := make([]byte, n)
	_, _ = rand.Read(data)
	return data
}

// remade deletes obj, one the operator makes, and waits until it is there
// again.
func remade(b *testing.B, c client.Client, obj client.Object) {
	b.Helper()
	key := client.ObjectKeyFromObject(obj)
	if err := c.Get(context.Background(), key, obj); err != nil {
		b.Fatal(err)
	}
	uid := obj.GetUID()
	if err := c.Delete(context.Background(), obj); err != nil {
		b.Fatal(err)
	}
	testenv.Eventually(b, 2*time.Minute, func(ctx context.Context) error {
		if err := c.Get(ctx, key, obj); err != nil {
			return err
		}
		if obj.GetUID() == uid {
			return fmt.Errorf("%s is not made again yet", key)
		}
		return nil
	})
}

func createNamespace(b *testing.B, c client.Client, name string) {
	b.Helper()
	create(b, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

func create(b *testing.B, c client.Client, obj client.Object) {
	b.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		b.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func waitFor(b *testing.B, c client.Client, ns, name string, obj client.Object) {
	b.Helper()
	testenv.Eventually(b, 2*time.Minute, func(ctx context.Context) error {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
	})
}

func waitForPhase(b *testing.B, c client.Client, key client.ObjectKey, phase tuskv1alpha1.ClusterPhase) {
	b.Helper()
	testenv.Eventually(b, 2*time.Minute, func(ctx context.Context) error {
		got := &tuskv1alpha1.PostgresCluster{}
		if err := c.Get(ctx, key, got); err != nil {
			return err
		}
		if got.Status.Phase != phase {
			return fmt.Errorf("cluster %s is %q, want %s", key, got.Status.Phase, phase)
		}
		return nil
	})
}
