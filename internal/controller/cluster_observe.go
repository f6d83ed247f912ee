package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// statusTimeout bounds each instance's /status answer; an instance that
// takes longer is reported unreachable for this round.
const statusTimeout = 3 * time.Second

// lapsedPrimaryStatusTimeout bounds the answer of a primary whose Lease has
// expired in the operator's eyes. It has fenced itself by then, if it runs
// at all; one that answers still says so at once. Waiting the full
// statusTimeout for a primary cut off by the network would only add to
// the failover's write gap.
const lapsedPrimaryStatusTimeout = 500 * time.Millisecond

// member is one instance as Tusk sees it: its volume, its pod, and what its
// instance manager said.
type member struct {
	name   string
	serial int32
	pvc    *corev1.PersistentVolumeClaim
	pod    *corev1.Pod
	status *instanceapi.Status // nil when it did not answer
	err    error               // why it did not answer
}

// ready says the instance serves: its pod is Ready and its manager agrees.
func (m *member) ready() bool {
	return m.pod != nil && m.pod.DeletionTimestamp == nil && podReady(m.pod) && m.status != nil && m.status.Ready
}

// view is everything observed of a cluster in one reconcile.
type view struct {
	members []*member // by serial
	// recovery is where a recovering cluster's first primary recovers
	// from; nil otherwise.
	recovery *recoverySource
}

func (v *view) member(name string) *member {
	for _, m := range v.members {
		if m.name == name {
			return m
		}
	}
	return nil
}

func (v *view) readyCount() int {
	n := 0
	for _, m := range v.members {
		if m.ready() {
			n++
		}
	}
	return n
}

// observe lists the cluster's volumes and pods and asks every running
// instance manager for its status, in parallel.
func (r *ClusterReconciler) observe(ctx context.Context, c *tuskv1alpha1.PostgresCluster, ic *instanceClient) (*view, error) {
	lease := r.leases.state(client.ObjectKey{Namespace: c.Namespace, Name: primaryLeaseName(c)})
	return observeClusterWith(ctx, r.Client, c, ic, statusTimeouts(lease))
}

// statusTimeouts bounds each instance's answer: statusTimeout, but
// lapsedPrimaryStatusTimeout for the holder of an expired primary Lease.
func statusTimeouts(lease leaseState) func(instance string) time.Duration {
	lapsed := ""
	if lease.known && lease.free {
		lapsed = lease.holder // "" when released: nobody is waited for less
	}
	return func(instance string) time.Duration {
		if instance != "" && instance == lapsed {
			return lapsedPrimaryStatusTimeout
		}
		return statusTimeout
	}
}

// observeCluster is observe for any reconciler that reads a cluster.
func observeCluster(ctx context.Context, r client.Reader, c *tuskv1alpha1.PostgresCluster, ic *instanceClient) (*view, error) {
	return observeClusterWith(ctx, r, c, ic, func(string) time.Duration { return statusTimeout })
}

// observeClusterWith bounds each instance's answer by timeout(instance).
func observeClusterWith(ctx context.Context, r client.Reader, c *tuskv1alpha1.PostgresCluster, ic *instanceClient, timeout func(string) time.Duration) (*view, error) {
	sel := client.MatchingLabels(clusterLabels(c))
	var pvcs corev1.PersistentVolumeClaimList
	if err := r.List(ctx, &pvcs, client.InNamespace(c.Namespace), sel); err != nil {
		return nil, fmt.Errorf("while listing volumes: %w", err)
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(c.Namespace), sel); err != nil {
		return nil, fmt.Errorf("while listing pods: %w", err)
	}
	v := &view{}
	get := func(name string) *member {
		if m := v.member(name); m != nil {
			return m
		}
		m := &member{name: name, serial: instanceSerial(c.Name, name)}
		v.members = append(v.members, m)
		return m
	}
	for i := range pvcs.Items {
		if pvc := &pvcs.Items[i]; instanceSerial(c.Name, pvc.Name) > 0 {
			get(pvc.Name).pvc = pvc
		}
	}
	for i := range pods.Items {
		if pod := &pods.Items[i]; instanceSerial(c.Name, pod.Name) > 0 {
			get(pod.Name).pod = pod
		}
	}
	slices.SortFunc(v.members, func(a, b *member) int { return int(a.serial - b.serial) })
	fetchStatuses(ctx, v, ic, func(m *member) time.Duration {
		if m.pod.DeletionTimestamp == nil {
			return timeout(m.name)
		}
		if terminatingPrimaryStatus(c, m) {
			return lapsedPrimaryStatusTimeout
		}
		return 0
	})
	return v, nil
}

// fetchStatuses asks every instance whose timeout is positive for its
// status, in parallel.
func fetchStatuses(ctx context.Context, v *view, ic *instanceClient, timeout func(*member) time.Duration) {
	var wg sync.WaitGroup
	for _, m := range v.members {
		if m.pod == nil || m.pod.Status.PodIP == "" || ic == nil || timeout(m) <= 0 {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout(m))
			defer cancel()
			st, err := ic.status(ctx, m.pod)
			if err != nil {
				m.err = err
				return
			}
			m.status = &st
		})
	}
	wg.Wait()
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitingReason is why a pod's postgres container is not running, such as
// ErrImagePull or CrashLoopBackOff, or "".
func waitingReason(pod *corev1.Pod) string {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" && w.Reason != "ContainerCreating" {
				return fmt.Sprintf("%s: %s %s", cs.Name, w.Reason, w.Message)
			}
		}
	}
	return ""
}
