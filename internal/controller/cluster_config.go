package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/postgres"
)

// desiredConfig is the PostgreSQL configuration every instance gets: the
// user's parameters and the quorum of synchronous standbys. All replicas
// are listed, so losing one never makes commits wait while enough others
// remain; in degrade mode the number drops to the standbys actually
// streaming (none: asynchronous) and status says so.
func desiredConfig(c *tuskv1alpha1.PostgresCluster, v *view) instanceapi.Config {
	cfg := instanceapi.Config{Parameters: c.Spec.PostgreSQL.Parameters}
	sync := c.Spec.PostgreSQL.Synchronous
	if sync.Mode == tuskv1alpha1.SynchronousOff || c.Status.CurrentPrimary == "" {
		return cfg
	}
	var standbys []string
	for _, m := range v.members {
		if m.name != c.Status.CurrentPrimary {
			standbys = append(standbys, m.name)
		}
	}
	number := int(sync.Number)
	if sync.WhenTooFewStandbys != tuskv1alpha1.StandbyShortageBlock {
		number = min(number, streamingStandbys(v.member(c.Status.CurrentPrimary)))
	}
	cfg.SynchronousStandbyNames = postgres.SynchronousStandbyNames(number, standbys)
	return cfg
}

// synchronousDegraded says fewer standbys stream than the quorum asks for:
// commits are acknowledged with fewer confirmations (degrade) or wait
// (block).
func synchronousDegraded(c *tuskv1alpha1.PostgresCluster, v *view) bool {
	sync := c.Spec.PostgreSQL.Synchronous
	return sync.Mode == tuskv1alpha1.SynchronousQuorum && len(v.members) > 1 &&
		streamingStandbys(v.member(c.Status.CurrentPrimary)) < int(sync.Number)
}

// streamingStandbys counts the standbys streaming from the primary.
func streamingStandbys(primary *member) int {
	if primary == nil || primary.status == nil {
		return 0
	}
	n := 0
	for _, r := range primary.status.Replicas {
		if r.State == "streaming" {
			n++
		}
	}
	return n
}

// reconcileConfig publishes the configuration for pods that start, and
// sends it to every running instance that has not accepted it yet.
func (r *ClusterReconciler) reconcileConfig(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) error {
	cfg := desiredConfig(c, v)
	data, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: objectMeta(c, configConfigMapName(c)), Data: map[string]string{configFileName: string(data)}}
	if err := r.applyOwned(ctx, c, cm); err != nil {
		return err
	}
	hash, err := hashOf(cfg)
	if err != nil {
		return err
	}
	for _, m := range v.members {
		// An instance that is not running yet starts with the ConfigMap's
		// configuration; it is sent the configuration once it runs.
		if m.status == nil || m.status.Phase != instanceapi.PhaseRunning || m.pod.Annotations[AnnotationConfigHash] == hash {
			continue
		}
		if err := r.pushConfig(ctx, m, cfg, hash, ic); err != nil {
			return err
		}
	}
	return nil
}

func (r *ClusterReconciler) pushConfig(ctx context.Context, m *member, cfg instanceapi.Config, hash string, ic *instanceClient) error {
	var res instanceapi.ConfigResult
	if err := ic.call(ctx, m.pod, http.MethodPut, instanceapi.PathConfig, cfg, &res); err != nil {
		return fmt.Errorf("while configuring %s: %w", m.name, err)
	}
	if len(res.Errors) > 0 {
		r.event(m.pod, corev1.EventTypeWarning, "ConfigurationRefused", "Configure", "PostgreSQL refused settings: %v", res.Errors)
	}
	ctrlLog(ctx).Info("Configured instance", "instance", m.name, "pendingRestart", res.PendingRestart)
	patch := client.MergeFrom(m.pod.DeepCopy())
	setAnnotation(m.pod, AnnotationConfigHash, hash)
	if err := r.Patch(ctx, m.pod, patch); err != nil {
		return fmt.Errorf("while recording the configuration of %s: %w", m.name, err)
	}
	return nil
}
