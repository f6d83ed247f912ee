//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// probeCounts are tusk_probe_requests_total by "target/result".
type probeCounts map[string]float64

func (c probeCounts) sub(o probeCounts) probeCounts {
	d := probeCounts{}
	for k, v := range c {
		d[k] = v - o[k]
	}
	return d
}

// TestSLIProbeMeasuresWhatClientsFeel: with spec.monitoring.probe the
// operator runs the probe, which writes through -rw and reads through -ro
// as tusk_probe with its client certificate. While the primary is fenced
// writes fail and the probe counts a failure per interval, reads go on;
// unfenced, writes succeed again. A deleted primary's failover is then
// measured as the probe (a new connection per second, bounded by the
// interval) saw it.
func TestSLIProbeMeasuresWhatClientsFeel(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	const name = "sli"
	pgc := newCluster(ns, name, 3)
	pgc.Spec.Monitoring = &tuskv1alpha1.MonitoringSpec{Probe: &tuskv1alpha1.ProbeSpec{Interval: &metav1.Duration{Duration: time.Second}}}
	createCluster(t, pgc, "")
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, 3, time.Minute)

	// Attempts made before the primary made the probe's role failed;
	// from a healthy cluster on, they succeed.
	waitProbeSucceeding(t, ns, name, time.Minute)

	primary := currentPrimary(t, ns, name)
	setFencedAnnotation(t, ns, name, primary)
	fencedAt := scrapeProbe(t, ns, name)
	eventuallyEvery(t, time.Minute, time.Second, "the probe counting failed writes while "+primary+" is fenced", func(context.Context) (bool, error) {
		d := scrapeProbe(t, ns, name).sub(fencedAt)
		return d["rw/failure"] >= 5, nil
	})
	if fenced := scrapeProbe(t, ns, name).sub(fencedAt); fenced["ro/success"] < 3 {
		t.Errorf("reads through -ro stopped while only the primary was fenced: %v", fenced)
	}
	setFencedAnnotation(t, ns, name)
	waitProbeSucceeding(t, ns, name, time.Minute)

	// A deleted primary, as the probe sees it: failed attempts at one a
	// second are the seconds writes were unavailable.
	before := scrapeProbe(t, ns, name)
	start := time.Now()
	deletePrimaryPod(t, ns, name)
	waitHealthy(t, ns, name, 3, clusterChangeTimeout)
	after := waitProbeSucceeding(t, ns, name, time.Minute)
	d := after.sub(before)
	attempts := d["rw/success"] + d["rw/failure"]
	t.Logf("figure: primary pod deleted → the probe (1s interval) counted %.0f failed writes and %.0f failed reads of %.0f attempts each over %.0fs",
		d["rw/failure"], d["ro/failure"], attempts, time.Since(start).Seconds())
	// One attempt a second on each target whatever happened: the probe
	// never hung on a dead connection.
	if least := time.Since(start).Seconds()/2 - 2; attempts < least {
		t.Errorf("the probe made %.0f write attempts in %s: it stalled", attempts, time.Since(start).Round(time.Second))
	}
}

// waitProbeSucceeding waits until the probe's last attempts on every
// target succeeded (successes rose and failures did not, over a few
// intervals), and returns the counts then.
func waitProbeSucceeding(t *testing.T, ns, cluster string, timeout time.Duration) probeCounts {
	t.Helper()
	prev := scrapeProbe(t, ns, cluster)
	var now probeCounts
	eventuallyEvery(t, timeout, 3*time.Second, "the probe succeeding on both targets", func(context.Context) (bool, error) {
		now = scrapeProbe(t, ns, cluster)
		d := now.sub(prev)
		prev = now
		return d["rw/success"] >= 2 && d["ro/success"] >= 2 && d["rw/failure"] == 0 && d["ro/failure"] == 0, nil
	})
	return now
}

// scrapeProbe reads the probe pod's /metrics through the API server's
// proxy, as a Prometheus in the cluster would reach it.
func scrapeProbe(t *testing.T, ns, cluster string) probeCounts {
	t.Helper()
	var counts probeCounts
	eventuallyEvery(t, time.Minute, time.Second, "a scrape of "+cluster+"'s probe", func(ctx context.Context) (bool, error) {
		pods, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "tusk.dev/probe-of=" + cluster})
		if err != nil {
			return false, err
		}
		var running []string
		for _, p := range pods.Items {
			if podIsReady(&p) && p.DeletionTimestamp == nil {
				running = append(running, p.Name)
			}
		}
		if len(running) != 1 {
			return false, fmt.Errorf("%d ready probe pods", len(running))
		}
		raw, err := clientset.CoreV1().Pods(ns).ProxyGet("http", running[0], "8000", "/metrics", nil).DoRaw(ctx)
		if err != nil {
			return false, err
		}
		counts, err = parseProbeCounts(string(raw))
		return err == nil, err
	})
	return counts
}

func parseProbeCounts(text string) (probeCounts, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	f, ok := families["tusk_probe_requests_total"]
	if !ok {
		return nil, fmt.Errorf("no tusk_probe_requests_total in the scrape")
	}
	counts := probeCounts{}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		counts[labels["target"]+"/"+labels["result"]] = m.GetCounter().GetValue()
	}
	return counts, nil
}
