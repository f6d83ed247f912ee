package controller

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// The cache selects Secrets and ConfigMaps by the label tusk.dev/cluster,
// which anyone who may create them can set: a tenant's labelled objects of
// a MiB each would fill the one operator every cluster depends on. So the
// cache keeps in full only the Secrets and ConfigMaps Tusk makes: those a
// Tusk object controls and that bear one of the names Tusk gives them (a
// fixed few per owner, whatever the owner's tenant does). Of any other it
// keeps what names and links it, marked annotationTrimmed: a reader that
// needs the rest (secretReader: the credentials a deleted cluster kept
// for its volumes, read when a cluster of that name takes them over) reads
// it from the API server.

// annotationTrimmed marks, in the cache only, an object the cache keeps
// little of (trimForeign).
const annotationTrimmed = "tusk.dev/trimmed-in-cache"

// maxKeptValue bounds an annotation or label value kept of such an object:
// a cluster's name is at most 253 bytes.
const maxKeptValue = 253

// trimSecretsAndConfigMaps is the cache transform of Secrets and
// ConfigMaps: it strips managedFields from every one, and trims those Tusk
// did not make (trimForeign).
func trimSecretsAndConfigMaps(in any) (any, error) {
	switch o := in.(type) {
	case *corev1.Secret:
		o.ManagedFields = nil
		if !madeByTusk(&o.ObjectMeta, secretNamesFor) {
			o.Data, o.StringData = nil, nil
			trimForeign(&o.ObjectMeta)
		}
	case *corev1.ConfigMap:
		o.ManagedFields = nil
		if !madeByTusk(&o.ObjectMeta, configMapNamesFor) {
			o.Data, o.BinaryData = nil, nil
			trimForeign(&o.ObjectMeta)
		}
	}
	return in, nil
}

// madeByTusk says whether a Tusk object controls m and m bears a name Tusk
// gives such an object (names lists them for an owner's kind and name).
func madeByTusk(m *metav1.ObjectMeta, names func(kind, owner string) []string) bool {
	ref := metav1.GetControllerOfNoCopy(m)
	if ref == nil {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != tuskv1alpha1.GroupVersion.Group {
		return false
	}
	return slices.Contains(names(ref.Kind, ref.Name), m.Name)
}

// secretNamesFor are the Secrets Tusk makes for an object of kind named
// owner.
func secretNamesFor(kind, owner string) []string {
	switch kind {
	case "PostgresCluster":
		c := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: owner}}
		return []string{superuserSecretName(c), appSecretName(c), caSecretName(c), serverSecretName(c),
			replicationSecretName(c), probeSecretName(c)}
	case "PostgresRole":
		return []string{roleCertSecretName(&tuskv1alpha1.PostgresRole{ObjectMeta: metav1.ObjectMeta{Name: owner}})}
	}
	return nil
}

// configMapNamesFor are the ConfigMaps Tusk makes for an object of kind
// named owner.
func configMapNamesFor(kind, owner string) []string {
	if kind != "PostgresCluster" {
		return nil
	}
	c := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: owner}}
	return []string{caConfigMapName(c), configConfigMapName(c)}
}

// trimForeign keeps of an object Tusk did not make what the operator
// reads of one: its name and version, Tusk's labels, the mark of a kept
// Secret, and its controller (an object of the name Tusk needs that
// another controls is refused, not taken over); and marks it trimmed.
func trimForeign(m *metav1.ObjectMeta) {
	m.Labels = keepTuskLabels(m.Labels)
	m.Annotations = keepValue(m.Annotations, AnnotationKeptFor)
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[annotationTrimmed] = "true"
	if ref := metav1.GetControllerOfNoCopy(m); ref != nil {
		m.OwnerReferences = []metav1.OwnerReference{*ref}
	} else {
		m.OwnerReferences = nil
	}
	m.Finalizers = nil
}

// keepTuskLabels keeps the labels Tusk selects and reads by.
func keepTuskLabels(labels map[string]string) map[string]string {
	out := keepValue(labels, tuskv1alpha1.LabelCluster)
	for k, v := range keepValue(labels, LabelInstance) {
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// keepValue is the map of key alone when m has it with a value of at most
// maxKeptValue bytes; nil otherwise.
func keepValue(m map[string]string, key string) map[string]string {
	v, ok := m[key]
	if !ok || len(v) > maxKeptValue {
		return nil
	}
	return map[string]string{key: v}
}
