package controller

import (
	"strings"
	"testing"
)

// TestPoolerNameCollision: a pooler is refused when its name, or the name
// of one of its objects, is one a cluster of the namespace uses; a name
// that merely starts like a cluster's is not.
func TestPoolerNameCollision(t *testing.T) {
	for _, tc := range []struct {
		pooler, cluster, object string
	}{
		{"pg", "pg", "pg"},
		{"pg-rw", "pg", "pg-rw"},
		{"pg-ro", "pg", "pg-ro"},
		{"pg-r", "pg", "pg-r"},
		{"pg-probe", "pg", "pg-probe"},
		{"pg-instance", "pg", "pg-instance"},
		{"pg-primary", "pg", "pg-primary"},
		{"pg-server", "pg", "pg-server"},
		{"pg-pooler", "pg", ""},
		{"pg-rw-pooler", "pg", ""},
		{"orders", "pg", ""},
	} {
		p := defaultPooler()
		p.Name = tc.pooler
		got := poolerNameCollision(p, tc.cluster)
		if tc.object == "" {
			if got != "" {
				t.Errorf("pooler %s beside cluster %s refused: %s", tc.pooler, tc.cluster, got)
			}
			continue
		}
		if !strings.Contains(got, "named "+tc.object+",") || !strings.Contains(got, "PostgresCluster "+tc.cluster) {
			t.Errorf("pooler %s beside cluster %s: %q, want %s named", tc.pooler, tc.cluster, got, tc.object)
		}
	}
}
