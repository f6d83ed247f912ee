//go:build integration

package plugin

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

const psqlPassword = "n0t-in-any-0utput"

// psqlCluster is healthyCluster with its pods (orders-1 primary, orders-2
// a ready replica, orders-3 a replica not ready) and the app Secret.
func psqlCluster(t *testing.T) (*tuskv1alpha1.PostgresCluster, string) {
	t.Helper()
	c, ns := newCluster(t, healthyCluster)
	ctx := context.Background()
	for _, p := range []corev1.Pod{
		instancePod("orders-1", instanceapi.RolePrimary, true),
		instancePod("orders-2", instanceapi.RoleReplica, true),
		instancePod("orders-3", instanceapi.RoleReplica, false),
	} {
		p.Namespace = ns
		p.Spec.Containers = []corev1.Container{{Name: "postgres", Image: "tusk/postgres:17"}}
		status := p.Status
		if err := env.Client.Create(ctx, &p); err != nil {
			t.Fatal(err)
		}
		p.Status = status
		if err := env.Client.Status().Update(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "orders-app", Namespace: ns},
		Data: map[string][]byte{"username": []byte("app"), "password": []byte(psqlPassword)}}
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	return c, ns
}

// psqlFails runs kubectl tusk psql, which cannot succeed here (no kubelet
// runs the pods' exec), and checks its error says want and shows no
// password.
func psqlFails(t *testing.T, kc, want string, args ...string) {
	t.Helper()
	out, err := kubectlTusk(t, kc, append([]string{"psql"}, args...)...)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("kubectl tusk psql %s: %v; want an error with %q", strings.Join(args, " "), err, want)
	}
	if strings.Contains(out, psqlPassword) || (err != nil && strings.Contains(err.Error(), psqlPassword)) {
		t.Errorf("kubectl tusk psql %s showed the password", strings.Join(args, " "))
	}
}

// TestPsqlPicksThePodAndTheLogin: psql goes for the ready primary (or a
// ready replica) with the owner's password, and says clearly what stops it.
// Here exec itself fails (envtest has no kubelet): the error names the pod.
func TestPsqlPicksThePodAndTheLogin(t *testing.T) {
	_, ns := psqlCluster(t)
	psqlFails(t, kubeconfig, "while running psql in pod orders-1", "-n", ns, "orders", "--", "-c", "select 1")
	psqlFails(t, kubeconfig, "while running psql in pod orders-2", "-n", ns, "orders", "--replica")
	psqlFails(t, kubeconfig, `PostgresCluster "nothing" not found in namespace "`+ns+`"`, "-n", ns, "nothing")
	psqlFails(t, kubeconfig, "--role reporting needs --secret", "-n", ns, "orders", "--role", "reporting")
	psqlFails(t, kubeconfig, "the Secret reporting-login with the password of reporting is not in namespace "+ns,
		"-n", ns, "orders", "--role", "reporting", "--secret", "reporting-login")
	psqlFails(t, kubeconfig, "spec.superuserAccess is false", "-n", ns, "orders", "--role", "postgres")
	psqlFails(t, kubeconfig, "psql takes one cluster name", "-n", ns, "orders", "orders-2")

	ctx := context.Background()
	for _, name := range []string{"orders-1", "orders-2"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if err := env.Client.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	psqlFails(t, kubeconfig, "cluster orders has no ready primary (status.currentPrimary orders-1, phase Healthy)", "-n", ns, "orders")
	psqlFails(t, kubeconfig, "cluster orders has no ready replica", "-n", ns, "orders", "--replica")
}

// TestPsqlSaysWhichRightIsMissing: a user who may not read the Secret, or
// may not exec in the pod, is told which right psql needs.
func TestPsqlSaysWhichRightIsMissing(t *testing.T) {
	_, ns := psqlCluster(t)
	ctx := context.Background()
	read := []rbacv1.PolicyRule{
		{APIGroups: []string{tuskv1alpha1.GroupVersion.Group}, Resources: []string{"postgresclusters"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
	}
	secrets := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}
	exec := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}}
	kc := map[string]string{}
	for user, rules := range map[string][]rbacv1.PolicyRule{
		"no-secrets": append(slices.Clone(read), exec),
		"no-exec":    append(slices.Clone(read), secrets),
	} {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns}, Rules: rules}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}
		if err := env.Client.Create(ctx, role); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Create(ctx, binding); err != nil {
			t.Fatal(err)
		}
		var err error
		if kc[user], err = env.UserKubeconfigFile(t.TempDir(), user); err != nil {
			t.Fatal(err)
		}
	}
	psqlFails(t, kc["no-secrets"], "cannot read the Secret orders-app with the password of app", "-n", ns, "orders")
	psqlFails(t, kc["no-exec"], "psql needs create on pods/exec in namespace "+ns, "-n", ns, "orders")
}
