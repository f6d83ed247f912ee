//go:build integration

package instance

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"tusk.dev/tusk/internal/instanceapi"
)

// TestCloneBootstrap bootstraps a new primary, with TLS material of its
// own, by copying a running TLS primary of another cluster with its
// replication client certificate: it has the source's rows, is a primary
// on a new timeline and takes writes independently of the source. A
// certificate the source does not trust is a clear error in /status,
// retried, with no data directory left.
func TestCloneBootstrap(t *testing.T) {
	sourcePKI, ownPKI := newClusterPKI(t), newClusterPKI(t)
	source := startNode(t, "src-1", nodeOptions{role: instanceapi.RolePrimary, tls: sourcePKI})
	srcStatus := source.waitReady(instanceapi.RolePrimary)
	source.exec("CREATE TABLE t (id int PRIMARY KEY)")
	source.exec("INSERT INTO t VALUES (1), (2)")

	cloneArgs := func(kp *clusterPKI) []string {
		dir := filepath.Join(workDir(t), "clone-tls")
		mountCerts(t, dir, kp.repl, sourcePKI.ca)
		return []string{"--clone-host", "127.0.0.1", "--clone-port", strconv.Itoa(source.port), "--clone-tls-dir", dir}
	}

	t.Run("copies and promotes", func(t *testing.T) {
		n := startNode(t, "clone-1", nodeOptions{role: instanceapi.RolePrimary, tls: ownPKI, extraArgs: cloneArgs(sourcePKI)})
		st := n.waitReady(instanceapi.RolePrimary)
		if st.Timeline != srcStatus.Timeline+1 {
			t.Errorf("clone on timeline %d, want %d (a promotion after the source's %d)", st.Timeline, srcStatus.Timeline+1, srcStatus.Timeline)
		}
		n.waitIDs(1, 2)
		// Independent: writes on either side stay there.
		source.exec("INSERT INTO t VALUES (3)")
		n.exec("INSERT INTO t VALUES (4)")
		n.waitIDs(1, 2, 4)
		source.waitIDs(1, 2, 3)
	})

	t.Run("an untrusted certificate", func(t *testing.T) {
		n := startNode(t, "clone-2", nodeOptions{role: instanceapi.RolePrimary, tls: ownPKI, extraArgs: cloneArgs(ownPKI)})
		st := n.waitFor("a failed attempt", func(st instanceapi.Status) error {
			if st.Recovery == nil || st.Recovery.FailedAttempts < 1 {
				return fmt.Errorf("recovery %+v, error %q: want a failed attempt", st.Recovery, st.LastError)
			}
			return nil
		})
		if st.Phase != instanceapi.PhaseRecovering || !strings.Contains(st.LastError, "pg_basebackup failed") {
			t.Errorf("phase %s, last error %q; want Recovering and pg_basebackup's failure", st.Phase, st.LastError)
		}
		for _, dir := range []string{"pgdata", "pgdata.tusk-bootstrap"} {
			if entries, err := os.ReadDir(filepath.Join(n.dir, dir)); err == nil && len(entries) > 0 {
				t.Errorf("a failed clone left %d entries in %s", len(entries), dir)
			}
		}
	})
}
