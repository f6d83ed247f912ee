package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// pollInterval is how often --wait reads the cluster.
const pollInterval = 500 * time.Millisecond

// waitForSwitchover polls the cluster until instance is its primary and it
// is Ready, printing each change of phase, primary and conditions. It fails
// when the operator gives up the switchover or ctx ends.
func waitForSwitchover(ctx context.Context, cl client.Client, key client.ObjectKey, instance string, w io.Writer) error {
	start := time.Now()
	last := map[string]string{} // what was printed last, by topic
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var lastErr error
	for {
		c := &tuskv1alpha1.PostgresCluster{}
		if lastErr = cl.Get(ctx, key, c); lastErr == nil {
			for _, p := range progressLines(c) {
				if last[p.topic] != p.line {
					last[p.topic] = p.line
					fmt.Fprintf(w, "[%3.0fs] %s\n", time.Since(start).Seconds(), p.line)
				}
			}
			done, err := switchoverDone(c, instance)
			if done {
				fmt.Fprintf(w, "Done: %s is the primary of %s, and the cluster is Ready (%.0fs).\n", instance, key.Name, time.Since(start).Seconds())
				// The status cannot see kube-proxy, which follows the moved
				// label in its own time: say so rather than let a client
				// that connects at once be surprised.
				fmt.Fprintf(w, "New connections through %s-rw reach it once kube-proxy follows, usually within a second or two.\n", key.Name)
			}
			if done || err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return timedOut(key, instance, lastErr)
		case <-ticker.C:
		}
	}
}

func timedOut(key client.ObjectKey, instance string, lastErr error) error {
	msg := fmt.Sprintf("gave up waiting for %s to be the primary of %s and the cluster to be Ready; the operator goes on: follow it with kubectl tusk status %s -n %s",
		instance, key.Name, key.Name, key.Namespace)
	if lastErr != nil {
		return fmt.Errorf("%s (last error: %w)", msg, lastErr)
	}
	return errors.New(msg)
}

// switchoverDone says whether the switchover to instance is complete, or
// why it will not be.
func switchoverDone(c *tuskv1alpha1.PostgresCluster, instance string) (bool, error) {
	st := c.Status
	if c.Annotations[tuskv1alpha1.AnnotationSwitchoverTo] == instance && st.TargetPrimary != instance {
		return false, nil // asked for, not taken yet
	}
	switch st.TargetPrimary {
	case instance:
		return st.CurrentPrimary == instance && meta.IsStatusConditionTrue(st.Conditions, tuskv1alpha1.ConditionReady), nil
	case st.CurrentPrimary:
		return false, fmt.Errorf("the operator refused the switchover to %s and %s stays the primary; kubectl describe pgc %s shows its Warning Event with the reason",
			instance, st.CurrentPrimary, c.Name)
	default:
		return false, fmt.Errorf("another switchover, to %s, replaced the one to %s", st.TargetPrimary, instance)
	}
}

// progress is one line about one topic (the phase, the primary, a
// condition); a line is printed when its topic's line changes.
type progress struct{ topic, line string }

// progressLines describe the cluster's state, one line per thing that
// changes during a switchover.
func progressLines(c *tuskv1alpha1.PostgresCluster) []progress {
	st := c.Status
	primary := "primary " + orNone(st.CurrentPrimary)
	if st.TargetPrimary != st.CurrentPrimary {
		primary += ", switching over to " + st.TargetPrimary
	}
	lines := []progress{{"phase", "phase " + orNone(string(st.Phase))}, {"primary", primary}}
	for _, cond := range st.Conditions {
		lines = append(lines, progress{"condition " + cond.Type, conditionLine(cond)})
	}
	return lines
}

func conditionLine(cond metav1.Condition) string {
	line := fmt.Sprintf("%s=%s (%s)", cond.Type, cond.Status, cond.Reason)
	if cond.Message != "" {
		line += ": " + oneLine(cond.Message)
	}
	return line
}
