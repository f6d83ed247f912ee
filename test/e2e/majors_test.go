//go:build e2e

package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestEveryMajor runs the basics on each PostgreSQL major Tusk builds an
// image of besides testImage's 15, which every other test runs: a
// two-instance cluster comes up Ready on that image, serves that major over
// TLS, streams rows to its replica, switches over to it (kubectl tusk
// promote) and keeps replicating the other way. 17 is in the long tier:
// TestMajorUpgrade ends on a two-instance cluster of 17 that serves and
// replicates.
func TestEveryMajor(t *testing.T) {
	parallel(t)
	for _, major := range []int{17, 18} {
		t.Run(fmt.Sprintf("PostgreSQL %d", major), func(t *testing.T) {
			if major == 17 {
				longTier(t)
			}
			ns := newNamespace(t)
			name := fmt.Sprintf("pg%d", major)
			pgc := newCluster(ns, name, 2)
			pgc.Spec.Image = fmt.Sprintf("tusk/postgres:%d", major)
			createCluster(t, pgc, "")
			took := waitReadyCondition(t, ns, name)
			t.Logf("2-instance cluster on PostgreSQL %d Ready %.0fs after create", major, took.Seconds())
			waitHealthy(t, ns, name, 2, time.Minute)

			startSQLClient(t, ns, name)
			if got := psql(t, ns, name+"-rw", "SELECT current_setting('server_version_num')::int / 10000"); got != strconv.Itoa(major) {
				t.Fatalf("%s-rw serves PostgreSQL %s, want %d", name, got, major)
			}
			psql(t, ns, name+"-rw", "CREATE TABLE lifecycle (id int PRIMARY KEY)")
			insertRows(t, ns, name, 1, 100)
			waitRowsEverywhere(t, ns, name, 100)

			before := mustGetCluster(t, ns, name).Status.CurrentPrimary
			var replica string
			for _, inst := range mustGetCluster(t, ns, name).Status.Instances {
				if inst.Name != before {
					replica = inst.Name
				}
			}
			promote(t, ns, name, replica)
			if after := mustGetCluster(t, ns, name).Status.CurrentPrimary; after != replica {
				t.Fatalf("after promoting %s the primary is %s", replica, after)
			}
			waitHealthy(t, ns, name, 2, 2*time.Minute)
			waitRWRoutesTo(t, ns, name, replica)
			insertRows(t, ns, name, 101, 200)
			waitRowsEverywhere(t, ns, name, 200)
		})
	}
}
