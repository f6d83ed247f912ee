package controller

import (
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// Labels Tusk puts on the objects it creates.
const (
	// LabelCluster names the PostgresCluster an object belongs to.
	LabelCluster = tuskv1alpha1.LabelCluster
	// LabelInstance names the instance a pod or volume is.
	LabelInstance = "tusk.dev/instance"
	// LabelRole is primary or replica: the role Tusk wants the pod to
	// have. The -rw and -ro Services select by it.
	LabelRole = instanceapi.LabelRole
)

// Annotations Tusk puts on the objects it creates.
const (
	// AnnotationHash is the hash of what Tusk built an object from; an
	// object whose hash matches needs no update.
	AnnotationHash = "tusk.dev/hash"
	// AnnotationKeptFor marks a Secret a deleted cluster kept with its
	// volumes (reclaimPolicy Retain) for a cluster of the name it holds.
	AnnotationKeptFor = "tusk.dev/kept-for"
	// AnnotationConfigHash is the hash of the PostgreSQL configuration the
	// instance last accepted.
	AnnotationConfigHash = "tusk.dev/config-hash"
)

// FinalizerCleanup holds a deleted cluster until its volumes are dealt with
// per spec.storage.reclaimPolicy.
const FinalizerCleanup = "tusk.dev/cleanup"

// Names of the objects of a cluster.
func instanceName(cluster string, serial int32) string {
	return cluster + "-" + strconv.Itoa(int(serial))
}

// instanceSerial is the serial number in an instance name, or 0 when name
// is not one instanceName makes (such as pg-01, which would otherwise pass
// for pg-1).
func instanceSerial(cluster, name string) int32 {
	n, err := strconv.ParseInt(strings.TrimPrefix(name, cluster+"-"), 10, 32)
	if err != nil || n < 1 || instanceName(cluster, int32(n)) != name {
		return 0
	}
	return int32(n)
}

func rwServiceName(c *tuskv1alpha1.PostgresCluster) string { return c.Name + "-rw" }
func roServiceName(c *tuskv1alpha1.PostgresCluster) string { return c.Name + "-ro" }
func rServiceName(c *tuskv1alpha1.PostgresCluster) string  { return c.Name + "-r" }

func superuserSecretName(c *tuskv1alpha1.PostgresCluster) string { return c.Name + "-superuser" }
func appSecretName(c *tuskv1alpha1.PostgresCluster) string       { return c.Name + "-app" }
func caSecretName(c *tuskv1alpha1.PostgresCluster) string        { return c.Name + "-ca" }
func serverSecretName(c *tuskv1alpha1.PostgresCluster) string    { return c.Name + "-server" }
func replicationSecretName(c *tuskv1alpha1.PostgresCluster) string {
	return c.Name + "-replication"
}
func caConfigMapName(c *tuskv1alpha1.PostgresCluster) string     { return c.Name + "-ca" }
func configConfigMapName(c *tuskv1alpha1.PostgresCluster) string { return c.Name + "-config" }

// siblingCluster stands for the cluster name of namespace where only its
// name and namespace matter: enough to name another cluster's objects
// (Services, CA, labels) without reading it.
func siblingCluster(namespace, name string) *tuskv1alpha1.PostgresCluster {
	return &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
}

// clusterLabels select every object of a cluster.
func clusterLabels(c *tuskv1alpha1.PostgresCluster) map[string]string {
	return map[string]string{LabelCluster: c.Name}
}

// superuserPasswordSecret is the Secret holding the superuser's password:
// the user's or Tusk's.
func superuserPasswordSecret(c *tuskv1alpha1.PostgresCluster) string {
	if c.Spec.SuperuserSecret != nil {
		return c.Spec.SuperuserSecret.Name
	}
	return superuserSecretName(c)
}

// appPasswordSecret is the Secret holding the application owner's password.
func appPasswordSecret(c *tuskv1alpha1.PostgresCluster) string {
	if init := initDB(c); init.Secret != nil {
		return init.Secret.Name
	}
	return appSecretName(c)
}
