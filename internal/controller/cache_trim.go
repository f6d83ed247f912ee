package controller

import (
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"

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
// did not make (trimForeign). The clusters' keys Secrets, in
// operatorNamespace, are Tusk's too.
func trimSecretsAndConfigMaps(operatorNamespace string) toolscache.TransformFunc {
	return func(in any) (any, error) {
		switch o := in.(type) {
		case *corev1.Secret:
			o.ManagedFields = nil
			if !madeByTusk(&o.ObjectMeta, secretNamesFor) && !isKeysSecret(&o.ObjectMeta, operatorNamespace) {
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
}

// madeByTusk says whether a Tusk object controls m and m bears a name Tusk
// gives such an object (names lists them for an owner's kind and name).
func madeByTusk(m *metav1.ObjectMeta, names func(kind, owner string) []string) bool {
	if !controlledByTusk(m) {
		return false
	}
	ref := metav1.GetControllerOfNoCopy(m)
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
	case "PostgresPooler":
		p := &tuskv1alpha1.PostgresPooler{ObjectMeta: metav1.ObjectMeta{Name: owner}}
		return []string{poolerTLSSecretName(p), poolerAuthSecretName(p)}
	}
	return nil
}

// configMapNamesFor are the ConfigMaps Tusk makes for an object of kind
// named owner.
func configMapNamesFor(kind, owner string) []string {
	if kind == "PostgresPooler" {
		return []string{poolerConfigMapName(&tuskv1alpha1.PostgresPooler{ObjectMeta: metav1.ObjectMeta{Name: owner}})}
	}
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
	markTrimmed(m)
	keepControllerOnly(m)
}

// markTrimmed marks o as one the cache keeps little of.
func markTrimmed(o metav1.Object) {
	a := o.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[annotationTrimmed] = "true"
	o.SetAnnotations(a)
}

// keepControllerOnly keeps of o's owners its controller alone, and none of
// its finalizers: an object of a name Tusk needs that another controls is
// refused, not taken over, and no more of it is read.
func keepControllerOnly(o metav1.Object) {
	if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
		o.SetOwnerReferences([]metav1.OwnerReference{*ref})
	} else {
		o.SetOwnerReferences(nil)
	}
	o.SetFinalizers(nil)
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

// The other kinds the cache selects by tusk.dev/cluster (Pods, volume
// claims, Services, ServiceAccounts, Roles, RoleBindings, budgets,
// NetworkPolicies, Deployments, Leases) can be labelled by anyone who may
// create them, with up to 256 KiB of annotations and, for some, specs of a
// MiB. Of every such object the cache keeps only Tusk's labels and
// annotations (the operator reads no other, and updates an object with the
// one it builds, never the cached one); of one no Tusk object controls, it
// keeps no spec or status either, but for a volume claim's few fields a
// claim kept by a deleted cluster (reclaimPolicy Retain, no owner left) is
// adopted by.

// maxKeptAnnotation bounds a Tusk annotation's value kept in the cache:
// hashes, names and attempt stamps are far shorter.
const maxKeptAnnotation = 1024

// trimLabelledObjects is the cache transform of those kinds.
func trimLabelledObjects(in any) (any, error) {
	o, ok := in.(metav1.Object)
	if !ok {
		return in, nil
	}
	o.SetManagedFields(nil)
	o.SetLabels(onlyTusk(o.GetLabels(), maxKeptValue))
	o.SetAnnotations(onlyTusk(o.GetAnnotations(), maxKeptAnnotation))
	if controlledByTusk(o) {
		return in, nil
	}
	keepControllerOnly(o)
	if claim, ok := in.(*corev1.PersistentVolumeClaim); ok {
		keepAdoptableClaim(claim)
		return in, nil
	}
	dropSpecAndStatus(in)
	markTrimmed(o)
	return in, nil
}

// onlyTusk keeps the tusk.dev/ keys of m whose values are at most limit
// bytes; nil when none.
func onlyTusk(m map[string]string, limit int) map[string]string {
	var out map[string]string
	for k, v := range m {
		if strings.HasPrefix(k, "tusk.dev/") && len(v) <= limit {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// controlledByTusk says whether a Tusk object controls o.
func controlledByTusk(o metav1.Object) bool {
	ref := metav1.GetControllerOfNoCopy(o)
	if ref == nil {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == tuskv1alpha1.GroupVersion.Group
}

// keepAdoptableClaim keeps of a claim no Tusk object controls what
// adopting and growing it read: its size, class, volume and status.
func keepAdoptableClaim(c *corev1.PersistentVolumeClaim) {
	c.Spec = corev1.PersistentVolumeClaimSpec{
		AccessModes: c.Spec.AccessModes, StorageClassName: c.Spec.StorageClassName, VolumeName: c.Spec.VolumeName,
		VolumeMode: c.Spec.VolumeMode, Resources: corev1.VolumeResourceRequirements{Requests: c.Spec.Resources.Requests},
	}
	c.Status.Conditions = nil
}

// dropSpecAndStatus empties what an object of a cached kind holds besides
// its metadata.
func dropSpecAndStatus(in any) {
	switch o := in.(type) {
	case *corev1.Pod:
		o.Spec, o.Status = corev1.PodSpec{}, corev1.PodStatus{}
	case *corev1.Service:
		o.Spec, o.Status = corev1.ServiceSpec{}, corev1.ServiceStatus{}
	case *corev1.ServiceAccount:
		o.Secrets, o.ImagePullSecrets = nil, nil
	case *rbacv1.Role:
		o.Rules = nil
	case *rbacv1.RoleBinding:
		o.Subjects, o.RoleRef = nil, rbacv1.RoleRef{}
	case *policyv1.PodDisruptionBudget:
		o.Spec, o.Status = policyv1.PodDisruptionBudgetSpec{}, policyv1.PodDisruptionBudgetStatus{}
	case *networkingv1.NetworkPolicy:
		o.Spec = networkingv1.NetworkPolicySpec{}
	case *appsv1.Deployment:
		o.Spec, o.Status = appsv1.DeploymentSpec{}, appsv1.DeploymentStatus{}
	case *coordinationv1.Lease:
		o.Spec = coordinationv1.LeaseSpec{}
	}
}
