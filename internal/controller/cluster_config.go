package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/postgres"
)

// desiredConfig is the PostgreSQL configuration every instance gets: the
// user's parameters, what PostgreSQL logs, and the quorum of synchronous
// standbys.
func desiredConfig(c *tuskv1alpha1.PostgresCluster, v *view) instanceapi.Config {
	cfg := instanceapi.Config{Parameters: userParameters(c), SuperuserRemoteAccess: c.Spec.SuperuserAccess,
		Logging: desiredLogging(c.Spec.PostgreSQL.Logging)}
	if q := desiredQuorum(c, v); q != nil {
		cfg.SynchronousStandbyNames = postgres.SynchronousStandbyNames(int(q.Number), q.Standbys)
	}
	return cfg
}

// desiredQuorum is the quorum of synchronous standbys the primary should
// wait for, or nil for asynchronous replication. All replicas are listed,
// so losing one never makes commits wait while enough others remain; in
// degrade mode the number drops to the standbys actually streaming (none:
// asynchronous) and status says so.
func desiredQuorum(c *tuskv1alpha1.PostgresCluster, v *view) *tuskv1alpha1.QuorumStatus {
	sync := c.Spec.PostgreSQL.Synchronous
	if sync.Mode == tuskv1alpha1.SynchronousOff || c.Status.CurrentPrimary == "" {
		return nil
	}
	var standbys []string
	for _, m := range v.members {
		if m.name != c.Status.CurrentPrimary {
			standbys = append(standbys, m.name)
		}
	}
	number := sync.Number
	if sync.WhenTooFewStandbys != tuskv1alpha1.StandbyShortageBlock {
		number = min(number, int32(streamingStandbys(v.member(c.Status.CurrentPrimary)))) //nolint:gosec // a handful of standbys
	}
	if number <= 0 || len(standbys) == 0 {
		return nil
	}
	slices.Sort(standbys)
	return &tuskv1alpha1.QuorumStatus{Number: number, Standbys: standbys}
}

// stricterQuorum is a quorum that holds for commits acknowledged under
// either the quorum the primary uses (old) or the one it is about to get:
// any n of the union of both lists, n the smaller number. Whoever answers
// among N-n+1 of the union includes one of each quorum's confirmers. A
// primary that was asynchronous (old nil) guaranteed nothing until the new
// quorum is in force.
func stricterQuorum(old, next *tuskv1alpha1.QuorumStatus) *tuskv1alpha1.QuorumStatus {
	if old == nil || next == nil {
		return old
	}
	union := slices.Concat(old.Standbys, next.Standbys)
	slices.Sort(union)
	return &tuskv1alpha1.QuorumStatus{Number: min(old.Number, next.Number), Standbys: slices.Compact(union)}
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

// applyConfigMap writes the configuration new pods start with (the
// ConfigMap they mount) and returns it.
func (r *ClusterReconciler) applyConfigMap(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) (instanceapi.Config, error) {
	cfg := desiredConfig(c, v)
	// Parameters stored before the CRD refused them (or through a path
	// that skipped validation) change nothing: not the ConfigMap new pods
	// start with, not a running instance.
	if err := cfg.Validate(); err != nil {
		return cfg, userError(tuskv1alpha1.ReasonInvalidParameters, "spec.postgresql.parameters cannot be applied, nothing was changed: %v", err)
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return cfg, err
	}
	cm := &corev1.ConfigMap{ObjectMeta: objectMeta(c, configConfigMapName(c)), Data: map[string]string{configFileName: string(data)}}
	return cfg, r.applyOwned(ctx, c, cm)
}

// reconcileConfig publishes the configuration for pods that start, and
// sends it to every running instance that has not accepted it yet.
func (r *ClusterReconciler) reconcileConfig(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) error {
	cfg, err := r.applyConfigMap(ctx, c, v)
	if err != nil {
		return err
	}
	hash, err := hashOf(cfg)
	if err != nil {
		return err
	}
	quorum := desiredQuorum(c, v)
	for _, m := range v.members {
		primary := m.name == c.Status.CurrentPrimary
		if primary && m.pod != nil && m.pod.Annotations[AnnotationConfigHash] == hash {
			c.Status.SynchronousQuorum = quorum // in force, confirmed
		}
		// An instance that is not running yet starts with the ConfigMap's
		// configuration; it is sent the configuration once it runs. One
		// whose pod is going takes none.
		if m.status == nil || m.status.Phase != instanceapi.PhaseRunning || m.pod.DeletionTimestamp != nil ||
			m.pod.Annotations[AnnotationConfigHash] == hash {
			continue
		}
		if primary {
			if err := r.recordQuorumChange(ctx, c, quorum); err != nil {
				return err
			}
		}
		if err := r.pushConfig(ctx, m, cfg, hash, ic); err != nil {
			return err
		}
		if primary {
			c.Status.SynchronousQuorum = quorum
		}
	}
	return nil
}

// recordQuorumChange records, before the primary gets a new quorum, one
// that covers commits acknowledged under the old and the new: failover
// must stay safe whatever moment the primary fails at.
func (r *ClusterReconciler) recordQuorumChange(ctx context.Context, c *tuskv1alpha1.PostgresCluster, next *tuskv1alpha1.QuorumStatus) error {
	during := stricterQuorum(c.Status.SynchronousQuorum, next)
	if equality.Semantic.DeepEqual(during, c.Status.SynchronousQuorum) {
		return nil
	}
	return r.recordDecision(ctx, c, func(s *tuskv1alpha1.PostgresClusterStatus) error {
		s.SynchronousQuorum = during
		return nil
	})
}

func (r *ClusterReconciler) pushConfig(ctx context.Context, m *member, cfg instanceapi.Config, hash string, ic *instanceClient) error {
	var res instanceapi.ConfigResult
	if err := ic.call(ctx, m.pod, http.MethodPut, instanceapi.PathConfig, cfg, &res); err != nil {
		return fmt.Errorf("while configuring %s: %w", m.name, err)
	}
	if len(res.Errors) > 0 {
		r.event(m.pod, corev1.EventTypeWarning, tuskv1alpha1.ReasonConfigRefused, "Configure", "PostgreSQL refused settings: %v", res.Errors)
	}
	ctrlLog(ctx).Info("Configured instance", "instance", m.name, "pendingRestart", res.PendingRestart)
	patch := client.MergeFrom(m.pod.DeepCopy())
	setAnnotation(m.pod, AnnotationConfigHash, hash)
	if err := r.Patch(ctx, m.pod, patch); err != nil {
		return fmt.Errorf("while recording the configuration of %s: %w", m.name, err)
	}
	return nil
}

// userParameters are the spec's postgresql.conf settings, as the instance
// API carries them.
func userParameters(c *tuskv1alpha1.PostgresCluster) map[string]string {
	if c.Spec.PostgreSQL.Parameters == nil {
		return nil
	}
	out := make(map[string]string, len(c.Spec.PostgreSQL.Parameters))
	for k, v := range c.Spec.PostgreSQL.Parameters {
		out[k] = string(v)
	}
	return out
}
