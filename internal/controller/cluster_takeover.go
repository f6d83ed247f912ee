package controller

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// A logical import from a Tusk cluster of the same namespace
// (bootstrap.initdb.import.source.cluster) ends with a handover of the
// source's Services: once the importing cluster reports its cutover done,
// the source's -rw, -ro and -r Services select the importing cluster's
// instances, so applications that connect to the old names move without
// a change of connection string. The source cluster decides this itself
// from what it reads (its reconciler owns its Services and its status);
// the importing cluster only reports its phase. Deleting the importing
// cluster gives the Services back.

// takesOverFrom is the cluster whose Services this one takes over after
// its logical import's cutover, or nil.
func takesOverFrom(c *tuskv1alpha1.PostgresCluster) *tuskv1alpha1.PostgresCluster {
	if !logicalImport(c) || initDB(c).Import.Source.Cluster == "" {
		return nil
	}
	return siblingCluster(c.Namespace, initDB(c).Import.Source.Cluster)
}

// servedBy picks, among the clusters of c's namespace, the one c's
// Services send clients to: a cluster whose logical import from c has
// been cut over and which is not being deleted ("" for none). Should two
// have cut over from the same source, the first by name wins, so that
// every reconcile picks the same one.
func servedBy(c *tuskv1alpha1.PostgresCluster, clusters []tuskv1alpha1.PostgresCluster) string {
	var names []string
	for i := range clusters {
		x := &clusters[i]
		from := takesOverFrom(x)
		if x.Name == c.Name || from == nil || from.Name != c.Name || !x.DeletionTimestamp.IsZero() {
			continue
		}
		if x.Status.Import != nil && x.Status.Import.Phase == tuskv1alpha1.ImportCutOver {
			names = append(names, x.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return slices.Min(names)
}

// servingCluster is the cluster c's Services select now: c's own
// instances (""), or those of the cluster that took them over.
func (r *ClusterReconciler) servingCluster(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (string, error) {
	var list tuskv1alpha1.PostgresClusterList
	if err := r.List(ctx, &list, client.InNamespace(c.Namespace)); err != nil {
		return "", err
	}
	return servedBy(c, list.Items), nil
}

// recordServedBy follows a change of the cluster c's Services select
// (by), once they are applied: on a handover, the old primary ends its
// ordinary roles' sessions, so that every client reconnects through the
// Services to the new cluster (one that connected in the moment between
// the cutover's end of sessions and the switch would stay, read-only);
// then status.servedBy and an Event record it. A failed request is
// tried again by the next pass, status.servedBy not yet changed.
func (r *ClusterReconciler) recordServedBy(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient, by string) error {
	if by == c.Status.ServedBy {
		return nil
	}
	services := strings.Join([]string{rwServiceName(c), roServiceName(c), rServiceName(c)}, ", ")
	if by == "" {
		r.event(c, corev1.EventTypeNormal, "ServicesReturned", "Import",
			"%s no longer takes this cluster's Services: %s select this cluster's own instances again", c.Status.ServedBy, services)
		c.Status.ServedBy = ""
		return nil
	}
	ended := 0
	if primary := v.member(c.Status.CurrentPrimary); primary != nil && primary.pod != nil && primary.status != nil {
		var res instanceapi.EndSessionsResult
		if err := ic.call(ctx, primary.pod, http.MethodPost, instanceapi.PathEndSessions, nil, &res); err != nil {
			return fmt.Errorf("while asking %s to end its client sessions after the handover of the Services: %w", primary.name, err)
		}
		ended = res.Ended
	}
	r.event(c, corev1.EventTypeNormal, "ServicesHandedOver", "Import",
		"The cutover of %s's logical import from this cluster is done: %s send clients to %s's instances; %d client sessions left on this cluster's primary were ended",
		by, services, by, ended)
	c.Status.ServedBy = by
	return nil
}

// clustersTakenOver maps a cluster to the cluster its logical import
// comes from, whose Services follow its cutover.
func (r *ClusterReconciler) clustersTakenOver(_ context.Context, o client.Object) []reconcile.Request {
	c, ok := o.(*tuskv1alpha1.PostgresCluster)
	if !ok {
		return nil
	}
	from := takesOverFrom(c)
	if from == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(from)}}
}
