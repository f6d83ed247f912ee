package controller

import (
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

func controlledBy(apiVersion, kind, name string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID("u-" + name), Controller: ptr.To(true)}
}

var (
	byCluster = controlledBy(tuskv1alpha1.GroupVersion.String(), "PostgresCluster", "pg")
	byRole    = controlledBy(tuskv1alpha1.GroupVersion.String(), "PostgresRole", "reader")
	byBackup  = controlledBy(tuskv1alpha1.GroupVersion.String(), "PostgresBackup", "pg")
	byOther   = controlledBy(appsv1.SchemeGroupVersion.String(), "Deployment", "pg")
	notOwning = metav1.OwnerReference{APIVersion: tuskv1alpha1.GroupVersion.String(), Kind: "PostgresCluster", Name: "other", UID: "u-other"}
)

// stuffedMeta is metadata as a tenant may write it: a Tusk label, and as
// much else as the API server takes.
func stuffedMeta(name string, owners ...metav1.OwnerReference) metav1.ObjectMeta {
	labels := map[string]string{tuskv1alpha1.LabelCluster: "pg", LabelInstance: "pg-1"}
	for i := range 50 {
		labels["stuffing.example/l"+strings.Repeat("x", i)] = strings.Repeat("v", 63)
	}
	return metav1.ObjectMeta{
		Name: name, Namespace: "tenant", Labels: labels, OwnerReferences: owners,
		Annotations:   map[string]string{"note": strings.Repeat("a", 200<<10), AnnotationHash: "abc", AnnotationKeptFor: "pg"},
		Finalizers:    []string{"example.com/" + strings.Repeat("f", 200)},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}
}

// trimmedMeta is what the cache keeps of stuffedMeta of an object Tusk
// did not make.
func trimmedMeta(name string, controller *metav1.OwnerReference) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name: name, Namespace: "tenant", Labels: map[string]string{tuskv1alpha1.LabelCluster: "pg", LabelInstance: "pg-1"},
		Annotations: map[string]string{AnnotationKeptFor: "pg", annotationTrimmed: "true"},
	}
	if controller != nil {
		m.OwnerReferences = []metav1.OwnerReference{*controller}
	}
	return m
}

func wholeMeta(name string, owners ...metav1.OwnerReference) metav1.ObjectMeta {
	m := stuffedMeta(name, owners...)
	m.ManagedFields = nil
	return m
}

// TestTrimSecretsAndConfigMaps: the cache keeps whole (but for their
// managedFields) the Secrets and ConfigMaps Tusk makes, whatever their
// size; of any other labelled one it keeps the names, Tusk's labels, the
// mark of a kept Secret and the controller, and marks it trimmed.
func TestTrimSecretsAndConfigMaps(t *testing.T) {
	t.Parallel()
	big := map[string][]byte{"payload": []byte(strings.Repeat("x", 1<<20))}
	bigText := map[string]string{"payload": strings.Repeat("x", 1<<20)}
	small := map[string][]byte{keyPassword: []byte("s3cret"), keyUsername: []byte("postgres")}
	tests := []struct {
		name     string
		in, want any
	}{
		{"the cluster's CA Secret, however large",
			&corev1.Secret{ObjectMeta: stuffedMeta("pg-ca", byCluster), Data: big},
			&corev1.Secret{ObjectMeta: wholeMeta("pg-ca", byCluster), Data: big}},
		{"a role's certificate Secret",
			&corev1.Secret{ObjectMeta: stuffedMeta("reader-client-tls", byRole), Data: big},
			&corev1.Secret{ObjectMeta: wholeMeta("reader-client-tls", byRole), Data: big}},
		{"the cluster's config ConfigMap, however large",
			&corev1.ConfigMap{ObjectMeta: stuffedMeta("pg-config", byCluster), Data: bigText},
			&corev1.ConfigMap{ObjectMeta: wholeMeta("pg-config", byCluster), Data: bigText}},
		{"a Secret the cluster controls under a name Tusk never gives",
			&corev1.Secret{ObjectMeta: stuffedMeta("pg-stuffing", byCluster), Data: big},
			&corev1.Secret{ObjectMeta: trimmedMeta("pg-stuffing", &byCluster)}},
		{"a Secret of Tusk's name that another kind controls",
			&corev1.Secret{ObjectMeta: stuffedMeta("pg-ca", byOther), Data: big},
			&corev1.Secret{ObjectMeta: trimmedMeta("pg-ca", &byOther)}},
		{"a Secret of a Tusk name for a kind Tusk makes no Secret for",
			&corev1.Secret{ObjectMeta: stuffedMeta("pg-ca", byBackup), Data: big},
			&corev1.Secret{ObjectMeta: trimmedMeta("pg-ca", &byBackup)}},
		{"a Secret owned, not controlled, by a cluster",
			&corev1.Secret{ObjectMeta: stuffedMeta("other-ca", notOwning), StringData: bigText},
			&corev1.Secret{ObjectMeta: trimmedMeta("other-ca", nil)}},
		{"a kept credential Secret keeps its mark (its data is read from the API server)",
			&corev1.Secret{ObjectMeta: stuffedMeta("pg-superuser"), Data: small},
			&corev1.Secret{ObjectMeta: trimmedMeta("pg-superuser", nil)}},
		{"a labelled ConfigMap of the user's, large",
			&corev1.ConfigMap{ObjectMeta: stuffedMeta("stuffing"), Data: bigText, BinaryData: big},
			&corev1.ConfigMap{ObjectMeta: trimmedMeta("stuffing", nil)}},
		{"a labelled ConfigMap of the user's, small",
			&corev1.ConfigMap{ObjectMeta: stuffedMeta("small"), Data: map[string]string{"a": "b"}},
			&corev1.ConfigMap{ObjectMeta: trimmedMeta("small", nil)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := trimSecretsAndConfigMaps(testOperatorNamespace)(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tt.want, got) {
				t.Errorf("trimmed to %s, want %s", summary(got), summary(tt.want))
			}
		})
	}
}

// TestTusksSecretsAndConfigMapsAreKeptWhole: the Secrets and ConfigMaps
// the reconcilers make keep every key in the cache (a key lost there would
// read as missing, and be made again on every pass).
func TestTusksSecretsAndConfigMapsAreKeptWhole(t *testing.T) {
	t.Parallel()
	c := defaultCluster()
	owner := controlledBy(tuskv1alpha1.GroupVersion.String(), "PostgresCluster", c.Name)
	creds := credentials{username: "app", password: "pw", dbname: "app"}
	secrets := []*corev1.Secret{
		credentialSecret(c, superuserSecretName(c), creds, []byte(fakeCAPEM)),
		credentialSecret(c, appSecretName(c), creds, []byte(fakeCAPEM)),
		secret(c, caSecretName(c), corev1.SecretTypeOpaque, map[string][]byte{keyCACert: []byte(fakeCAPEM)}),
		secret(c, serverSecretName(c), corev1.SecretTypeTLS, map[string][]byte{keyTLSCert: []byte(fakeCAPEM)}),
		secret(c, replicationSecretName(c), corev1.SecretTypeTLS, map[string][]byte{keyTLSCert: []byte(fakeCAPEM)}),
		secret(c, probeSecretName(c), corev1.SecretTypeTLS, map[string][]byte{keyTLSCert: []byte(fakeCAPEM)}),
	}
	for _, s := range secrets {
		s.OwnerReferences = []metav1.OwnerReference{owner}
		s.Data["padding"] = []byte(strings.Repeat("p", 64<<10))
		want := s.DeepCopy()
		if got, _ := trimSecretsAndConfigMaps(testOperatorNamespace)(s); !reflect.DeepEqual(want, got) {
			t.Errorf("the cache trims Tusk's Secret %s to %s", want.Name, summary(got))
		}
	}
	for _, name := range []string{caConfigMapName(c), configConfigMapName(c)} {
		cm := &corev1.ConfigMap{ObjectMeta: objectMeta(c, name), Data: map[string]string{"padding": strings.Repeat("p", 64<<10)}}
		cm.OwnerReferences = []metav1.OwnerReference{owner}
		want := cm.DeepCopy()
		if got, _ := trimSecretsAndConfigMaps(testOperatorNamespace)(cm); !reflect.DeepEqual(want, got) {
			t.Errorf("the cache trims Tusk's ConfigMap %s to %s", name, summary(got))
		}
	}
}

// testOperatorNamespace is the operator's namespace in these tests.
const testOperatorNamespace = "tusk-system"

// TestKeysSecretsAreKeptWholeInTheOperatorsNamespaceOnly: a cluster's keys
// Secret, which no Tusk object can own across namespaces, keeps its keys
// in the cache; the same name and labels elsewhere (a tenant's copy), or
// another labelled Secret of the operator's namespace, are trimmed.
func TestKeysSecretsAreKeptWholeInTheOperatorsNamespaceOnly(t *testing.T) {
	t.Parallel()
	labels := map[string]string{LabelCluster: "pg", LabelClusterNamespace: "shop", LabelClusterUID: "0f1e"}
	for _, tc := range []struct {
		namespace, name string
		whole           bool
	}{
		{testOperatorNamespace, keysSecretName("shop", "pg"), true},
		{"shop", keysSecretName("shop", "pg"), false},
		{testOperatorNamespace, keysSecretName("shop", "other"), false},
		{testOperatorNamespace, "pg-ca", false},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: tc.name, Labels: maps.Clone(labels)},
			Data: map[string][]byte{keyCAKey: []byte(fakeCAPEM)}}
		got, _ := trimSecretsAndConfigMaps(testOperatorNamespace)(s)
		if whole := len(got.(*corev1.Secret).Data) > 0; whole != tc.whole {
			t.Errorf("the cache keeps %s/%s as %s, want whole %t", tc.namespace, tc.name, summary(got), tc.whole)
		}
	}
}

// summary tells a Secret's or ConfigMap's metadata and the size of its
// data, for a message.
func summary(o any) string {
	switch o := o.(type) {
	case *corev1.Secret:
		return fmt.Sprintf("Secret{labels %d, annotations %d (%d bytes), owners %v, finalizers %d, managedFields %d, data %d bytes, stringData %d bytes}",
			len(o.Labels), len(o.Annotations), stringDataBytes(o.Annotations), o.OwnerReferences, len(o.Finalizers), len(o.ManagedFields),
			dataBytes(o.Data), stringDataBytes(o.StringData))
	case *corev1.ConfigMap:
		return fmt.Sprintf("ConfigMap{labels %d, annotations %d (%d bytes), owners %v, finalizers %d, managedFields %d, data %d bytes, binaryData %d bytes}",
			len(o.Labels), len(o.Annotations), stringDataBytes(o.Annotations), o.OwnerReferences, len(o.Finalizers), len(o.ManagedFields),
			stringDataBytes(o.Data), dataBytes(o.BinaryData))
	}
	return fmt.Sprintf("%T", o)
}

func dataBytes(m map[string][]byte) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}

func stringDataBytes(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}

// TestTrimLabelledObjects: of the other kinds the cache selects by Tusk's
// label, it keeps only Tusk's labels and annotations; of an object no
// Tusk object controls, no spec or status either (its controller kept,
// marked trimmed), but for the fields of a volume claim a deleted cluster
// kept, which a new cluster of its name adopts.
func TestTrimLabelledObjects(t *testing.T) {
	bigSpec := corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Env: []corev1.EnvVar{{Name: "E", Value: strings.Repeat("e", 500<<10)}}}}}
	rules := []rbacv1.PolicyRule{{Verbs: []string{"get"}, Resources: []string{strings.Repeat("r", 300<<10)}}}
	tuskMeta := func(name string, owners ...metav1.OwnerReference) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "tenant", OwnerReferences: owners,
			Labels:      map[string]string{tuskv1alpha1.LabelCluster: "pg", LabelInstance: "pg-1"},
			Annotations: map[string]string{AnnotationHash: "abc", AnnotationKeptFor: "pg"}}
	}
	trimmedSpec := func(name string, controller *metav1.OwnerReference) metav1.ObjectMeta {
		m := tuskMeta(name)
		m.Annotations[annotationTrimmed] = "true"
		if controller != nil {
			m.OwnerReferences = []metav1.OwnerReference{*controller}
		}
		return m
	}
	size := resource.MustParse("1Gi")
	class := "local"
	cases := []struct {
		name     string
		in, want any
	}{
		{"the cluster's pod: whole but for others' labels and annotations",
			&corev1.Pod{ObjectMeta: stuffedMeta("pg-1", byCluster), Spec: bigSpec, Status: corev1.PodStatus{PodIP: "10.0.0.1"}},
			&corev1.Pod{ObjectMeta: func() metav1.ObjectMeta {
				m := tuskMeta("pg-1", byCluster)
				m.Finalizers = stuffedMeta("pg-1").Finalizers
				return m
			}(), Spec: bigSpec, Status: corev1.PodStatus{PodIP: "10.0.0.1"}}},
		{"a tenant's labelled pod",
			&corev1.Pod{ObjectMeta: stuffedMeta("pg-9"), Spec: bigSpec, Status: corev1.PodStatus{PodIP: "10.0.0.9"}},
			&corev1.Pod{ObjectMeta: trimmedSpec("pg-9", nil)}},
		{"a labelled role another controls",
			&rbacv1.Role{ObjectMeta: stuffedMeta("pg-instance", byOther, notOwning), Rules: rules},
			&rbacv1.Role{ObjectMeta: trimmedSpec("pg-instance", &byOther)}},
		{"a labelled Service",
			&corev1.Service{ObjectMeta: stuffedMeta("pg-rw"), Spec: corev1.ServiceSpec{ExternalName: strings.Repeat("n", 200)}},
			&corev1.Service{ObjectMeta: trimmedSpec("pg-rw", nil)}},
		{"a claim a deleted cluster kept",
			&corev1.PersistentVolumeClaim{ObjectMeta: stuffedMeta("pg-1"), Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: &class, VolumeName: "pv-1", Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"x": strings.Repeat("y", 60)}}},
				Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}},
			&corev1.PersistentVolumeClaim{ObjectMeta: tuskMeta("pg-1"), Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: &class, VolumeName: "pv-1", Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}}},
				Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := trimLabelledObjects(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("trimmed to\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}
