package controller

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/poolerapi"
)

// A switchover pauses the cluster's rw poolers in transaction mode before
// the old primary stops taking writes, and resumes them once the new one
// is promoted: their clients' transactions wait in PgBouncer meanwhile
// instead of failing, and PgBouncer, which closed its server connections
// in the pause, opens new ones through the -rw Service, to the new
// primary. The pause is bounded three times: the pooler manager resumes
// by itself when the transactions in flight outlast the pooler's
// spec.pauseTimeout (the switchover goes on: its clients see what they
// would without a pause), the operator resumes at the end of the pass
// whatever happened, and the manager resumes by itself at
// poolerResumeAfter should the operator die in between. A session-mode
// pooler is not paused (its sessions hold their server connections: a
// pause would wait for them to end); its server connections to the old
// primary are dropped after the promotion (RECONNECT), as every rw
// pooler's are after a failover.

// poolerResumeAfter is the pooler manager's own bound on a pause: far
// longer than a switchover's step-down and promotion take.
const poolerResumeAfter = 30 * time.Second

// poolerWaitForPrimary bounds how long a resume waits for a primary to
// answer where the pooler's server connections go (the -rw Service, as
// the pooler's node routes it): the new primary is promoted by then, and
// the Service's label moved before the step-down; what remains is the
// Service routing catching up.
const poolerWaitForPrimary = 5 * time.Second

// defaultPauseTimeout is spec.pauseTimeout's default (the CRD's too).
const defaultPauseTimeout = 5 * time.Second

// poolerPod is one pod of a pooler, with the client that reaches its
// manager.
type poolerPod struct {
	pooler *tuskv1alpha1.PostgresPooler
	pod    corev1.Pod
	client *instanceClient
}

// pausedPoolers are the pooler pods a switchover paused; resume ends
// their pause, once.
type pausedPoolers struct {
	r       *ClusterReconciler
	cluster *tuskv1alpha1.PostgresCluster
	pods    []poolerPod
	since   time.Time
	once    sync.Once
	// failed are the pods the pause did not reach, with why.
	failed []string
}

// pausePoolers pauses the cluster's rw poolers in transaction mode, each
// pod at once, and says so in an Event. A pod that cannot be paused (no
// answer, its transactions outlasting the pauseTimeout) is left running:
// the switchover never waits on a pooler.
func (r *ClusterReconciler) pausePoolers(ctx context.Context, c *tuskv1alpha1.PostgresCluster) *pausedPoolers {
	paused := &pausedPoolers{r: r, cluster: c, since: time.Now()}
	pods := r.rwPoolerPods(ctx, c, func(p *tuskv1alpha1.PostgresPooler) bool {
		return p.Spec.PoolMode != tuskv1alpha1.PoolModeSession
	})
	if len(pods) == 0 {
		return paused
	}
	results := make([]error, len(pods))
	var wg sync.WaitGroup
	for i := range pods {
		wg.Go(func() { results[i] = pausePoolerPod(ctx, pods[i]) })
	}
	wg.Wait()
	var failed []string
	for i, err := range results {
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", pods[i].pod.Name, err))
			continue
		}
		paused.pods = append(paused.pods, pods[i])
	}
	paused.failed = failed
	took := time.Since(paused.since)
	eventType := corev1.EventTypeNormal
	if len(failed) > 0 {
		eventType = corev1.EventTypeWarning
	}
	r.event(c, eventType, tuskv1alpha1.ReasonPausedPoolers, "Switchover", "Paused %d pooler pod(s) in %dms before the step-down%s",
		len(paused.pods), took.Milliseconds(), notPaused(failed))
	return paused
}

func notPaused(failed []string) string {
	if len(failed) == 0 {
		return ""
	}
	return "; not paused, their clients may see errors: " + strings.Join(failed, ", ")
}

// pausePoolerPod asks one pooler pod for a bounded pause.
func pausePoolerPod(ctx context.Context, p poolerPod) error {
	req := poolerapi.PauseRequest{Wait: pauseTimeout(p.pooler), ResumeAfter: poolerResumeAfter}
	var res poolerapi.PauseResult
	if err := p.client.call(ctx, &p.pod, http.MethodPost, poolerapi.PathPause, req, &res); err != nil {
		return err
	}
	if !res.Paused {
		return fmt.Errorf("its transactions in flight outlasted %s", req.Wait)
	}
	return nil
}

// resume ends the pause of every pod paused, at once, and says how long
// it lasted. It runs once: after the promotion, or at the end of the pass
// that paused them, whatever happened.
func (p *pausedPoolers) resume(ctx context.Context) {
	p.once.Do(func() {
		if len(p.pods) == 0 {
			return
		}
		// Also when the pass's deadline passed: each call has its own.
		ctx := context.WithoutCancel(ctx)
		var wg sync.WaitGroup
		errs := make([]error, len(p.pods))
		results := make([]poolerapi.ResumeResult, len(p.pods))
		req := poolerapi.ResumeRequest{WaitForPrimary: poolerWaitForPrimary}
		for i := range p.pods {
			wg.Go(func() {
				errs[i] = p.pods[i].client.call(ctx, &p.pods[i].pod, http.MethodPost, poolerapi.PathResume, req, &results[i])
			})
		}
		wg.Wait()
		// Of the pause, the part spent waiting for the new primary to
		// answer through the Service (the node's Service routing following
		// the label): the longest of the pods'.
		var primaryWait time.Duration
		for _, res := range results {
			primaryWait = max(primaryWait, res.PrimaryWaited)
		}
		var failed []string
		for i, err := range errs {
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s (%v)", p.pods[i].pod.Name, err))
			}
		}
		eventType, note := corev1.EventTypeNormal, ""
		if len(failed) > 0 {
			eventType = corev1.EventTypeWarning
			note = fmt.Sprintf("; could not resume %s: each resumes by itself %s after its pause", strings.Join(failed, ", "), poolerResumeAfter)
		}
		held := time.Since(p.since)
		p.r.event(p.cluster, eventType, tuskv1alpha1.ReasonResumedPoolers, "Switchover", "Resumed %d pooler pod(s) after a pause of %dms (%dms of it waiting for the new primary to answer through the Service)%s",
			len(p.pods)-len(failed), held.Milliseconds(), primaryWait.Milliseconds(), note)
		// Written with the switchover's next status write (its record of
		// the new primary, or the pass's end).
		p.cluster.Status.LastPoolerPause = &tuskv1alpha1.PoolerPauseStatus{Time: metav1.NewTime(p.since),
			HeldMilliseconds: held.Milliseconds(), Pods: int32(len(p.pods)), //nolint:gosec // at most the pods of a namespace's poolers
			Failures: append(prefixed("not paused: ", p.failed), prefixed("not resumed: ", failed)...)}
	})
}

// prefixed is each of failed after prefix.
func prefixed(prefix string, failed []string) []string {
	out := make([]string, len(failed))
	for i, f := range failed {
		out[i] = prefix + f
	}
	return out
}

// reconnectPoolers drops the server connections of the cluster's rw
// poolers as each is released (RECONNECT), so that no client goes on
// talking to a former primary: after a failover, and after a switchover
// for the poolers it did not pause.
func (r *ClusterReconciler) reconnectPoolers(ctx context.Context, c *tuskv1alpha1.PostgresCluster, which func(*tuskv1alpha1.PostgresPooler) bool) {
	ctx, cancel := context.WithTimeout(ctx, poolerReconnectTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range r.rwPoolerPods(ctx, c, which) {
		wg.Go(func() {
			if err := p.client.call(ctx, &p.pod, http.MethodPost, poolerapi.PathReconnect, nil, nil); err != nil {
				ctrlLog(ctx).Info("Could not make a pooler drop its server connections", "pod", p.pod.Name, "error", err.Error())
			}
		})
	}
	wg.Wait()
}

// poolerReconnectTimeout bounds asking the poolers to reconnect: a
// failover's pass does not wait on a pooler that does not answer.
const poolerReconnectTimeout = 2 * time.Second

// rwPoolerPods are the ready pods of the cluster's rw poolers that which
// selects, each with a client of its manager. Pods are read from the API
// server: the cache holds only pods labelled with a cluster, and a
// pooler's are not (the cluster's Services would select them).
func (r *ClusterReconciler) rwPoolerPods(ctx context.Context, c *tuskv1alpha1.PostgresCluster, which func(*tuskv1alpha1.PostgresPooler) bool) []poolerPod {
	var poolers tuskv1alpha1.PostgresPoolerList
	if err := r.List(ctx, &poolers, client.InNamespace(c.Namespace)); err != nil {
		ctrlLog(ctx).Info("Could not list the cluster's poolers", "error", err.Error())
		return nil
	}
	if len(poolers.Items) == 0 {
		return nil
	}
	keys, err := r.keys.of(ctx, c)
	if err != nil || keys == nil {
		ctrlLog(ctx).Info("Could not read the cluster's keys to reach its poolers", "error", fmt.Sprint(err))
		return nil
	}
	var out []poolerPod
	for i := range poolers.Items {
		p := &poolers.Items[i]
		if p.Spec.Cluster.Name != c.Name || p.Spec.Type == tuskv1alpha1.PoolerTypeRO || !which(p) || !p.DeletionTimestamp.IsZero() {
			continue
		}
		out = append(out, r.readyPoolerPods(ctx, p, keys)...)
	}
	return out
}

// readyPoolerPods are p's ready pods, each with a client of its manager.
func (r *ClusterReconciler) readyPoolerPods(ctx context.Context, p *tuskv1alpha1.PostgresPooler, keys *corev1.Secret) []poolerPod {
	var pods corev1.PodList
	if err := r.api.List(ctx, &pods, client.InNamespace(p.Namespace), client.MatchingLabels(poolerSelector(p))); err != nil {
		ctrlLog(ctx).Info("Could not list a pooler's pods", "pooler", p.Name, "error", err.Error())
		return nil
	}
	ic, err := newInstanceClient(keys.Data, poolerServiceHost(p))
	if err != nil {
		ctrlLog(ctx).Info("Could not make a client of the pooler's managers", "pooler", p.Name, "error", err.Error())
		return nil
	}
	wait := pauseTimeout(p)
	ic.port = poolerapi.DefaultPort
	ic.timeout = func(string) time.Duration { return max(wait, poolerWaitForPrimary) + 2*time.Second }
	var out []poolerPod
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp.IsZero() && pod.Status.PodIP != "" && podReady(&pod) {
			out = append(out, poolerPod{pooler: p, pod: pod, client: ic})
		}
	}
	return out
}

// poolerServiceHost is the name the pooler's certificate covers that the
// operator verifies its managers by.
func poolerServiceHost(p *tuskv1alpha1.PostgresPooler) string {
	return p.Name + "." + p.Namespace + ".svc"
}

// pauseTimeout is how long a switchover's pause of p may wait for its
// transactions in flight.
func pauseTimeout(p *tuskv1alpha1.PostgresPooler) time.Duration {
	if p.Spec.PauseTimeout != nil && p.Spec.PauseTimeout.Duration > 0 {
		return p.Spec.PauseTimeout.Duration
	}
	return defaultPauseTimeout
}
