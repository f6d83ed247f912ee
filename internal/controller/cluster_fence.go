package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	corev1 "k8s.io/api/core/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// fencedInstances reads the instances the user fenced by hand from the
// cluster's annotation; a malformed one is a spec error, reported, and
// fences nothing new.
func fencedInstances(c *tuskv1alpha1.PostgresCluster) ([]string, error) {
	raw, ok := c.Annotations[tuskv1alpha1.AnnotationFencedInstances]
	if !ok || raw == "" {
		return nil, nil
	}
	var names []string
	if err := json.Unmarshal([]byte(raw), &names); err != nil {
		return nil, userError(tuskv1alpha1.ReasonFenceInvalid, "the annotation %s must be a JSON array of instance names, such as [\"%s-2\"] or [\"*\"]: %v",
			tuskv1alpha1.AnnotationFencedInstances, c.Name, err)
	}
	return names, nil
}

func fenced(names []string, instance string) bool {
	return slices.Contains(names, instance) || slices.Contains(names, tuskv1alpha1.FenceAll)
}

// reconcileFencing fences and unfences the instances as the annotation
// says. An instance that does not answer is fenced once it does (a pod
// recreated meanwhile starts unfenced and is fenced on the next pass).
func (r *ClusterReconciler) reconcileFencing(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) error {
	names, err := fencedInstances(c)
	if err != nil {
		return err
	}
	for _, m := range v.members {
		if m.status == nil || m.pod == nil || m.pod.DeletionTimestamp != nil {
			continue
		}
		want := fenced(names, m.name)
		if want == m.status.Fenced {
			continue
		}
		path, reason, verb := instanceapi.PathUnfence, tuskv1alpha1.ReasonUnfenced, "Unfenced"
		if want {
			path, reason, verb = instanceapi.PathFence, tuskv1alpha1.ReasonFenced, "Fenced"
		}
		if err := ic.call(ctx, m.pod, http.MethodPost, path, nil, nil); err != nil {
			return fmt.Errorf("while fencing or unfencing %s: %w", m.name, err)
		}
		m.status.Fenced = want
		r.event(c, corev1.EventTypeNormal, reason, "Fence", "%s %s by hand (annotation %s)", verb, m.name, tuskv1alpha1.AnnotationFencedInstances)
	}
	return nil
}
