//go:build integration

package controller

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/pooler"
	"tusk.dev/tusk/internal/testenv"
)

func newPooler(ns, name, cluster string) *tuskv1alpha1.PostgresPooler {
	return &tuskv1alpha1.PostgresPooler{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       tuskv1alpha1.PostgresPoolerSpec{Cluster: corev1.LocalObjectReference{Name: cluster}},
	}
}

// poolerWhen waits until the pooler satisfies cond, which explains why not.
func poolerWhen(t *testing.T, p *tuskv1alpha1.PostgresPooler, cond func(p *tuskv1alpha1.PostgresPooler) error) *tuskv1alpha1.PostgresPooler {
	t.Helper()
	got := &tuskv1alpha1.PostgresPooler{}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		return cond(got)
	})
	return got
}

// poolerReady checks the pooler's Ready condition for its generation.
func poolerReady(status metav1.ConditionStatus, reason string) func(p *tuskv1alpha1.PostgresPooler) error {
	return func(p *tuskv1alpha1.PostgresPooler) error {
		cond := meta.FindStatusCondition(p.Status.Conditions, tuskv1alpha1.ConditionReady)
		switch {
		case cond == nil:
			return fmt.Errorf("no Ready condition in %+v", p.Status)
		case cond.Status != status || cond.Reason != reason:
			return fmt.Errorf("Ready=%s (%s: %s), want %s %s", cond.Status, cond.Reason, cond.Message, status, reason)
		case p.Status.ObservedGeneration != p.Generation || cond.ObservedGeneration != p.Generation:
			return fmt.Errorf("status of generation %d, want %d", p.Status.ObservedGeneration, p.Generation)
		}
		return nil
	}
}

func checkOwnedByPooler(t *testing.T, obj client.Object, p *tuskv1alpha1.PostgresPooler) {
	t.Helper()
	owner := metav1.GetControllerOf(obj)
	if owner == nil || owner.UID != p.UID || owner.Kind != "PostgresPooler" {
		t.Errorf("%T %s is controlled by %+v, want the pooler", obj, obj.GetName(), owner)
	}
}

// parseCert parses the PEM certificate of a Secret's key.
func parseCert(t *testing.T, s *corev1.Secret, key string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(s.Data[key])
	if block == nil {
		t.Fatalf("Secret %s: %s is not PEM", s.Name, key)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestPoolerOnAClusterGetsItsObjects: a pooler on an existing cluster gets
// its ConfigMap, StatefulSet (`tusk pooler` with the designed flags, the
// two Secrets mounted, named by the headless Service), Services, budget
// and certificates (the server's for the Service's names under the
// cluster's CA, the auth role's from the client CA), all controlled by
// the pooler; it is Ready once the StatefulSet's pods are, and the scale
// subresource scales the StatefulSet.
func TestPoolerOnAClusterGetsItsObjects(t *testing.T) {
	ns := newNamespace(t)
	cluster := newCluster(ns)
	create(t, cluster)
	c := clusterWhen(t, client.ObjectKeyFromObject(cluster), creating)
	p := newPooler(ns, "pg-pooler", "pg")
	create(t, p)
	p = poolerWhen(t, p, poolerReady(metav1.ConditionFalse, tuskv1alpha1.ReasonPodsNotReady))

	cm := get(t, ns, "pg-pooler-config", &corev1.ConfigMap{})
	checkOwnedByPooler(t, cm, p)
	d := get(t, ns, "pg-pooler", &appsv1.StatefulSet{})
	checkOwnedByPooler(t, d, p)
	checkPoolerPods(t, d)
	checkOwnedByPooler(t, get(t, ns, "pg-pooler", &corev1.Service{}), p)
	peers := get(t, ns, "pg-pooler-peers", &corev1.Service{})
	checkOwnedByPooler(t, peers, p)
	if peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses || d.Spec.ServiceName != peers.Name ||
		d.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("the peers' Service: clusterIP %q, not ready addresses published %v; the StatefulSet's Service %q, pod management %s",
			peers.Spec.ClusterIP, peers.Spec.PublishNotReadyAddresses, d.Spec.ServiceName, d.Spec.PodManagementPolicy)
	}
	checkOwnedByPooler(t, get(t, ns, "pg-pooler", &policyv1.PodDisruptionBudget{}), p)
	checkPoolerCertificates(t, c, p)
	waitForEvent(t, ns, tuskv1alpha1.ReasonPoolerCreated, "pg")

	// The StatefulSet's pods become ready (as kube-controller-manager
	// would report them): the pooler is Ready.
	d.Status = appsv1.StatefulSetStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
	if err := env.Client.Status().Update(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	p = poolerWhen(t, p, poolerReady(metav1.ConditionTrue, tuskv1alpha1.ReasonPoolerReady))
	if p.Status.ReadyInstances != 2 || p.Status.Selector != LabelPooler+"=pg-pooler" {
		t.Errorf("status: %d ready, selector %q", p.Status.ReadyInstances, p.Status.Selector)
	}
	checkPoolerSettled(t, p, d)

	scale := &autoscalingv1.Scale{}
	if err := env.Client.SubResource("scale").Get(t.Context(), p, scale); err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 4
	if err := env.Client.SubResource("scale").Update(t.Context(), p, client.WithSubResourceBody(scale)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 4 {
			return fmt.Errorf("the StatefulSet asks for %v pods, want 4", d.Spec.Replicas)
		}
		return nil
	})
	p = poolerWhen(t, p, poolerReady(metav1.ConditionFalse, tuskv1alpha1.ReasonPodsNotReady))
	waitForEvent(t, ns, tuskv1alpha1.ReasonPoolerUpdated, "generation 2")
	scale = &autoscalingv1.Scale{}
	if err := env.Client.SubResource("scale").Get(t.Context(), p, scale); err != nil {
		t.Fatal(err)
	}
	if scale.Spec.Replicas != 4 || scale.Status.Replicas != 2 || scale.Status.Selector != LabelPooler+"=pg-pooler" {
		t.Errorf("the scale subresource: %+v, want 4 asked for, 2 ready, the pods' selector", scale)
	}
}

// checkPoolerSettled: a pass over a settled pooler (woken by a pod that
// stops being ready) changes none of its objects: the certificates are
// kept, not issued again, and the StatefulSet's spec is the same. (An
// update that changes nothing leaves the resourceVersion as it was, so
// this does not tell whether the pass sent one.)
func checkPoolerSettled(t *testing.T, p *tuskv1alpha1.PostgresPooler, d *appsv1.StatefulSet) {
	t.Helper()
	objects := []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}, &corev1.Secret{}, &corev1.Service{}, &corev1.Service{},
		&policyv1.PodDisruptionBudget{}, &appsv1.StatefulSet{}}
	names := []string{"pg-pooler-config", "pg-pooler-tls", "pg-pooler-auth-tls", "pg-pooler", "pg-pooler-peers", "pg-pooler", "pg-pooler"}
	before := map[string]string{}
	for i, o := range objects {
		before[fmt.Sprintf("%T %s", o, names[i])] = get(t, p.Namespace, names[i], o).GetResourceVersion()
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d); err != nil {
		t.Fatal(err)
	}
	d.Status.ReadyReplicas, d.Status.AvailableReplicas = 1, 1
	if err := env.Client.Status().Update(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	poolerWhen(t, p, func(p *tuskv1alpha1.PostgresPooler) error {
		if p.Status.ReadyInstances != 1 {
			return fmt.Errorf("%d ready instances, want 1", p.Status.ReadyInstances)
		}
		return poolerReady(metav1.ConditionFalse, tuskv1alpha1.ReasonPodsNotReady)(p)
	})
	for i, o := range objects {
		key := fmt.Sprintf("%T %s", o, names[i])
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: p.Namespace, Name: names[i]}, o); err != nil {
			t.Fatal(err)
		}
		if _, isStatefulSet := o.(*appsv1.StatefulSet); !isStatefulSet && o.GetResourceVersion() != before[key] {
			t.Errorf("%s was written again by a pass that changed nothing", key)
		}
		if got, ok := o.(*appsv1.StatefulSet); ok && got.Generation != d.Generation {
			t.Errorf("the StatefulSet's spec was written again (generation %d, was %d)", got.Generation, d.Generation)
		}
	}
	d.Status.ReadyReplicas, d.Status.AvailableReplicas = 2, 2
	if err := env.Client.Status().Update(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	poolerWhen(t, p, poolerReady(metav1.ConditionTrue, tuskv1alpha1.ReasonPoolerReady))
}

// checkPoolerPods checks the StatefulSet runs `tusk pooler` as designed.
func checkPoolerPods(t *testing.T, d *appsv1.StatefulSet) {
	t.Helper()
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 1 {
		t.Fatalf("%d containers, %d init containers; want one of each", len(spec.Containers), len(spec.InitContainers))
	}
	ctr := spec.Containers[0]
	want := []string{"/tusk-bin/tusk", "pooler", "--pgbouncer=/usr/sbin/pgbouncer", "--config=/etc/tusk/pooler/pgbouncer.ini",
		"--run-dir=/run/tusk-pooler", "--port=8000", "--tls-cert=/etc/tusk/pooler-tls/tls.crt", "--tls-key=/etc/tusk/pooler-tls/tls.key",
		"--client-ca=/etc/tusk/pooler-tls/client-ca.crt", "--auth-cert=/etc/tusk/pooler-auth-tls/tls.crt"}
	if !slices.Equal(ctr.Command, want) || ctr.Image != testConfig.PoolerImage {
		t.Errorf("the pooler runs %s %v, want %s %v", ctr.Image, ctr.Command, testConfig.PoolerImage, want)
	}
	if init := spec.InitContainers[0]; init.Image != testConfig.InstanceManagerImage {
		t.Errorf("the tusk binary comes from %s, want %s", init.Image, testConfig.InstanceManagerImage)
	}
	mounted := map[string]string{}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			mounted[v.Name] = v.Secret.SecretName
		}
	}
	for _, m := range ctr.VolumeMounts {
		if name, ok := mounted[m.Name]; ok {
			mounted[m.Name] = name + " at " + m.MountPath
		}
	}
	if mounted["pooler-tls"] != "pg-pooler-tls at /etc/tusk/pooler-tls" || mounted["pooler-auth-tls"] != "pg-pooler-auth-tls at /etc/tusk/pooler-auth-tls" {
		t.Errorf("Secrets mounted: %v", mounted)
	}
	if d.Spec.Template.Annotations[AnnotationPoolerInputs] == "" {
		t.Error("the pod template has no hash of the configuration and certificates")
	}
}

// checkPoolerCertificates checks the server certificate verifies for the
// Service's names under the cluster's CA, and the auth certificate is the
// auth role's from the client CA.
func checkPoolerCertificates(t *testing.T, c *tuskv1alpha1.PostgresCluster, p *tuskv1alpha1.PostgresPooler) {
	t.Helper()
	keys := keysOf(t, c)
	server := get(t, p.Namespace, "pg-pooler-tls", &corev1.Secret{})
	checkOwnedByPooler(t, server, p)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(keys.Data[keyCACert])
	cert := parseCert(t, server, keyTLSCert)
	for _, name := range []string{"pg-pooler", "pg-pooler." + p.Namespace, "pg-pooler." + p.Namespace + ".svc", "localhost"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the pooler's server certificate for %s: %v", name, err)
		}
	}
	if string(server.Data[keyCACert]) != string(keys.Data[keyCACert]) || len(server.Data[keyPoolerClientCA]) == 0 {
		t.Errorf("Secret pg-pooler-tls: ca.crt is not the cluster's CA, or client-ca.crt is missing")
	}
	auth := get(t, p.Namespace, "pg-pooler-auth-tls", &corev1.Secret{})
	checkOwnedByPooler(t, auth, p)
	clientRoots := x509.NewCertPool()
	clientRoots.AppendCertsFromPEM(server.Data[keyPoolerClientCA])
	ac := parseCert(t, auth, keyTLSCert)
	if _, err := ac.Verify(x509.VerifyOptions{Roots: clientRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || ac.Subject.CommonName != pooler.AuthRole {
		t.Errorf("the auth certificate is for %q (%v), want %s from the client CA", ac.Subject.CommonName, err, pooler.AuthRole)
	}
}

// TestPoolerRefusals: each pooler that cannot work says why in its Ready
// condition and a Warning Event, and gets no objects.
func TestPoolerRefusals(t *testing.T) {
	ns := newNamespace(t)
	one := newCluster(ns)
	one.Name, one.Spec.Instances = "solo", 1
	create(t, one)
	create(t, newCluster(ns))
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "taken-config", Namespace: ns}}
	create(t, foreign)
	create(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 5432}}}})
	create(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "named-peers", Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 5432}}}})
	cases := []struct {
		pooler *tuskv1alpha1.PostgresPooler
		reason string
	}{
		{newPooler(ns, "lost", "nowhere"), tuskv1alpha1.ReasonClusterNotFound},
		{roPooler(newPooler(ns, "solo-ro-pooler", "solo")), tuskv1alpha1.ReasonNoReplicas},
		{newPooler(ns, "pg", "solo"), tuskv1alpha1.ReasonNameCollision},
		{newPooler(ns, "pg-rw", "pg"), tuskv1alpha1.ReasonNameCollision},
		{newPooler(ns, "solo-probe", "pg"), tuskv1alpha1.ReasonNameCollision},
		{newPooler(ns, "taken", "pg"), tuskv1alpha1.ReasonObjectNotOwned},
		{newPooler(ns, "held", "pg"), tuskv1alpha1.ReasonObjectNotOwned},
		{newPooler(ns, "named", "pg"), tuskv1alpha1.ReasonObjectNotOwned},
	}
	for _, tc := range cases {
		create(t, tc.pooler)
	}
	for _, tc := range cases {
		p := poolerWhen(t, tc.pooler, poolerReady(metav1.ConditionFalse, tc.reason))
		msg := meta.FindStatusCondition(p.Status.Conditions, tuskv1alpha1.ConditionReady).Message
		t.Logf("%s: %s", p.Name, msg)
		waitForEvent(t, ns, tc.reason, msg)
		for _, o := range []client.Object{&appsv1.StatefulSet{}, &corev1.Service{}, &corev1.Secret{}, &corev1.ConfigMap{}} {
			for _, name := range poolerObjectNames(p) {
				err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, o)
				if err == nil && metav1.IsControlledBy(o, p) {
					t.Errorf("refused pooler %s made %T %s", p.Name, o, name)
				}
			}
		}
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(foreign), foreign); err != nil || len(foreign.OwnerReferences) != 0 {
		t.Errorf("the user's ConfigMap taken-config: %v, owners %v", err, foreign.OwnerReferences)
	}
}

func roPooler(p *tuskv1alpha1.PostgresPooler) *tuskv1alpha1.PostgresPooler {
	p.Spec.Type = tuskv1alpha1.PoolerTypeRO
	return p
}

// TestPoolerWaitsForItsCluster: a pooler created before its cluster is
// refused until the cluster appears, then gets its objects; deleting the
// pooler deletes them (they are its own: garbage collection, which envtest
// does not run, follows the owner references).
func TestPoolerWaitsForItsCluster(t *testing.T) {
	ns := newNamespace(t)
	p := newPooler(ns, "early", "pg")
	create(t, p)
	p = poolerWhen(t, p, poolerReady(metav1.ConditionFalse, tuskv1alpha1.ReasonClusterNotFound))
	create(t, newCluster(ns))
	p = poolerWhen(t, p, poolerReady(metav1.ConditionFalse, tuskv1alpha1.ReasonPodsNotReady))
	owned := []client.Object{get(t, ns, "early", &appsv1.StatefulSet{}), get(t, ns, "early", &corev1.Service{}),
		get(t, ns, "early-peers", &corev1.Service{}),
		get(t, ns, "early-config", &corev1.ConfigMap{}), get(t, ns, "early-tls", &corev1.Secret{}), get(t, ns, "early-auth-tls", &corev1.Secret{})}
	for _, o := range owned {
		checkOwnedByPooler(t, o, p)
		if ref := metav1.GetControllerOf(o); ref == nil || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
			t.Errorf("%T %s does not go with the pooler: %+v", o, o.GetName(), ref)
		}
	}
	if err := env.Client.Delete(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), &tuskv1alpha1.PostgresPooler{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(errors.New("the pooler is still there"), err)
	})
}

// TestPoolerReplacesAnEarlierTusksDeployment: a pooler an earlier Tusk
// ran as a Deployment gets its StatefulSet beside it; the Deployment (the
// pooler's own) is deleted once the StatefulSet's pods are ready, not
// before: clients keep a pod to go to. A Deployment of another pooler's
// name that the pooler does not control is left alone.
func TestPoolerReplacesAnEarlierTusksDeployment(t *testing.T) {
	ns := newNamespace(t)
	create(t, newCluster(ns))
	p := newPooler(ns, "old", "pg")
	create(t, p)
	p = poolerWhen(t, p, poolerReady(metav1.ConditionFalse, tuskv1alpha1.ReasonPodsNotReady))
	sts := get(t, ns, "old", &appsv1.StatefulSet{})
	// The earlier Tusk's Deployment, made with the pooler as controller.
	old := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: ns, Labels: poolerLabels(p)},
		Spec:       appsv1.DeploymentSpec{Selector: sts.Spec.Selector, Template: *sts.Spec.Template.DeepCopy()},
	}
	if err := controllerutil.SetControllerReference(p, old, env.Client.Scheme()); err != nil {
		t.Fatal(err)
	}
	create(t, old)
	// A pass while the StatefulSet has no ready pod keeps the Deployment.
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 1}
	if err := env.Client.Status().Update(t.Context(), sts); err != nil {
		t.Fatal(err)
	}
	poolerWhen(t, p, func(p *tuskv1alpha1.PostgresPooler) error {
		if p.Status.ReadyInstances != 1 {
			return fmt.Errorf("%d ready instances, want 1", p.Status.ReadyInstances)
		}
		return nil
	})
	get(t, ns, "old", &appsv1.Deployment{})

	sts.Status.ReadyReplicas, sts.Status.AvailableReplicas = 2, 2
	if err := env.Client.Status().Update(t.Context(), sts); err != nil {
		t.Fatal(err)
	}
	poolerWhen(t, p, poolerReady(metav1.ConditionTrue, tuskv1alpha1.ReasonPoolerReady))
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(old), &appsv1.Deployment{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(errors.New("the earlier Tusk's Deployment is still there"), err)
	})
}
