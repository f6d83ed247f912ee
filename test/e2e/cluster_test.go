//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeReady: every node of the cluster reports Ready.
func TestNodeReady(t *testing.T) {
	parallel(t)
	eventually(t, 2*time.Minute, "every node Ready", func(ctx context.Context) (bool, error) {
		nodes, err := clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(nodes.Items) == 0 {
			return false, err
		}
		for _, n := range nodes.Items {
			if !nodeReady(&n) {
				return false, nil
			}
		}
		return true, nil
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestDNSResolvesService: a pod resolves <svc>.<ns>.svc.cluster.local to the
// Service's cluster IP.
func TestDNSResolvesService(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "target"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "nothing"},
			Ports:    []corev1.ServicePort{{Name: "x", Port: 80}},
		},
	}
	svc, err := clientset.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating service: %v", err)
	}
	fqdn := "target." + ns + ".svc.cluster.local"
	// The pod retries for a while: CoreDNS learns about the Service through
	// its watch, a moment after the API server has it.
	createPod(t, ns, restrictedPod("resolver", "sh", "-c",
		"for i in $(seq 30); do getent hosts "+fqdn+" && exit 0; sleep 1; done; exit 1"))
	waitPodPhase(t, ns, "resolver", corev1.PodSucceeded)
	out := podLogs(t, ns, "resolver")
	if !strings.HasPrefix(strings.TrimSpace(out), svc.Spec.ClusterIP+" ") {
		t.Fatalf("%s resolved to %q, want cluster IP %s", fqdn, out, svc.Spec.ClusterIP)
	}
}

func createClaim(t *testing.T, ns, name string) {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("64Mi"),
			}},
		},
	}
	if _, err := clientset.CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating claim: %v", err)
	}
	eventually(t, time.Minute, "claim "+name+" Bound", func(ctx context.Context) (bool, error) {
		c, err := clientset.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && c.Status.Phase == corev1.ClaimBound, err
	})
}

// TestVolumeKeepsDataAcrossPodRecreation: a claim of the default
// StorageClass binds, a non-root pod under the restricted standard writes to
// it, and a new pod reads the data back.
func TestVolumeKeepsDataAcrossPodRecreation(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	createClaim(t, ns, "data")
	writer := withVolume(restrictedPod("writer", "sh", "-c",
		"echo kept-$(id -u) > /data/marker && cat /data/marker"), "data", "/data")
	createPod(t, ns, writer)
	waitPodPhase(t, ns, "writer", corev1.PodSucceeded)
	want := strings.TrimSpace(podLogs(t, ns, "writer"))
	deletePod(t, ns, "writer")

	createPod(t, ns, withVolume(restrictedPod("reader", "cat", "/data/marker"), "data", "/data"))
	waitPodPhase(t, ns, "reader", corev1.PodSucceeded)
	if got := strings.TrimSpace(podLogs(t, ns, "reader")); got != want || !strings.HasPrefix(got, "kept-") {
		t.Fatalf("read %q after recreating the pod, wrote %q", got, want)
	}
}
