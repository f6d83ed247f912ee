//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// The labels the operator puts on every instance pod.
const (
	labelCluster  = "tusk.dev/cluster"
	labelInstance = "tusk.dev/instance"
	labelRole     = "tusk.dev/role"
)

// Timeouts for the operator's work on this 2-core machine; they bound a
// hang, they are not the expected durations (the tests log those).
const (
	clusterCreateTimeout = 8 * time.Minute
	clusterChangeTimeout = 8 * time.Minute
)

// newCluster is the PostgresCluster the lifecycle tests start from:
// tusk/postgres:15 (loaded on the local cluster, never pulled), 1Gi
// volumes, and Tusk's durable default written out.
func newCluster(ns, name string, instances int32) *tuskv1alpha1.PostgresCluster {
	return &tuskv1alpha1.PostgresCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: tuskv1alpha1.GroupVersion.String(), Kind: "PostgresCluster"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: tuskv1alpha1.PostgresClusterSpec{
			Instances:       instances,
			Image:           testImage,
			ImagePullPolicy: corev1.PullIfNotPresent,
			Storage:         tuskv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
			PostgreSQL: tuskv1alpha1.PostgreSQLSpec{Synchronous: tuskv1alpha1.SynchronousSpec{
				Mode: tuskv1alpha1.SynchronousQuorum, Number: 1,
			}},
		},
	}
}

// createCluster creates pgc. reclaimPolicy, when not empty, is set as
// spec.storage.reclaimPolicy, which api/v1alpha1 does not have yet: the
// object goes through unstructured, and strict field validation makes an
// API server that does not know the field refuse it instead of dropping it.
func createCluster(t *testing.T, pgc *tuskv1alpha1.PostgresCluster, reclaimPolicy string) {
	t.Helper()
	fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pgc)
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{Object: fields}
	unstructured.RemoveNestedField(obj.Object, "status")
	if reclaimPolicy != "" {
		if err := unstructured.SetNestedField(obj.Object, reclaimPolicy, "spec", "storage", "reclaimPolicy"); err != nil {
			t.Fatal(err)
		}
	}
	if err := kube.Create(context.Background(), obj, client.FieldValidation("Strict")); err != nil {
		t.Fatalf("creating PostgresCluster %s: %v", pgc.Name, err)
	}
}

func getCluster(ctx context.Context, ns, name string) (*tuskv1alpha1.PostgresCluster, error) {
	pgc := &tuskv1alpha1.PostgresCluster{}
	err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pgc)
	return pgc, err
}

func mustGetCluster(t *testing.T, ns, name string) *tuskv1alpha1.PostgresCluster {
	t.Helper()
	pgc, err := getCluster(context.Background(), ns, name)
	if err != nil {
		t.Fatalf("reading PostgresCluster %s: %v", name, err)
	}
	return pgc
}

// patchClusterSpec merges spec into the cluster's spec, as `kubectl patch
// --type merge` does.
func patchClusterSpec(t *testing.T, ns, name string, spec map[string]any) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		t.Fatal(err)
	}
	pgc := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := kube.Patch(context.Background(), pgc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("patching PostgresCluster %s with %s: %v", name, patch, err)
	}
}

// setParameters sets spec.postgresql.parameters, leaving the others as they are.
func setParameters(t *testing.T, ns, name string, params map[string]string) {
	t.Helper()
	patchClusterSpec(t, ns, name, map[string]any{"postgresql": map[string]any{"parameters": params}})
}

// scaleCluster goes through the scale subresource, as `kubectl scale` does.
func scaleCluster(t *testing.T, ns, name string, instances int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := kubectl(ctx, "scale", "-n", ns, "pgc/"+name, "--replicas="+strconv.Itoa(instances)); err != nil {
		t.Fatalf("kubectl scale pgc/%s --replicas=%d: %v\n%s", name, instances, err, out)
	}
}

// waitReadyCondition waits for a new cluster as a user would, with `kubectl
// wait --for=condition=Ready`, and returns how long that took.
func waitReadyCondition(t *testing.T, ns, name string) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), clusterCreateTimeout+30*time.Second)
	defer cancel()
	out, err := kubectl(ctx, "wait", "-n", ns, "pgc/"+name, "--for=condition=Ready", "--timeout="+clusterCreateTimeout.String())
	if err != nil {
		t.Fatalf("kubectl wait --for=condition=Ready pgc/%s: %v\n%s", name, err, out)
	}
	return time.Since(start)
}

// waitHealthy waits until the cluster is what it should be after a change
// settles: the operator has seen the latest spec, Ready is True, the phase
// is Healthy, and exactly `instances` pods exist (none terminating), every
// one Ready and reported ready in status.
func waitHealthy(t *testing.T, ns, name string, instances int, timeout time.Duration) {
	t.Helper()
	eventuallyEvery(t, timeout, time.Second, fmt.Sprintf("cluster %s healthy with %d instances", name, instances),
		func(ctx context.Context) (bool, error) {
			pgc, err := getCluster(ctx, ns, name)
			if err != nil {
				return false, err
			}
			if err := clusterSettled(pgc, instances); err != nil {
				return false, err
			}
			pods, err := clusterPods(ctx, ns, name)
			if err != nil {
				return false, err
			}
			err = podsSettled(pods, instances)
			return err == nil, err
		})
}

// clusterSettled says what, in the status, is not yet as it should be.
func clusterSettled(pgc *tuskv1alpha1.PostgresCluster, instances int) error {
	ready := meta.FindStatusCondition(pgc.Status.Conditions, tuskv1alpha1.ConditionReady)
	switch {
	case pgc.Status.ObservedGeneration != pgc.Generation:
		return fmt.Errorf("status describes generation %d, spec is %d", pgc.Status.ObservedGeneration, pgc.Generation)
	case ready == nil || ready.Status != metav1.ConditionTrue:
		return fmt.Errorf("condition Ready is %+v", ready)
	case pgc.Status.Phase != tuskv1alpha1.ClusterPhaseHealthy:
		return fmt.Errorf("phase is %q", pgc.Status.Phase)
	case int(pgc.Status.ReadyInstances) != instances:
		return fmt.Errorf("readyInstances is %d", pgc.Status.ReadyInstances)
	case len(pgc.Status.Instances) != instances:
		return fmt.Errorf("status lists %d instances", len(pgc.Status.Instances))
	}
	for _, in := range pgc.Status.Instances {
		if !in.Ready {
			return fmt.Errorf("status reports instance %s not ready", in.Name)
		}
	}
	return nil
}

// podsSettled returns nil when exactly `instances` pods exist, none of them
// terminating, all Ready.
func podsSettled(pods []corev1.Pod, instances int) error {
	if len(pods) != instances {
		return fmt.Errorf("%d pods (%s)", len(pods), strings.Join(podNames(pods), ", "))
	}
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || !podIsReady(p) {
			return fmt.Errorf("pod %s terminating or not Ready", p.Name)
		}
	}
	return nil
}

// clusterPods lists the cluster's instance pods, sorted by serial number.
func clusterPods(ctx context.Context, ns, name string) ([]corev1.Pod, error) {
	list, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labelCluster + "=" + name})
	if err != nil {
		return nil, err
	}
	pods := list.Items
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return instanceSerial(a.Name) - instanceSerial(b.Name) })
	return pods, nil
}

func mustClusterPods(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	pods, err := clusterPods(context.Background(), ns, name)
	if err != nil {
		t.Fatalf("listing the pods of %s: %v", name, err)
	}
	return pods
}

// instanceSerial is n of an instance named <cluster>-<n>, -1 if it has none.
func instanceSerial(instance string) int {
	i := strings.LastIndexByte(instance, '-')
	n, err := strconv.Atoi(instance[i+1:])
	if err != nil {
		return -1
	}
	return n
}

func podNames(pods []corev1.Pod) []string {
	names := make([]string, len(pods))
	for i := range pods {
		names[i] = pods[i].Name
	}
	return names
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podsWithRole returns the names of the cluster's pods labelled with role.
func podsWithRole(pods []corev1.Pod, role tuskv1alpha1.InstanceRole) []string {
	var names []string
	for i := range pods {
		if pods[i].Labels[labelRole] == string(role) {
			names = append(names, pods[i].Name)
		}
	}
	return names
}

// firstReplica is the replica with the lowest serial number.
func firstReplica(t *testing.T, ns, name string) string {
	t.Helper()
	replicas := podsWithRole(mustClusterPods(t, ns, name), tuskv1alpha1.RoleReplica)
	if len(replicas) == 0 {
		t.Fatalf("cluster %s has no replica pod", name)
	}
	return replicas[0]
}

// containerImage is the image of the pod's postgres container.
func containerImage(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == "postgres" {
			return c.Image
		}
	}
	return ""
}

// deleteCluster deletes the PostgresCluster and waits until it is gone
// (finalizers included).
func deleteCluster(t *testing.T, ns, name string) {
	t.Helper()
	pgc := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := kube.Delete(context.Background(), pgc); err != nil {
		t.Fatalf("deleting PostgresCluster %s: %v", name, err)
	}
	eventuallyEvery(t, 3*time.Minute, time.Second, "PostgresCluster "+name+" gone", func(ctx context.Context) (bool, error) {
		_, err := getCluster(ctx, ns, name)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// podIncarnation tells one run of a pod's containers from another: a new
// pod has a new UID, a restarted container a higher restart count.
type podIncarnation struct {
	UID      types.UID
	Restarts int32
}

// snapshotPods records the incarnation of each of the cluster's pods.
func snapshotPods(ctx context.Context, ns, name string) (map[string]podIncarnation, error) {
	pods, err := clusterPods(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	snap := make(map[string]podIncarnation, len(pods))
	for i := range pods {
		var restarts int32
		for _, c := range pods[i].Status.ContainerStatuses {
			restarts += c.RestartCount
		}
		snap[pods[i].Name] = podIncarnation{UID: pods[i].UID, Restarts: restarts}
	}
	return snap, nil
}

func mustSnapshotPods(t *testing.T, ns, name string) map[string]podIncarnation {
	t.Helper()
	snap, err := snapshotPods(context.Background(), ns, name)
	if err != nil {
		t.Fatalf("listing the pods of %s: %v", name, err)
	}
	return snap
}

// samePods returns nil when the cluster's pods are the ones in before, none
// recreated and no container restarted, or else what changed.
func samePods(ctx context.Context, ns, name string, before map[string]podIncarnation) error {
	now, err := snapshotPods(ctx, ns, name)
	if err != nil {
		return err
	}
	var changes []string
	for pod, was := range before {
		if is, ok := now[pod]; !ok {
			changes = append(changes, pod+" is gone")
		} else if is != was {
			changes = append(changes, fmt.Sprintf("%s was %+v, is %+v", pod, was, is))
		}
	}
	for pod := range now {
		if _, ok := before[pod]; !ok {
			changes = append(changes, pod+" is new")
		}
	}
	if len(changes) > 0 {
		slices.Sort(changes)
		return fmt.Errorf("pods changed: %s", strings.Join(changes, "; "))
	}
	return nil
}

// fingerprintObjects identifies each object the operator made for the
// cluster besides its pods: Services and PVCs by UID (a recreated one is a
// new one), Secrets and the CA ConfigMap by UID and a digest of their data
// (a rotated password or certificate is a change).
func fingerprintObjects(ctx context.Context, ns, cluster string) (map[string]string, error) {
	core := clientset.CoreV1()
	prints := map[string]string{}
	for _, suffix := range []string{"-rw", "-ro", "-r"} {
		svc, err := core.Services(ns).Get(ctx, cluster+suffix, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		prints["service/"+svc.Name] = string(svc.UID)
	}
	for _, suffix := range []string{"-superuser", "-app"} {
		s, err := core.Secrets(ns).Get(ctx, cluster+suffix, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		prints["secret/"+s.Name] = string(s.UID) + " " + dataDigest(s.Data)
	}
	ca, err := core.ConfigMaps(ns).Get(ctx, cluster+"-ca", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	caData := map[string][]byte{}
	for k, v := range ca.Data {
		caData[k] = []byte(v)
	}
	prints["configmap/"+ca.Name] = string(ca.UID) + " " + dataDigest(caData)
	pods, err := clusterPods(ctx, ns, cluster)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		claim, err := core.PersistentVolumeClaims(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		prints["pvc/"+claim.Name] = string(claim.UID)
	}
	return prints, nil
}

func mustFingerprintObjects(t *testing.T, ns, cluster string) map[string]string {
	t.Helper()
	prints, err := fingerprintObjects(context.Background(), ns, cluster)
	if err != nil {
		t.Fatalf("reading the objects of %s: %v", cluster, err)
	}
	return prints
}

// dataDigest is a SHA-256 of data's keys and values, in key order.
func dataDigest(data map[string][]byte) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		fmt.Fprintf(h, "%s=%d:", k, len(data[k]))
		h.Write(data[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
