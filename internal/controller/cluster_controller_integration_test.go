//go:build integration

package controller

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/pki"
	"tusk.dev/tusk/internal/testenv"
)

const waitTimeout = 30 * time.Second

// testConfig is the reconcilers' configuration in these tests; pods never
// run in envtest, so the image only has to be a valid name.
// testConfig is the operator's configuration in these tests. Their S3
// server listens on loopback, which the operator otherwise refuses; every
// other address is checked as in production.
var testConfig = Config{InstanceManagerImage: "tusk/operator:test", PoolerImage: "tusk/pgbouncer:test", OperatorNamespace: operatorNamespace, ObjectStoreAddressCheck: func(a netip.Addr) error {
	if a.IsLoopback() {
		return nil
	}
	return objectstore.RefuseInternalAddresses(a)
}, ImportAbandonGrace: 3 * time.Second, RetentionRunTimeout: retentionTestTimeout}

// retentionTestTimeout bounds a retention run in these tests: far more
// than a run against the test's S3 server takes, short enough to wait for.
const retentionTestTimeout = 8 * time.Second

func newCluster(ns string) *tuskv1alpha1.PostgresCluster {
	return &tuskv1alpha1.PostgresCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "pg", Namespace: ns},
		Spec: tuskv1alpha1.PostgresClusterSpec{
			Instances: 3,
			Storage:   tuskv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
		},
	}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// clusterWhen waits until the cluster satisfies cond, which explains why not.
func clusterWhen(t *testing.T, key client.ObjectKey, cond func(c *tuskv1alpha1.PostgresCluster) error) *tuskv1alpha1.PostgresCluster {
	t.Helper()
	got := &tuskv1alpha1.PostgresCluster{}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		if err := env.Client.Get(ctx, key, got); err != nil {
			return err
		}
		return cond(got)
	})
	return got
}

// condition checks one condition's status and, when reason is set, reason.
func condition(c *tuskv1alpha1.PostgresCluster, typ string, status metav1.ConditionStatus, reason string) error {
	cond := meta.FindStatusCondition(c.Status.Conditions, typ)
	switch {
	case cond == nil:
		return fmt.Errorf("no %s condition in %+v", typ, c.Status)
	case cond.Status != status || (reason != "" && cond.Reason != reason):
		return fmt.Errorf("%s=%s (%s: %s), want %s %s", typ, cond.Status, cond.Reason, cond.Message, status, reason)
	case cond.ObservedGeneration != c.Generation:
		return fmt.Errorf("%s describes generation %d, not %d", typ, cond.ObservedGeneration, c.Generation)
	}
	return nil
}

// creating is the state a new cluster settles in under envtest: instance
// 1 created, waiting for it to become ready.
func creating(c *tuskv1alpha1.PostgresCluster) error {
	st := c.Status
	switch {
	case st.ObservedGeneration != c.Generation:
		return fmt.Errorf("observedGeneration %d, generation %d", st.ObservedGeneration, c.Generation)
	case st.Phase != tuskv1alpha1.ClusterPhaseCreating:
		return fmt.Errorf("phase %q, want Creating", st.Phase)
	case st.CurrentPrimary != "pg-1" || st.TargetPrimary != "pg-1" || st.LastInstanceSerial != 1:
		return fmt.Errorf("currentPrimary %q, targetPrimary %q, lastInstanceSerial %d; want pg-1, pg-1, 1",
			st.CurrentPrimary, st.TargetPrimary, st.LastInstanceSerial)
	}
	return errors.Join(
		condition(c, tuskv1alpha1.ConditionReady, metav1.ConditionFalse, ""),
		condition(c, tuskv1alpha1.ConditionProgressing, metav1.ConditionTrue, tuskv1alpha1.ReasonCreating))
}

// waitClusterGone waits until the deleted cluster is gone, finalizer and
// all.
func waitClusterGone(t *testing.T, c *tuskv1alpha1.PostgresCluster) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(c), &tuskv1alpha1.PostgresCluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("the cluster is still there (%w)", err)
	})
}

func get[T client.Object](t *testing.T, ns, name string, obj T) T {
	t.Helper()
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
	})
	return obj
}

func TestNewClusterCreatesItsObjects(t *testing.T) {
	ns := newNamespace(t)
	cluster := newCluster(ns)
	cluster.Spec.Storage.Size = resource.MustParse("3Gi")
	create(t, cluster)
	c := clusterWhen(t, client.ObjectKeyFromObject(cluster), creating)
	if !slices.Contains(c.Finalizers, FinalizerCleanup) {
		t.Errorf("finalizers %v, want %s", c.Finalizers, FinalizerCleanup)
	}

	pvc := get(t, ns, "pg-1", &corev1.PersistentVolumeClaim{})
	if len(pvc.OwnerReferences) != 0 {
		t.Errorf("PVC pg-1 has owners %v: it must outlive the cluster", pvc.OwnerReferences)
	}
	checkLabels(t, "PVC pg-1", pvc.Labels, map[string]string{LabelCluster: "pg", LabelInstance: "pg-1"})
	if size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; size.Cmp(resource.MustParse("3Gi")) != 0 {
		t.Errorf("PVC pg-1 requests %s, want 3Gi", size.String())
	}

	pod := get(t, ns, "pg-1", &corev1.Pod{})
	checkOwnedBy(t, pod, c)
	checkLabels(t, "pod pg-1", pod.Labels, map[string]string{LabelCluster: "pg", LabelInstance: "pg-1", LabelRole: "primary"})
	if got, want := pod.Annotations[AnnotationHash], podSpecHash(c, testConfig.InstanceManagerImage); got != want {
		t.Errorf("pod pg-1 hash %q, want %q", got, want)
	}
	if pod.Spec.Volumes[0].PersistentVolumeClaim == nil || pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "pg-1" {
		t.Errorf("pod pg-1 does not mount PVC pg-1: %+v", pod.Spec.Volumes[0])
	}

	for name, role := range map[string]string{"pg-rw": "primary", "pg-ro": "replica", "pg-r": ""} {
		svc := get(t, ns, name, &corev1.Service{})
		checkOwnedBy(t, svc, c)
		want := map[string]string{LabelCluster: "pg"}
		if role != "" {
			want[LabelRole] = role
		}
		if !maps.Equal(svc.Spec.Selector, want) {
			t.Errorf("Service %s selects %v, want %v", name, svc.Spec.Selector, want)
		}
	}
	checkCredentials(t, c)
	checkTLSSecrets(t, c)
	for _, name := range []string{"pg-ca", "pg-config"} {
		checkOwnedBy(t, get(t, ns, name, &corev1.ConfigMap{}), c)
	}
	pdb := get(t, ns, "pg", &policyv1.PodDisruptionBudget{})
	checkOwnedBy(t, pdb, c)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("the PodDisruptionBudget allows %v unavailable (min available %v), want one instance at a time", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
	}
	waitForEvent(t, ns, tuskv1alpha1.ReasonCreatedInstance, "pg-1")
}

// TestForeignObjectIsNotTakenOver: a Secret of the name Tusk needs that
// Tusk did not create is left as it was (no owner added, so garbage
// collection never deletes it with the cluster), and the cluster says
// which object is in the way.
func TestForeignObjectIsNotTakenOver(t *testing.T) {
	ns := newNamespace(t)
	users := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pg-app", Namespace: ns}, StringData: map[string]string{"mine": "keep me"}}
	create(t, users)
	c := newCluster(ns)
	create(t, c)
	clusterWhen(t, client.ObjectKeyFromObject(c), func(c *tuskv1alpha1.PostgresCluster) error {
		if err := condition(c, tuskv1alpha1.ConditionReady, metav1.ConditionFalse, tuskv1alpha1.ReasonObjectNotOwned); err != nil {
			return err
		}
		if msg := meta.FindStatusCondition(c.Status.Conditions, tuskv1alpha1.ConditionReady).Message; !strings.Contains(msg, "Secret "+ns+"/pg-app") {
			return fmt.Errorf("the condition does not name the Secret: %s", msg)
		}
		return nil
	})
	waitForEvent(t, ns, tuskv1alpha1.ReasonObjectNotOwned, "pg-app")
	got := get(t, ns, "pg-app", &corev1.Secret{})
	if len(got.OwnerReferences) != 0 || string(got.Data["mine"]) != "keep me" || len(got.Data) != 1 {
		t.Errorf("the user's Secret was changed: owners %v, data keys %d", got.OwnerReferences, len(got.Data))
	}
}

// TestEarlierBudgetsAreReplaced: the budgets of earlier versions, one of
// which kept the primary from ever being evicted, are deleted when Tusk
// made them, and kept when the user did.
func TestEarlierBudgetsAreReplaced(t *testing.T) {
	ns := newNamespace(t)
	c := newCluster(ns)
	create(t, c)
	get(t, ns, "pg", &policyv1.PodDisruptionBudget{}) // reconciled once
	c = get(t, ns, "pg", &tuskv1alpha1.PostgresCluster{})
	one := intstr.FromInt32(1)
	// As the earlier version made them: labelled with the cluster.
	mine := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "pg-primary", Namespace: ns, Labels: clusterLabels(c)},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tusk.dev/cluster": "pg"}}}}
	if err := controllerutil.SetControllerReference(c, mine, env.Client.Scheme()); err != nil {
		t.Fatal(err)
	}
	users := mine.DeepCopy()
	users.Name, users.OwnerReferences = "pg-replicas", nil
	create(t, mine)
	create(t, users)
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(mine), &policyv1.PodDisruptionBudget{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("the earlier budget %s is still there (%w)", mine.Name, err)
		}
		return nil
	})
	get(t, ns, "pg-replicas", &policyv1.PodDisruptionBudget{}) // the user's stays
}

func checkLabels(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s label %s=%q, want %q", what, k, got[k], v)
		}
	}
}

func checkOwnedBy(t *testing.T, obj client.Object, c *tuskv1alpha1.PostgresCluster) {
	t.Helper()
	owner := metav1.GetControllerOf(obj)
	if owner == nil || owner.UID != c.UID || owner.Kind != "PostgresCluster" {
		t.Errorf("%T %s is controlled by %+v, want the cluster", obj, obj.GetName(), owner)
	}
}

func checkCredentials(t *testing.T, c *tuskv1alpha1.PostgresCluster) {
	t.Helper()
	for name, user := range map[string]string{"pg-superuser": "postgres", "pg-app": "app"} {
		s := get(t, c.Namespace, name, &corev1.Secret{})
		checkOwnedBy(t, s, c)
		if s.Type != corev1.SecretTypeBasicAuth {
			t.Errorf("Secret %s has type %s", name, s.Type)
		}
		for _, key := range []string{keyUsername, keyPassword, keyDBName, keyHost, keyPort, keyURI, keyJDBCURI, keyPgpass, keyCACert} {
			if len(s.Data[key]) == 0 {
				t.Errorf("Secret %s has no %s", name, key)
			}
		}
		if string(s.Data[keyUsername]) != user || string(s.Data[keyHost]) != "pg-rw."+c.Namespace+".svc" {
			t.Errorf("Secret %s is for %s@%s", name, s.Data[keyUsername], s.Data[keyHost])
		}
	}
}

// keysOf is c's keys Secret, in the operator's namespace, once it exists.
func keysOf(t *testing.T, c *tuskv1alpha1.PostgresCluster) *corev1.Secret {
	t.Helper()
	return get(t, operatorNamespace, keysSecretName(c.Namespace, c.Name), &corev1.Secret{})
}

func checkTLSSecrets(t *testing.T, c *tuskv1alpha1.PostgresCluster) {
	t.Helper()
	ca := keysOf(t, c)
	for _, key := range []string{keyCACert, keyCAKey, keyOperatorCert, keyOperatorKey} {
		if len(ca.Data[key]) == 0 {
			t.Errorf("the keys Secret has no %s", key)
		}
	}
	if want := (map[string]string{LabelCluster: c.Name, LabelClusterNamespace: c.Namespace, LabelClusterUID: string(c.UID)}); !maps.Equal(ca.Labels, want) {
		t.Errorf("the keys Secret's labels are %v, want %v", ca.Labels, want)
	}
	public := get(t, c.Namespace, "pg-ca", &corev1.Secret{})
	checkOwnedBy(t, public, c)
	if !bytes.Equal(public.Data[keyCACert], ca.Data[keyCACert]) || len(public.Data) != 1 {
		t.Errorf("Secret pg-ca holds %v, want the CA's certificate alone", slices.Sorted(maps.Keys(public.Data)))
	}
	verifyServerCert(t, c, ca.Data[keyCACert])
	if operator, err := pki.ParseCertificate(ca.Data[keyOperatorCert]); err != nil || !pki.HasIdentity(operator, instanceapi.OperatorIdentity) {
		t.Errorf("the operator's certificate does not name its identity %s (%v)", instanceapi.OperatorIdentity, err)
	}
	repl := get(t, c.Namespace, "pg-replication", &corev1.Secret{})
	cert, err := pki.ParseCertificate(repl.Data[keyTLSCert])
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != replicationUser {
		t.Errorf("replication certificate for %q, want %q", cert.Subject.CommonName, replicationUser)
	}
	if err := pki.SignedBy(repl.Data[keyTLSCert], ca.Data[keyCACert]); err != nil {
		t.Errorf("replication certificate: %v", err)
	}
}

// TestOperatorCertificateOfAnOlderTuskIsReplaced: an operator certificate
// an older Tusk issued (CN tusk-operator alone, as a PostgresRole of that
// name gets) is replaced by one naming the operator's identity, which the
// instance managers require.
func TestOperatorCertificateOfAnOlderTuskIsReplaced(t *testing.T) {
	ns := newNamespace(t)
	c := newCluster(ns)
	create(t, c)
	ca := keysOf(t, c)
	old, err := pki.IssueClient(pki.KeyPair{CertPEM: ca.Data[keyCACert], KeyPEM: ca.Data[keyCAKey]}, OperatorClientCN, leafValidity, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca.Data[keyOperatorCert], ca.Data[keyOperatorKey] = old.CertPEM, old.KeyPEM
	if err := env.Client.Update(context.Background(), ca); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		var now corev1.Secret
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ca), &now); err != nil {
			return err
		}
		cert, err := pki.ParseCertificate(now.Data[keyOperatorCert])
		if err != nil {
			return err
		}
		if !pki.HasIdentity(cert, instanceapi.OperatorIdentity) {
			return fmt.Errorf("the operator's certificate has URIs %v, want %s", cert.URIs, instanceapi.OperatorIdentity)
		}
		return nil
	})
}

// verifyServerCert checks pg-server's certificate serves pg-rw.<ns>.svc
// under the CA caPEM.
func verifyServerCert(t *testing.T, c *tuskv1alpha1.PostgresCluster, caPEM []byte) {
	t.Helper()
	server := get(t, c.Namespace, "pg-server", &corev1.Secret{})
	if server.Type != corev1.SecretTypeTLS || len(server.Data[keyTLSKey]) == 0 {
		t.Errorf("Secret pg-server: type %s, %d bytes of key", server.Type, len(server.Data[keyTLSKey]))
	}
	block, _ := pem.Decode(server.Data[keyTLSCert])
	if block == nil {
		t.Fatal("pg-server's tls.crt is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate to verify with")
	}
	_, err = cert.Verify(x509.VerifyOptions{
		DNSName: "pg-rw." + c.Namespace + ".svc", Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		t.Errorf("pg-server's certificate: %v", err)
	}
}

// waitForEvent waits for an events.k8s.io/v1 Event with reason whose note
// mentions what.
func waitForEvent(t *testing.T, ns, reason, what string) *eventsv1.Event {
	t.Helper()
	var found *eventsv1.Event
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		var list eventsv1.EventList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for i, e := range list.Items {
			if e.Reason == reason && strings.Contains(e.Note, what) {
				found = &list.Items[i]
				return nil
			}
		}
		return fmt.Errorf("no Event %s about %s among %d", reason, what, len(list.Items))
	})
	return found
}

// versions are the resourceVersions of a cluster and everything it has.
func versions(t *testing.T, c *tuskv1alpha1.PostgresCluster) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	got := &tuskv1alpha1.PostgresCluster{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(c), got); err != nil {
		t.Fatal(err)
	}
	out["cluster"] = got.ResourceVersion
	keys := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: keysSecretName(c.Namespace, c.Name)}, keys); err == nil {
		out["keys"] = keys.ResourceVersion
	}
	lists := []client.ObjectList{&corev1.PodList{}, &corev1.PersistentVolumeClaimList{}, &corev1.ServiceList{},
		&corev1.SecretList{}, &corev1.ConfigMapList{}, &policyv1.PodDisruptionBudgetList{}}
	for _, list := range lists {
		if err := env.Client.List(ctx, list, client.InNamespace(c.Namespace)); err != nil {
			t.Fatal(err)
		}
		if err := meta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(client.Object)
			out[fmt.Sprintf("%T/%s", obj, obj.GetName())] = obj.GetResourceVersion()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// settle waits until nothing of the cluster changes for a while: the
// manager in the suite reconciles it too.
func settle(t *testing.T, c *tuskv1alpha1.PostgresCluster) map[string]string {
	t.Helper()
	var last map[string]string
	stable := 0
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		now := versions(t, c)
		if maps.Equal(now, last) {
			stable++
		} else {
			stable = 0
		}
		last = now
		if stable < 60 { // 3 s unchanged, longer than the 2 s requeue
			return errors.New("objects still change")
		}
		return nil
	})
	return last
}

// TestSettledClusterIsNotRewritten: reconciling a cluster whose objects and
// status are already right makes no API write, so an operator restart or
// resync changes nothing.
func TestSettledClusterIsNotRewritten(t *testing.T) {
	ctx := context.Background()
	cluster := newCluster(newNamespace(t))
	create(t, cluster)
	clusterWhen(t, client.ObjectKeyFromObject(cluster), creating)
	before := settle(t, cluster)

	secrets := secretReader{cached: env.Client, api: env.Client}
	r := &ClusterReconciler{Client: env.Client, Config: testConfig, api: env.Client,
		secrets: secrets, keys: keyStore{secrets: secrets, namespace: operatorNamespace}}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cluster)}
	for range 2 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	after := versions(t, cluster)
	for k, v := range after {
		if before[k] != v {
			t.Errorf("%s: resourceVersion went from %s to %s: a settled object was rewritten", k, before[k], v)
		}
	}
	if len(after) != len(before) {
		t.Errorf("objects before %v, after %v", before, after)
	}
}

func TestReconcileOfDeletedClusterIsQuiet(t *testing.T) {
	r := &ClusterReconciler{Client: env.Client, api: env.Client, keys: keyStore{namespace: operatorNamespace}}
	req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: newNamespace(t), Name: "gone"}}
	if res, err := r.Reconcile(context.Background(), req); err != nil || !res.IsZero() {
		t.Fatalf("reconcile of a missing cluster: %+v, %v; want no requeue and no error", res, err)
	}
}

func TestDeletedPodComesBackOnItsVolume(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cluster := newCluster(ns)
	create(t, cluster)
	clusterWhen(t, client.ObjectKeyFromObject(cluster), creating)
	pod := get(t, ns, "pg-1", &corev1.Pod{})
	pvc := get(t, ns, "pg-1", &corev1.PersistentVolumeClaim{})

	if err := env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		again := &corev1.Pod{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), again); err != nil {
			return err
		}
		if again.UID == pod.UID {
			return errors.New("still the old pod")
		}
		if claim := again.Spec.Volumes[0].PersistentVolumeClaim; claim == nil || claim.ClaimName != "pg-1" {
			return fmt.Errorf("the new pod mounts %+v", again.Spec.Volumes[0])
		}
		if again.Labels[LabelRole] != "primary" {
			return fmt.Errorf("the new pod has role %q", again.Labels[LabelRole])
		}
		return nil
	})
	samePVC := get(t, ns, "pg-1", &corev1.PersistentVolumeClaim{})
	if samePVC.UID != pvc.UID || samePVC.DeletionTimestamp != nil {
		t.Errorf("PVC pg-1 was replaced or is being deleted")
	}
	waitForEvent(t, ns, tuskv1alpha1.ReasonRecreatedInstance, "pg-1")
	c := clusterWhen(t, client.ObjectKeyFromObject(cluster), creating)
	if c.Status.LastInstanceSerial != 1 {
		t.Errorf("lastInstanceSerial %d: recreating a pod took a new serial", c.Status.LastInstanceSerial)
	}
}

func noPods(t *testing.T, ns string) {
	t.Helper()
	var pods corev1.PodList
	if err := env.Client.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods created for an invalid spec", len(pods.Items))
	}
}

func failed(reason string) func(c *tuskv1alpha1.PostgresCluster) error {
	return func(c *tuskv1alpha1.PostgresCluster) error {
		if c.Status.ObservedGeneration != c.Generation || c.Status.Phase != tuskv1alpha1.ClusterPhaseFailed {
			return fmt.Errorf("phase %q for generation %d/%d, want Failed", c.Status.Phase, c.Status.ObservedGeneration, c.Generation)
		}
		return condition(c, tuskv1alpha1.ConditionReady, metav1.ConditionFalse, reason)
	}
}

func TestMissingSuperuserSecretWaitsForIt(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cluster := newCluster(ns)
	cluster.Spec.SuperuserSecret = &corev1.LocalObjectReference{Name: "root"}
	create(t, cluster)
	key := client.ObjectKeyFromObject(cluster)
	clusterWhen(t, key, failed(tuskv1alpha1.ReasonSecretInvalid))
	waitForEvent(t, ns, tuskv1alpha1.ReasonSecretInvalid, "root")
	noPods(t, ns)

	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: ns},
		// The newline kubectl create secret --from-file keeps: not part of the password.
		Data: map[string][]byte{keyPassword: []byte("s3cret:\\\n")},
	})
	// The reconciler retries spec errors after a minute; an edit of the
	// cluster makes it look now.
	c := &tuskv1alpha1.PostgresCluster{}
	if err := env.Client.Get(ctx, key, c); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(c.DeepCopy())
	c.Annotations = map[string]string{"test.tusk.dev/touch": "1"}
	if err := env.Client.Patch(ctx, c, patch); err != nil {
		t.Fatal(err)
	}
	pod := get(t, ns, "pg-1", &corev1.Pod{})
	if v := findVolume(pod, "superuser"); v == nil || v.Secret == nil || v.Secret.SecretName != "root" {
		t.Errorf("pod pg-1 mounts %+v as the superuser's Secret, want root", v)
	}
	clusterWhen(t, key, creating)
	s := get(t, ns, "pg-superuser", &corev1.Secret{})
	if string(s.Data[keyPassword]) != "s3cret:\\" {
		t.Errorf("pg-superuser has password %q, not the user's", s.Data[keyPassword])
	}
}

func findVolume(pod *corev1.Pod, name string) *corev1.Volume {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == name {
			return &pod.Spec.Volumes[i]
		}
	}
	return nil
}

func TestDeletionFollowsReclaimPolicy(t *testing.T) {
	for _, policy := range []tuskv1alpha1.ReclaimPolicy{tuskv1alpha1.ReclaimDelete, tuskv1alpha1.ReclaimRetain} {
		t.Run(string(policy), func(t *testing.T) {
			ctx := context.Background()
			ns := newNamespace(t)
			cluster := newCluster(ns)
			cluster.Spec.Storage.ReclaimPolicy = policy
			create(t, cluster)
			clusterWhen(t, client.ObjectKeyFromObject(cluster), creating)
			pvc := get(t, ns, "pg-1", &corev1.PersistentVolumeClaim{})

			if err := env.Client.Delete(ctx, cluster); err != nil {
				t.Fatal(err)
			}
			waitClusterGone(t, cluster)
			after := &corev1.PersistentVolumeClaim{}
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(pvc), after)
			switch {
			case policy == tuskv1alpha1.ReclaimDelete && apierrors.IsNotFound(err):
				// Deleted (envtest keeps it only while pvc-protection holds it).
			case err != nil:
				t.Errorf("PVC pg-1: %v", err)
			case policy == tuskv1alpha1.ReclaimDelete && after.DeletionTimestamp == nil:
				t.Error("PVC pg-1 is not being deleted")
			case policy == tuskv1alpha1.ReclaimRetain &&
				(after.DeletionTimestamp != nil || after.ResourceVersion != pvc.ResourceVersion):
				t.Errorf("PVC pg-1 was touched: deletionTimestamp %v, resourceVersion %s → %s",
					after.DeletionTimestamp, pvc.ResourceVersion, after.ResourceVersion)
			}
			// The passwords the data keeps stay with the volumes (envtest
			// runs no garbage collector: ownership is what decides).
			for _, name := range []string{"pg-superuser", "pg-app"} {
				s := get(t, ns, name, &corev1.Secret{})
				owned := len(s.OwnerReferences) > 0
				if kept := !owned && s.Annotations[AnnotationKeptFor] == "pg"; kept != (policy == tuskv1alpha1.ReclaimRetain) {
					t.Errorf("Secret %s: owner references %v, annotations %v; want it kept for pg only with Retain", name, s.OwnerReferences, s.Annotations)
				}
			}
			if policy != tuskv1alpha1.ReclaimRetain {
				return
			}
			// Created again: the kept Secrets are taken over, their
			// passwords unchanged.
			before := get(t, ns, "pg-app", &corev1.Secret{})
			collectGarbage(t, ns, cluster.UID)
			again := newCluster(ns)
			create(t, again)
			clusterWhen(t, client.ObjectKeyFromObject(again), func(c *tuskv1alpha1.PostgresCluster) error {
				s := &corev1.Secret{}
				if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pg-app"}, s); err != nil {
					return err
				}
				if !metav1.IsControlledBy(s, c) || s.Annotations[AnnotationKeptFor] != "" {
					return fmt.Errorf("pg-app: owners %v, annotations %v; want it taken over", s.OwnerReferences, s.Annotations)
				}
				if string(s.Data[keyPassword]) != string(before.Data[keyPassword]) {
					return errors.New("pg-app got a new password")
				}
				return nil
			})
		})
	}
}

// collectGarbage deletes what owner owned, as the garbage collector that
// envtest does not run would.
func collectGarbage(t *testing.T, ns string, owner types.UID) {
	t.Helper()
	ctx := context.Background()
	lists := []client.ObjectList{&corev1.PodList{}, &corev1.SecretList{}, &corev1.ConfigMapList{}, &corev1.ServiceList{},
		&corev1.ServiceAccountList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{}, &policyv1.PodDisruptionBudgetList{},
		&networkingv1.NetworkPolicyList{}, &coordinationv1.LeaseList{}}
	for _, list := range lists {
		if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		err := meta.EachListItem(list, func(o runtime.Object) error {
			obj, ok := o.(client.Object)
			if !ok || !slices.ContainsFunc(obj.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == owner }) {
				return nil
			}
			return client.IgnoreNotFound(env.Client.Delete(ctx, obj, client.GracePeriodSeconds(0)))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestKeptMarkIsNotAKeyToOtherObjects: only a Secret Tusk kept is taken
// over; a ConfigMap of the name Tusk needs, carrying the same mark, is
// still someone else's.
func TestKeptMarkIsNotAKeyToOtherObjects(t *testing.T) {
	ns := newNamespace(t)
	create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pg-config", Namespace: ns,
		Labels: map[string]string{LabelCluster: "pg"}, Annotations: map[string]string{AnnotationKeptFor: "pg"}}})
	cluster := newCluster(ns)
	create(t, cluster)
	clusterWhen(t, client.ObjectKeyFromObject(cluster), func(c *tuskv1alpha1.PostgresCluster) error {
		if cond := meta.FindStatusCondition(c.Status.Conditions, tuskv1alpha1.ConditionReady); cond == nil || cond.Reason != tuskv1alpha1.ReasonObjectNotOwned {
			return fmt.Errorf("Ready %+v, want ObjectNotOwned", cond)
		}
		return nil
	})
	if cm := get(t, ns, "pg-config", &corev1.ConfigMap{}); len(cm.OwnerReferences) > 0 {
		t.Errorf("the ConfigMap was taken over: %v", cm.OwnerReferences)
	}
}

func TestUserCASignsTheServerCertificate(t *testing.T) {
	ns := newNamespace(t)
	ca, err := pki.NewCA("user CA", time.Hour*24*365, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "my-ca", Namespace: ns},
		Data:       map[string][]byte{keyCACert: ca.CertPEM, keyCAKey: ca.KeyPEM},
	})
	cluster := newCluster(ns)
	cluster.Spec.TLS = &tuskv1alpha1.TLSSpec{CASecret: &corev1.LocalObjectReference{Name: "my-ca"}}
	create(t, cluster)
	c := clusterWhen(t, client.ObjectKeyFromObject(cluster), creating)

	verifyServerCert(t, c, ca.CertPEM)
	own := keysOf(t, c)
	if _, ok := own.Data[keyCAKey]; ok {
		t.Error("the keys Secret holds a ca.key although the CA is the user's")
	}
	public := get(t, ns, "pg-ca", &corev1.Secret{})
	if string(public.Data[keyCACert]) != string(ca.CertPEM) || !bytes.Equal(public.Data[keyClientCACert], own.Data[keyClientCACert]) || len(public.Data) != 2 {
		t.Errorf("pg-ca holds %v, want the user's CA and the cluster's client CA, certificates only", slices.Sorted(maps.Keys(public.Data)))
	}
	if cm := get(t, ns, "pg-ca", &corev1.ConfigMap{}); cm.Data[keyCACert] != string(ca.CertPEM) {
		t.Error("ConfigMap pg-ca does not publish the user's CA")
	}
	// Client certificates come from the cluster's own CA, which is all
	// the instances trust them from: a certificate of another cluster
	// sharing the user's CA is refused.
	clientCA := own.Data[keyClientCACert]
	if len(clientCA) == 0 || len(own.Data[keyClientCAKey]) == 0 || string(clientCA) == string(ca.CertPEM) {
		t.Fatal("the keys Secret holds no client CA of the cluster's own")
	}
	replication := get(t, ns, "pg-replication", &corev1.Secret{})
	server := get(t, ns, "pg-server", &corev1.Secret{})
	for what, err := range map[string]error{
		"operator certificate by the client CA":    pki.SignedBy(own.Data[keyOperatorCert], clientCA),
		"replication certificate by the client CA": pki.SignedBy(replication.Data[keyTLSCert], clientCA),
		"server certificate by the user's CA":      pki.SignedBy(server.Data[keyTLSCert], ca.CertPEM),
	} {
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	if pki.SignedBy(replication.Data[keyTLSCert], ca.CertPEM) == nil || pki.SignedBy(own.Data[keyOperatorCert], ca.CertPEM) == nil {
		t.Error("a client certificate is signed by the user's CA, which other clusters may share")
	}
	if string(server.Data[keyCACert]) != string(clientCA) {
		t.Error("the server trusts client certificates from another CA than the cluster's own")
	}
	if string(replication.Data[keyCACert]) != string(ca.CertPEM) {
		t.Error("replicas do not verify their upstream with the user's CA")
	}
}

// TestNetworkPolicyFollowsTheSpec: every cluster gets the NetworkPolicy
// <cluster> (PostgreSQL open, the managers' port for the operator), and
// disabling it in the spec deletes it.
func TestNetworkPolicyFollowsTheSpec(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := newCluster(ns)
	create(t, c)
	np := get(t, ns, "pg", &networkingv1.NetworkPolicy{})
	if len(np.Spec.Ingress) != 2 || np.Spec.Ingress[0].From != nil || len(np.Spec.Ingress[1].From) != 1 ||
		np.Spec.PodSelector.MatchLabels[LabelCluster] != "pg" {
		t.Fatalf("NetworkPolicy pg: %+v; want PostgreSQL open and the managers' port for the operator", np.Spec)
	}

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		c.Spec.NetworkPolicy = &tuskv1alpha1.NetworkPolicySpec{Disabled: true}
		return env.Client.Update(ctx, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(np), &networkingv1.NetworkPolicy{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("NetworkPolicy pg still there with spec.networkPolicy.disabled (%w)", err)
		}
		return nil
	})
}

// TestProbeFollowsTheSpec: spec.monitoring.probe, with the API's defaults,
// runs the probe's Deployment with a client certificate for its role from
// the cluster's client CA; the pods are not the cluster's instances (no
// cluster label); removing the field removes both.
func TestProbeFollowsTheSpec(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := newCluster(ns)
	c.Spec.Monitoring = &tuskv1alpha1.MonitoringSpec{Probe: &tuskv1alpha1.ProbeSpec{}}
	create(t, c)
	dep := get(t, ns, "pg-probe", &appsv1.Deployment{})
	checkOwnedBy(t, dep, c)
	args := strings.Join(dep.Spec.Template.Spec.Containers[0].Command, " ")
	for _, want := range []string{"--rw-host pg-rw." + ns + ".svc", "--ro-host pg-ro." + ns + ".svc", "--interval 5s", "--objective 99.9"} {
		if !strings.Contains(args, want) {
			t.Errorf("the probe runs %q, want %q in it", args, want)
		}
	}
	if _, ok := dep.Spec.Template.Labels[LabelCluster]; ok {
		t.Errorf("the probe's pods carry %s: the cluster's Services and budget would count them", LabelCluster)
	}
	ca := get(t, ns, "pg-ca", &corev1.Secret{})
	secret := get(t, ns, "pg-probe-tls", &corev1.Secret{})
	cert, err := pki.ParseCertificate(secret.Data[keyTLSCert])
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != instanceapi.ProbeRole || pki.SignedBy(secret.Data[keyTLSCert], ca.Data[keyCACert]) != nil ||
		string(secret.Data[keyCACert]) != string(ca.Data[keyCACert]) {
		t.Errorf("the probe's certificate is for %q and trusts %d bytes; want %q from the cluster's CA, trusting it", cert.Subject.CommonName, len(secret.Data[keyCACert]), instanceapi.ProbeRole)
	}

	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		c.Spec.Monitoring = nil
		return env.Client.Update(ctx, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		for name, obj := range map[string]client.Object{"pg-probe": &appsv1.Deployment{}, "pg-probe-tls": &corev1.Secret{}} {
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s still there without spec.monitoring.probe (%w)", name, err)
			}
		}
		return nil
	})
}
