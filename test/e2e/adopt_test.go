//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// TestRecreatedClusterAdoptsTheMostAdvancedData: a cluster deleted with
// its volumes kept (reclaimPolicy Retain, the default) and created again
// under the same name starts on them with the most advanced data as its
// primary, whatever its serial: here adopt-1, the lowest, is a replica
// that missed the last rows (fenced while they were written), and adopt-3
// was the primary. Every row is there afterwards, on every instance.
func TestRecreatedClusterAdoptsTheMostAdvancedData(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	const name = "adopt"
	lagging, last := name+"-1", name+"-3"
	createCluster(t, newCluster(ns, name, 3), "")
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, 3, time.Minute)
	startSQLClient(t, ns, name)
	psql(t, ns, name+"-rw", "CREATE TABLE lifecycle (id int PRIMARY KEY)")
	insertRows(t, ns, name, 1, 100)
	promote(t, ns, name, last)
	waitHealthy(t, ns, name, 3, clusterChangeTimeout)
	waitRWRoutesTo(t, ns, name, last)
	waitRowsEverywhere(t, ns, name, 100)
	setFencedAnnotation(t, ns, name, lagging)
	waitEvent(t, ns, tuskv1alpha1.ReasonFenced, lagging)
	// ANY 1 of the two standbys: adopt-2 confirms what adopt-1 misses.
	insertRows(t, ns, name, 101, 200)

	deleteCluster(t, ns, name)
	waitClusterObjectsGone(t, ns, name, true)
	start := time.Now()
	createCluster(t, newCluster(ns, name, 3), "")
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, 3, clusterChangeTimeout)
	t.Logf("figure: a 3-instance cluster created again over its kept volumes: Healthy %.1fs after the create", time.Since(start).Seconds())
	waitEvent(t, ns, tuskv1alpha1.ReasonAdoptedVolumes, name)
	events, err := clientset.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if strings.HasPrefix(e.Reason, "Adopt") || e.Reason == tuskv1alpha1.ReasonKeptSecrets {
			t.Logf("Event %s: %s", e.Reason, e.Note)
		}
	}
	if p := currentPrimary(t, ns, name); p == lagging {
		t.Fatalf("the adopted cluster's primary is %s, whose volume missed the last 100 rows", p)
	}
	waitRowsEverywhere(t, ns, name, 200)
}
