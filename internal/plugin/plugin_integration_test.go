//go:build integration

package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/testenv"
)

var (
	env        *testenv.Env
	kubeconfig string // the administrator's
)

// TestMain starts a real API server with Tusk's CRDs. No operator runs:
// each test writes the status the operator would write, and plays the
// operator's part where it needs one.
func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	dir, err := os.MkdirTemp("", "tusk-plugin-")
	if err == nil {
		defer func() { _ = os.RemoveAll(dir) }()
		kubeconfig, err = env.KubeconfigFile(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// kubectlTusk runs the plugin in-process, as `kubectl tusk args...` would
// with the given kubeconfig, and returns what it printed.
func kubectlTusk(t *testing.T, kc string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := NewCommand(BinaryName, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig", kc}, args...))
	err := cmd.ExecuteContext(context.Background())
	t.Logf("kubectl tusk %s:\n%s%s", strings.Join(args, " "), out.String(), errOut.String())
	return out.String(), err
}

// newCluster creates the cluster of healthyCluster, with that status
// written through the status subresource as the operator writes it.
func newCluster(t *testing.T, status func() *tuskv1alpha1.PostgresCluster) (*tuskv1alpha1.PostgresCluster, string) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "plugin-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	want := status()
	c := &tuskv1alpha1.PostgresCluster{
		ObjectMeta: metav1.ObjectMeta{Name: want.Name, Namespace: ns.Name},
		Spec:       want.Spec,
	}
	c.Spec.Storage.Size = resource.MustParse("1Gi")
	if err := env.Client.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	c.Status = want.Status
	if err := env.Client.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	return c, ns.Name
}

func current(t *testing.T, c *tuskv1alpha1.PostgresCluster) *tuskv1alpha1.PostgresCluster {
	t.Helper()
	got := &tuskv1alpha1.PostgresCluster{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(c), got); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestStatusShowsTheCluster(t *testing.T) {
	_, ns := newCluster(t, healthyCluster)
	out, err := kubectlTusk(t, kubeconfig, "-n", ns, "status", "orders")
	if err != nil {
		t.Fatal(err)
	}
	// The same table as the renderer's golden file, from the API server.
	golden(t, "status-healthy", []byte(strings.Replace(out, "(namespace "+ns+")", "(namespace shop)", 1)))

	out, err = kubectlTusk(t, kubeconfig, "--namespace", ns, "status", "orders", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var st tuskv1alpha1.PostgresClusterStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("-o json printed %q: %v", out, err)
	}
	if st.CurrentPrimary != "orders-1" || len(st.Instances) != 3 || *st.Instances[2].LagBytes != 16<<20+96 {
		t.Errorf("-o json: %+v", st)
	}
	if _, err := kubectlTusk(t, kubeconfig, "-n", ns, "status", "nothing"); err == nil ||
		!strings.Contains(err.Error(), `PostgresCluster "nothing" not found in namespace "`+ns+`"`) {
		t.Errorf("status of a missing cluster: %v", err)
	}
}

func TestPromoteRefusalsLeaveTheClusterAlone(t *testing.T) {
	c, ns := newCluster(t, degradedCluster)
	before := current(t, c)
	for instance, want := range map[string]string{
		"orders-1": "orders-1 is already the primary",
		"orders-9": "orders-9 is not an instance of cluster orders",
		"orders-3": "orders-3 is not a ready replica",
	} {
		if _, err := kubectlTusk(t, kubeconfig, "-n", ns, "promote", "orders", instance); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("promote %s: %v, want an error with %q", instance, err, want)
		}
	}
	if _, err := kubectlTusk(t, kubeconfig, "-n", ns, "promote", "nothing", "orders-2"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("promote in a missing cluster: %v", err)
	}
	if after := current(t, c); after.ResourceVersion != before.ResourceVersion || after.Status.TargetPrimary != "orders-1" ||
		after.Annotations[tuskv1alpha1.AnnotationSwitchoverTo] != "" {
		t.Errorf("a refused promote wrote the cluster: resourceVersion %s → %s, targetPrimary %q",
			before.ResourceVersion, after.ResourceVersion, after.Status.TargetPrimary)
	}
}

func TestPromoteWithoutWaitingAsksForTheSwitchover(t *testing.T) {
	c, ns := newCluster(t, healthyCluster)
	out, err := kubectlTusk(t, kubeconfig, "-n", ns, "promote", "orders", "orders-3", "--wait=false")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Switching the primary of orders from orders-1 to orders-3") {
		t.Errorf("promote printed:\n%s", out)
	}
	got := current(t, c)
	if asked := got.Annotations[tuskv1alpha1.AnnotationSwitchoverTo]; asked != "orders-3" {
		t.Errorf("the switchover request names %q, want orders-3", asked)
	}
	// The status is the operator's alone, untouched.
	if got.Status.TargetPrimary != "orders-1" || len(got.Status.Instances) != 3 || got.Status.Phase != tuskv1alpha1.ClusterPhaseHealthy {
		t.Errorf("the plugin changed the status: %+v", got.Status)
	}
	if _, err := kubectlTusk(t, kubeconfig, "-n", ns, "promote", "orders", "orders-2"); err == nil ||
		!strings.Contains(err.Error(), "a switchover to orders-3 was asked for and the operator has not taken it yet") {
		t.Errorf("a second promote: %v", err)
	}
}

// clientFor is a client with a kubeconfig file's credentials.
func clientFor(t *testing.T, kubeconfigFile string) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigFile)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// operator plays the operator's part once the plugin has asked for a
// switchover: it takes the request (records the target, or with accept
// false refuses it and is done), then calls step with the cluster until
// step says it is done.
func operator(c *tuskv1alpha1.PostgresCluster, accept bool, step func(c *tuskv1alpha1.PostgresCluster) bool) chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for ctx.Err() == nil {
			got := &tuskv1alpha1.PostgresCluster{}
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(c), got)
			if want := got.Annotations[tuskv1alpha1.AnnotationSwitchoverTo]; err == nil && want != "" {
				if taken, err := takeRequest(ctx, got, want, accept); err != nil || (taken && !accept) {
					done <- err
					return
				}
			}
			if err == nil && got.Status.TargetPrimary != got.Status.CurrentPrimary {
				if step(got) {
					done <- env.Client.Status().Update(ctx, got)
					return
				}
				if err := env.Client.Status().Update(ctx, got); err != nil && !apierrors.IsConflict(err) {
					done <- err
					return
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		done <- ctx.Err()
	}()
	return done
}

// takeRequest removes the switchover request and, when accept, records
// its target, as the operator does; it says whether it took it (false on
// a conflict: the caller reads the cluster again).
func takeRequest(ctx context.Context, c *tuskv1alpha1.PostgresCluster, want string, accept bool) (bool, error) {
	delete(c.Annotations, tuskv1alpha1.AnnotationSwitchoverTo)
	if err := env.Client.Update(ctx, c); err != nil {
		return false, client.IgnoreNotFound(ignoreConflict(err))
	}
	if !accept {
		return true, nil
	}
	c.Status.TargetPrimary = want
	return true, env.Client.Status().Update(ctx, c)
}

func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func TestPromoteWaitsForTheSwitchover(t *testing.T) {
	c, ns := newCluster(t, healthyCluster)
	steps := 0
	done := operator(c, true, func(c *tuskv1alpha1.PostgresCluster) bool {
		steps++
		ready := metav1.Condition{Type: tuskv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: tuskv1alpha1.ReasonSwitchingOver, Message: "Switching the primary from orders-1 to orders-2"}
		c.Status.Phase = tuskv1alpha1.ClusterPhaseSwitchingOver
		if steps > 2 {
			c.Status.CurrentPrimary, c.Status.Phase = "orders-2", tuskv1alpha1.ClusterPhaseHealthy
			ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, tuskv1alpha1.ReasonClusterReady, "The primary and every instance are ready"
		}
		meta.SetStatusCondition(&c.Status.Conditions, ready)
		return steps > 2
	})
	out, err := kubectlTusk(t, kubeconfig, "-n", ns, "promote", "orders", "orders-2", "--timeout", "30s")
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// In this order: the state it started from, then each change.
	rest := out
	for _, want := range []string{
		"primary orders-1",
		"Ready=True (ClusterReady)",
		"phase SwitchingOver",
		"primary orders-1, switching over to orders-2", // the operator took the request
		"Ready=False (SwitchingOver)",
		"primary orders-2",
		"Ready=True (ClusterReady)",
		"Done: orders-2 is the primary of orders, and the cluster is Ready",
		"New connections through orders-rw reach it once kube-proxy follows",
	} {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("promote --wait did not print %q in that order", want)
		}
		rest = rest[i+len(want):]
	}
}

func TestPromoteReportsTheOperatorsRefusal(t *testing.T) {
	c, ns := newCluster(t, healthyCluster)
	done := operator(c, false, nil)
	_, err := kubectlTusk(t, kubeconfig, "-n", ns, "promote", "orders", "orders-2", "--timeout", "30s")
	if err == nil || !strings.Contains(err.Error(), "the operator refused the switchover to orders-2") {
		t.Errorf("promote: %v, want the operator's refusal", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestPromoteGivesUpWaitingAfterTheTimeout(t *testing.T) {
	_, ns := newCluster(t, healthyCluster)
	start := time.Now()
	_, err := kubectlTusk(t, kubeconfig, "-n", ns, "promote", "orders", "orders-2", "--timeout", "1s")
	if err == nil || !strings.Contains(err.Error(), "gave up waiting for orders-2") {
		t.Errorf("promote: %v, want a timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("a 1s timeout took %s", d)
	}
}

// userRoles are config/rbac/user_roles.yaml's ClusterRoles (tusk-edit,
// tusk-view), as the file names them.
func userRoles(t *testing.T) []*rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "user_roles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var roles []*rbacv1.ClusterRole
	for _, doc := range strings.Split(string(data), "\n---\n") {
		role := &rbacv1.ClusterRole{}
		if err := yaml.UnmarshalStrict([]byte(doc), role); err != nil {
			t.Fatal(err)
		}
		roles = append(roles, role)
	}
	return roles
}

// The verbs docs/kubectl-plugin.md lists are the ones the user roles
// grant: a viewer sees the status, an editor promotes too.
func TestUserRolesAreEnoughForThePlugin(t *testing.T) {
	ctx := context.Background()
	for _, role := range userRoles(t) {
		if err := env.Client.Create(ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	c, ns := newCluster(t, healthyCluster)
	kc := map[string]string{}
	for _, name := range []string{"view", "edit"} {
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "tusk-" + name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "a-" + name + "er"}},
		}
		if err := env.Client.Create(ctx, binding); err != nil {
			t.Fatal(err)
		}
		var err error
		if kc[name], err = env.UserKubeconfigFile(t.TempDir(), "a-"+name+"er"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kubectlTusk(t, kc["view"], "-n", ns, "status", "orders"); err != nil {
		t.Errorf("a viewer cannot see the status: %v", err)
	}
	if _, err := kubectlTusk(t, kc["view"], "-n", ns, "promote", "orders", "orders-2", "--wait=false"); !apierrors.IsForbidden(err) {
		t.Errorf("a viewer's promote: %v, want Forbidden", err)
	}
	if _, err := kubectlTusk(t, kc["edit"], "-n", ns, "promote", "orders", "orders-2", "--wait=false"); err != nil {
		t.Errorf("an editor cannot promote: %v", err)
	}
	if got := current(t, c).Annotations[tuskv1alpha1.AnnotationSwitchoverTo]; got != "orders-2" {
		t.Errorf("the switchover request names %q after the editor's promote, want orders-2", got)
	}
	// What failover and scale-down trust is the operator's alone: an
	// editor cannot write the status (it once switched the primary over
	// by patching status.targetPrimary).
	editor := clientFor(t, kc["edit"])
	got := current(t, c)
	patch := client.MergeFrom(got.DeepCopy())
	got.Status.TargetPrimary = "orders-3"
	if err := editor.Status().Patch(ctx, got, patch); !apierrors.IsForbidden(err) {
		t.Errorf("an editor's patch of the status: %v, want Forbidden", err)
	}
	if _, err := kubectlTusk(t, kc["view"], "-n", ns, "fence", "orders", "orders-2"); !apierrors.IsForbidden(err) {
		t.Errorf("a viewer's fence: %v, want Forbidden", err)
	}
	if _, err := kubectlTusk(t, kc["edit"], "-n", ns, "fence", "orders", "orders-2"); err != nil {
		t.Errorf("an editor cannot fence: %v", err)
	}
}

func TestFenceAndUnfenceEditTheAnnotation(t *testing.T) {
	c, ns := newCluster(t, healthyCluster)
	fencedList := func() string { return current(t, c).Annotations[tuskv1alpha1.AnnotationFencedInstances] }
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"fence", "orders", "orders-2"}, `["orders-2"]`},
		{[]string{"fence", "orders", "orders-2"}, `["orders-2"]`}, // idempotent
		{[]string{"fence", "orders", "orders-3"}, `["orders-2","orders-3"]`},
		{[]string{"unfence", "orders", "orders-2"}, `["orders-3"]`},
		{[]string{"unfence", "orders", "orders-3"}, ``}, // the annotation goes
		{[]string{"fence", "orders", "*"}, `["*"]`},
		{[]string{"unfence", "orders", "*"}, ``},
	}
	for _, s := range steps {
		if _, err := kubectlTusk(t, kubeconfig, append([]string{"-n", ns}, s.args...)...); err != nil {
			t.Fatal(err)
		}
		if got := fencedList(); got != s.want {
			t.Fatalf("after %v the annotation is %q, want %q", s.args, got, s.want)
		}
	}
	if _, err := kubectlTusk(t, kubeconfig, "-n", ns, "fence", "orders", "orders-9"); err == nil || !strings.Contains(err.Error(), "orders-9 is not an instance of orders") {
		t.Errorf("fencing an unknown instance: %v", err)
	}
	if got := fencedList(); got != "" {
		t.Errorf("a refused fence wrote the annotation %q", got)
	}
}

// TestCutoverAsksOnlyWhenThereIsOne: cutover refuses a cluster without a
// logical import or not yet replicating, and otherwise writes the
// annotation, a new value each time; --wait reports a failed cutover.
func TestCutoverAsksOnlyWhenThereIsOne(t *testing.T) {
	_, ns := newCluster(t, healthyCluster)
	if _, err := kubectlTusk(t, kubeconfig, "-n", ns, "cutover", "orders", "--wait=false"); err == nil || !strings.Contains(err.Error(), "has no logical import") {
		t.Errorf("cutover of a cluster without an import: %v", err)
	}
	importing := func() *tuskv1alpha1.PostgresCluster {
		c := importingCluster()
		c.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{InitDB: &tuskv1alpha1.InitDBSpec{Import: &tuskv1alpha1.ImportSpec{
			Source: tuskv1alpha1.ImportSource{Cluster: "old", User: "m",
				PasswordSecret: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "password"}},
			Databases: []string{"app"}, Method: "logical",
		}}}
		return c
	}
	c, ns := newCluster(t, importing)
	if _, err := kubectlTusk(t, kubeconfig, "-n", ns, "cutover", "orders", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	first := current(t, c).Annotations[tuskv1alpha1.AnnotationImportCutover]
	if first == "" {
		t.Fatal("no cutover annotation after kubectl tusk cutover")
	}
	// The operator reports the cutover failed; --wait says so.
	failed := current(t, c)
	failed.Status.Import = &tuskv1alpha1.ImportStatus{Phase: tuskv1alpha1.ImportCutoverFailed, Cutover: "other", Message: "the slot did not catch up"}
	if err := env.Client.Status().Update(context.Background(), failed); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := kubectlTusk(t, kubeconfig, "-n", ns, "cutover", "orders", "--timeout", "30s")
		done <- err
	}()
	var second string
	testenv.Eventually(t, 20*time.Second, func(context.Context) error {
		if second = current(t, c).Annotations[tuskv1alpha1.AnnotationImportCutover]; second == first || second == "" {
			return fmt.Errorf("annotation %q, want a new value", second)
		}
		return nil
	})
	failed = current(t, c)
	failed.Status.Import.Cutover = second
	if err := env.Client.Status().Update(context.Background(), failed); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "the slot did not catch up") {
		t.Errorf("cutover --wait on a failed cutover: %v", err)
	}
}

// TestUpgradeCommands: --image sets the image; --logical creates the
// role, its Secret, the publications and the new cluster, and refuses a
// source without wal_level logical before creating anything; --retry
// names the failed attempt; --restore-pre-upgrade creates the old image's
// cluster from the backup.
func TestUpgradeCommands(t *testing.T) {
	ctx := context.Background()
	c, ns := newCluster(t, upgradeFailedCluster)
	if _, err := kubectlTusk(t, kubeconfig, "-n", ns, "upgrade", "orders", "--image", "tusk/postgres:18", "--logical"); err == nil || !strings.Contains(err.Error(), "wal_level") {
		t.Errorf("a logical upgrade without wal_level logical: %v", err)
	}
	var roles tuskv1alpha1.PostgresRoleList
	if err := env.Client.List(ctx, &roles, client.InNamespace(ns)); err != nil || len(roles.Items) != 0 {
		t.Errorf("a refused logical upgrade left %d roles (%v)", len(roles.Items), err)
	}
	if _, err := kubectlTusk(t, kubeconfig, "-n", ns, "upgrade", "orders", "--retry"); err != nil {
		t.Fatal(err)
	}
	if got := current(t, c).Annotations[tuskv1alpha1.AnnotationRetryUpgrade]; got != "17-1795780800" {
		t.Errorf("retry annotation %q, want the failed attempt's name", got)
	}

	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-app"},
		Data: map[string][]byte{"username": []byte("app"), "password": []byte("the-app-password")}}); err != nil {
		t.Fatal(err)
	}
	withLogical := current(t, c)
	withLogical.Spec.PostgreSQL.Parameters = map[string]tuskv1alpha1.ParameterValue{"wal_level": "logical"}
	if err := env.Client.Update(ctx, withLogical); err != nil {
		t.Fatal(err)
	}
	if _, err := kubectlTusk(t, kubeconfig, "-n", ns, "upgrade", "orders", "--image", "tusk/postgres:18", "--logical"); err != nil {
		t.Fatal(err)
	}
	next := &tuskv1alpha1.PostgresCluster{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders-18"}, next); err != nil {
		t.Fatal(err)
	}
	if imp := next.Spec.Bootstrap.InitDB.Import; imp.Source.Cluster != "orders" || imp.Method != "logical" || next.Spec.Image != "tusk/postgres:18" {
		t.Errorf("orders-18: image %s, import %+v", next.Spec.Image, imp)
	}
	secret := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders-18-import"}, secret); err != nil || len(secret.Data["password"]) < 32 {
		t.Errorf("the import's password Secret: %v, %d bytes", err, len(secret.Data["password"]))
	}
	// The application's credentials, copied: orders-app goes with orders.
	copied := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders-18-app-credentials"}, copied); err != nil ||
		string(copied.Data["password"]) != "the-app-password" || next.Spec.Bootstrap.InitDB.Secret.Name != "orders-18-app-credentials" {
		t.Errorf("the application's credentials in the new cluster: %v, initdb.secret %+v", err, next.Spec.Bootstrap.InitDB.Secret)
	}
	for _, obj := range []client.Object{&tuskv1alpha1.PostgresRole{}, &tuskv1alpha1.PostgresPublication{}} {
		name := "orders-18-import"
		if _, ok := obj.(*tuskv1alpha1.PostgresPublication); ok {
			name += "-app"
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			t.Errorf("%T %s: %v", obj, name, err)
		}
	}

	if _, err := kubectlTusk(t, kubeconfig, "-n", ns, "upgrade", "orders", "--image", "tusk/postgres:18"); err != nil {
		t.Fatal(err)
	}
	if got := current(t, c).Spec.Image; got != "tusk/postgres:18" {
		t.Errorf("image after upgrade --image: %s", got)
	}

	u, uns := newCluster(t, upgradedCluster)
	out, err := kubectlTusk(t, kubeconfig, "-n", uns, "upgrade", "orders", "--restore-pre-upgrade", "orders-15", "--dry-run")
	if err != nil || !strings.Contains(out, "image: postgres:15") || !strings.Contains(out, "name: orders-pre-upgrade-17") {
		t.Errorf("--restore-pre-upgrade --dry-run: %v\n%s", err, out)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: u.Namespace, Name: "orders-15"}, &tuskv1alpha1.PostgresCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("--dry-run created the cluster: %v", err)
	}
}

// TestCutoverRetiresTheImportRole: once the cutover of a logical upgrade
// is done, the import's role on the old cluster is set ensure: absent
// (its primary drops it) and the import's publications are deleted; a
// publication of the user's is left.
func TestCutoverRetiresTheImportRole(t *testing.T) {
	importing := func() *tuskv1alpha1.PostgresCluster {
		c := importingCluster()
		c.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{InitDB: &tuskv1alpha1.InitDBSpec{Import: &tuskv1alpha1.ImportSpec{
			Source: tuskv1alpha1.ImportSource{Cluster: "old", User: importRole,
				PasswordSecret: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "orders-import"}, Key: "password"}},
			Databases: []string{"app"}, Method: "logical",
		}}}
		return c
	}
	c, ns := newCluster(t, importing)
	ctx := context.Background()
	role := &tuskv1alpha1.PostgresRole{ObjectMeta: metav1.ObjectMeta{Name: "orders-import", Namespace: ns}, Spec: tuskv1alpha1.PostgresRoleSpec{
		Cluster: corev1.LocalObjectReference{Name: "old"}, Name: importRole, Login: true, Replication: true}}
	importPub := &tuskv1alpha1.PostgresPublication{ObjectMeta: metav1.ObjectMeta{Name: "orders-import-app", Namespace: ns},
		Spec: tuskv1alpha1.PostgresPublicationSpec{Cluster: corev1.LocalObjectReference{Name: "old"}, Database: "app", Name: "tusk_import", AllTables: true}}
	userPub := &tuskv1alpha1.PostgresPublication{ObjectMeta: metav1.ObjectMeta{Name: "orders-import-reports", Namespace: ns},
		Spec: tuskv1alpha1.PostgresPublicationSpec{Cluster: corev1.LocalObjectReference{Name: "old"}, Database: "app", Name: "reports", AllTables: true}}
	for _, o := range []client.Object{role, importPub, userPub} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	var out string
	go func() {
		var err error
		out, err = kubectlTusk(t, kubeconfig, "-n", ns, "cutover", "orders", "--timeout", "30s")
		done <- err
	}()
	var value string
	testenv.Eventually(t, 20*time.Second, func(context.Context) error {
		if value = current(t, c).Annotations[tuskv1alpha1.AnnotationImportCutover]; value == "" {
			return errors.New("no cutover annotation yet")
		}
		return nil
	})
	cut := current(t, c)
	cut.Status.Import = &tuskv1alpha1.ImportStatus{Phase: tuskv1alpha1.ImportCutOver, Cutover: value, Message: "done"}
	if err := env.Client.Status().Update(ctx, cut); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(role), role); err != nil || role.Spec.Ensure != tuskv1alpha1.EnsureAbsent {
		t.Errorf("the import's role after the cutover: ensure %q, %v; want absent", role.Spec.Ensure, err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(importPub), importPub); !apierrors.IsNotFound(err) {
		t.Errorf("the import's publication after the cutover: %v, want it deleted", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(userPub), userPub); err != nil {
		t.Errorf("the user's publication after the cutover: %v, want it left", err)
	}
	if !strings.Contains(out, "Retired the import's role upgrade_import on old") {
		t.Errorf("the cutover's output does not say what it retired:\n%s", out)
	}
}
