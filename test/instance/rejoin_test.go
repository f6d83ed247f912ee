//go:build integration

package instance

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/postgres"
)

// TestFormerPrimaryWaitsForTheNewPrimary: a former primary whose pod is
// recreated as a replica rewinds before postgres starts. When the new
// primary does not answer yet, its manager keeps running with postgres
// stopped (phase Rejoining, the reason in lastError) and retries, instead
// of exiting into the kubelet's CrashLoopBackOff; once the new primary
// answers it rejoins without a fresh copy. Meanwhile it reports its
// stopped data directory (StoppedForRejoin): the shutdown checkpoint its
// standby received, which tells the operator that standby has every write.
func TestFormerPrimaryWaitsForTheNewPrimary(t *testing.T) {
	former, next := primaryWithReplica(t, "rj")
	former.stop()
	standby, err := next.status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	next.command(http.MethodPost, instanceapi.PathPromote, nil, nil)
	next.waitReady(instanceapi.RolePrimary)
	next.exec("INSERT INTO t VALUES (2)")
	next.stop()

	former.start(withFlags(former.args, "--role", string(instanceapi.RoleReplica), "--upstream-port", strconv.Itoa(next.port)))
	former.waitFor("waiting to rejoin", func(st instanceapi.Status) error {
		if st.Phase != instanceapi.PhaseRejoining || !strings.Contains(st.LastError, "cannot rejoin until the primary answers") {
			return errors.New("phase " + string(st.Phase) + ", last error " + st.LastError)
		}
		return nil
	})
	select {
	case <-former.exited:
		t.Fatalf("the manager exited instead of waiting for the new primary:\n%s", former.logs())
	default:
	}
	if ps := former.postgresProcesses(); len(ps) > 0 {
		t.Fatalf("a former primary that has not rejoined runs postgres: %v", ps)
	}
	checkStoppedForRejoin(t, former, standby)

	next.start(withFlags(next.args, "--role", string(instanceapi.RolePrimary)))
	next.waitReady(instanceapi.RolePrimary)
	if st := former.waitReady(instanceapi.RoleReplica); st.StoppedForRejoin != nil {
		t.Errorf("a rejoined replica still reports its stopped data directory: %+v", *st.StoppedForRejoin)
	}
	next.exec("INSERT INTO t VALUES (3)")
	former.waitIDs(1, 2, 3)
	if strings.Contains(former.logs(), "copying the primary afresh") {
		t.Errorf("the former primary was copied afresh; a rewind was enough:\n%s", former.logs())
	}
}

// TestUnfencedFormerPrimaryWaitsToRejoin: a primary fenced by hand, then
// recreated as a replica while the new primary does not answer, stays
// fenced with its data directory as it was; unfenced, it tries to rejoin
// and fails, and postgres stays stopped: started from the former
// primary's data it would be a second writable primary. Once the new
// primary answers, the run loop rejoins it and starts it as a replica.
func TestUnfencedFormerPrimaryWaitsToRejoin(t *testing.T) {
	former, next := primaryWithReplica(t, "urj")
	former.command(http.MethodPost, instanceapi.PathFence, nil, nil)
	former.stop()
	next.command(http.MethodPost, instanceapi.PathPromote, nil, nil)
	next.waitReady(instanceapi.RolePrimary)
	next.exec("INSERT INTO t VALUES (2)")
	next.stop()

	former.start(withFlags(former.args, "--role", string(instanceapi.RoleReplica), "--upstream-port", strconv.Itoa(next.port)))
	former.waitLog("Fenced by hand before this start")
	former.command(http.MethodPost, instanceapi.PathUnfence, nil, nil)
	former.waitFor("waiting to rejoin, unfenced", func(st instanceapi.Status) error {
		if st.Fenced || st.Phase != instanceapi.PhaseRejoining || !strings.Contains(st.LastError, "cannot rejoin until the primary answers") {
			return fmt.Errorf("fenced %v, phase %s, last error %s", st.Fenced, st.Phase, st.LastError)
		}
		return nil
	})
	if ps := former.postgresProcesses(); len(ps) > 0 {
		t.Fatalf("an unfenced former primary that has not rejoined runs postgres: %v\n%s", ps, former.logs())
	}

	next.start(withFlags(next.args, "--role", string(instanceapi.RolePrimary)))
	next.waitReady(instanceapi.RolePrimary)
	former.waitReady(instanceapi.RoleReplica)
	next.exec("INSERT INTO t VALUES (3)")
	former.waitIDs(1, 2, 3)
}

// checkStoppedForRejoin: a former primary waiting to rejoin reports the
// data directory it stopped with, cleanly shut down on timeline 1 and as
// it found it at start (nothing touched it since), and the standby that
// streamed from it received past that shutdown checkpoint.
func checkStoppedForRejoin(t *testing.T, former *node, standby instanceapi.Status) {
	t.Helper()
	st, err := former.status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	d := st.StoppedForRejoin
	if d == nil || d.State != instanceapi.StateShutDown || d.Standby || d.Timeline != 1 {
		t.Fatalf("a cleanly stopped former primary waiting to rejoin reports StoppedForRejoin %+v, want a primary's data directory shut down on timeline 1", d)
	}
	if st.DataDir == nil || *st.DataDir != *d {
		t.Errorf("StoppedForRejoin %+v differs from the data directory found at start %+v, and nothing changed it", *d, st.DataDir)
	}
	checkpoint, err := postgres.ParseLSN(d.CheckpointLSN)
	if err != nil {
		t.Fatal(err)
	}
	if received, err := postgres.ParseLSN(standby.ReceivedLSN); err != nil || received <= checkpoint || standby.Timeline != d.Timeline {
		t.Errorf("the standby received %s on timeline %d (%v), want past the shutdown checkpoint %s on timeline %d",
			standby.ReceivedLSN, standby.Timeline, err, checkpoint, d.Timeline)
	}
}

// primaryWithReplica starts a primary <prefix>-1 with a row in table t
// and a replica <prefix>-2 that has it.
func primaryWithReplica(t *testing.T, prefix string) (primary, replica *node) {
	t.Helper()
	primary = startNode(t, prefix+"-1", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)
	primary.exec("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
	replica = startNode(t, prefix+"-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
	replica.waitReady(instanceapi.RoleReplica)
	replica.waitIDs(1)
	return primary, replica
}

// withFlags returns args with the value of each flag given replaced.
func withFlags(args []string, flagValues ...string) []string {
	out := slices.Clone(args)
	for i := 0; i+1 < len(flagValues); i += 2 {
		if at := slices.Index(out, flagValues[i]); at >= 0 && at+1 < len(out) {
			out[at+1] = flagValues[i+1]
		}
	}
	return out
}
