//go:build integration

package manifests

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/controller"
	"tusk.dev/tusk/internal/operator"
	"tusk.dev/tusk/internal/testenv"
)

// TestNamespacedInstall installs config/namespaced and runs the operator
// as its ServiceAccount, with the rights those manifests grant and
// nothing else: it reconciles a cluster of the namespace it serves (pods,
// Secrets, the instances' Role), takes its leader Lease, and leaves a
// cluster of another namespace alone.
func TestNamespacedInstall(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()

	var args []string
	for _, obj := range render(t, "namespaced") {
		if obj.GetKind() == "ClusterRoleBinding" && obj.GetName() == "tusk-operator" {
			t.Errorf("the namespaced install binds the operator's rights cluster-wide")
		}
		if obj.GetKind() == "Deployment" {
			args = containerArgs(t, obj.Object)
		}
		if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("test"), client.ForceOwnership); err != nil {
			t.Fatalf("applying %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	if !slices.Contains(args, "--watch-namespaces=postgres") {
		t.Fatalf("the operator's arguments %v do not limit it to the namespace postgres", args)
	}

	served, other := newCluster("postgres"), newCluster("elsewhere")
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other.Namespace}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*tuskv1alpha1.PostgresCluster{other, served} {
		if err := env.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}

	cfg := serviceAccountConfig(t, env, "tusk-system", "tusk-operator")
	runCtx, cancel := context.WithCancel(ctrl.LoggerInto(ctx, testr.New(t)))
	done := make(chan error, 1)
	go func() {
		done <- operator.Run(runCtx, cfg, operator.Options{
			MetricsAddr: "0", ProbeAddr: "0", LeaderElect: true, LeaderElectionNamespace: "tusk-system",
			GracefulShutdownTimeout: 10 * time.Second, WatchNamespaces: []string{"postgres"},
			Controllers: controller.Config{InstanceManagerImage: "tusk/operator:test", OperatorNamespace: "tusk-system"},
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	}()

	testenv.Eventually(t, time.Minute, func(ctx context.Context) error {
		for _, obj := range []client.Object{&corev1.Pod{}, &corev1.Secret{}, &rbacv1.Role{}} {
			name := map[string]string{"*v1.Pod": "pg-1", "*v1.Secret": "pg-superuser", "*v1.Role": "pg-instance"}[fmt.Sprintf("%T", obj)]
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "postgres", Name: name}, obj); err != nil {
				return err
			}
		}
		// The cluster's keys, in the operator's namespace.
		return env.Client.Get(ctx, client.ObjectKey{Namespace: "tusk-system", Name: "postgres.pg.keys"}, &corev1.Secret{})
	})
	// The served cluster, created last, is reconciled; the other one, in a
	// namespace the operator may not even read, never is.
	got := &tuskv1alpha1.PostgresCluster{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(other), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != "" || len(got.Finalizers) > 0 {
		t.Errorf("the cluster of namespace %s was reconciled: phase %q, finalizers %v", other.Namespace, got.Status.Phase, got.Finalizers)
	}
}

func newCluster(ns string) *tuskv1alpha1.PostgresCluster {
	return &tuskv1alpha1.PostgresCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "pg", Namespace: ns},
		Spec: tuskv1alpha1.PostgresClusterSpec{
			Instances: 2,
			Storage:   tuskv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
		},
	}
}

// serviceAccountConfig reaches the API server as the ServiceAccount
// namespace/name would from its pod: RBAC grants it what its bindings do.
func serviceAccountConfig(t *testing.T, env *testenv.Env, namespace, name string) *rest.Config {
	t.Helper()
	path, err := env.UserKubeconfigFile(t.TempDir(), "system:serviceaccount:"+namespace+":"+name,
		"system:serviceaccounts", "system:serviceaccounts:"+namespace, "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func containerArgs(t *testing.T, deployment map[string]any) []string {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(deployment, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		t.Fatal("the Deployment has no container")
	}
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	return args
}
