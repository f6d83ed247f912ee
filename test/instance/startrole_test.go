//go:build integration

package instance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

// TestRoleAtStartFollowsTheLease: the role label reaches the pod late (the
// downward API), so at start the Lease decides for a primary's data
// directory: the instance holding it starts as the primary even when its
// label still says replica, and a primary-labelled instance whose Lease
// another holds stays fenced until that Lease expires.
func TestRoleAtStartFollowsTheLease(t *testing.T) {
	lease := newTestLease(t, "start-role")
	secrets := workDir(t)
	labels := func(role instanceapi.Role) string {
		return writeSecret(t, secrets, "labels", instanceapi.LabelRole+`="`+string(role)+`"`)
	}
	args := append(lease.args(t, lease.addr(t)), "--role-file", labels(instanceapi.RolePrimary))
	primary := startNode(t, "sr-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: args})
	primary.waitReady(instanceapi.RolePrimary)
	lease.waitHolder(t, "sr-1")
	primary.exec("CREATE TABLE t (id int PRIMARY KEY)")
	primary.exec("INSERT INTO t VALUES (1)")

	t.Run("holding the Lease, it starts as the primary despite a stale replica label", func(t *testing.T) {
		primary.kill() // keeps the Lease
		waitNoPostgres(t, primary)
		labels(instanceapi.RoleReplica)
		primary.rerun()
		primary.waitReady(instanceapi.RolePrimary)
		primary.waitLog("Starting as the primary: this instance holds the primary Lease")
		primary.waitIDs(1)
		primary.exec("INSERT INTO t VALUES (2)")
	})

	t.Run("labelled primary, with the Lease held by another, it stays fenced", func(t *testing.T) {
		primary.kill()
		waitNoPostgres(t, primary)
		stop := holdLease(t, lease, "sr-2")
		labels(instanceapi.RolePrimary)
		primary.rerun()
		primary.waitFor("fenced by sr-2's Lease", func(st instanceapi.Status) error {
			if err := isFenced(st); err != nil {
				return err
			}
			if !strings.Contains(st.LastError, "(sr-2)") {
				return errors.New("last error " + st.LastError)
			}
			return nil
		})
		if ps := primary.postgresProcesses(); len(ps) > 0 {
			t.Fatalf("a primary without the Lease runs postgres: %v", ps)
		}
		stop()
		primary.waitReady(instanceapi.RolePrimary)
		lease.waitHolder(t, "sr-1")
		primary.waitIDs(1, 2)
	})
}

// waitNoPostgres waits until the postgres of a killed manager has stopped
// (its parent-death signal asks for an immediate shutdown).
func waitNoPostgres(t *testing.T, n *node) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		if ps := n.postgresProcesses(); len(ps) > 0 {
			return fmt.Errorf("postgres still runs: %v", ps)
		}
		return nil
	})
}
