//go:build integration

package instance

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

// TestNewReplicaWaitsForItsPrimary: a replica started while its primary
// cannot be reached yet (a Service's endpoints follow the primary's
// readiness a moment later) waits and tries again instead of exiting, and
// becomes a streaming replica once the primary answers.
func TestNewReplicaWaitsForItsPrimary(t *testing.T) {
	primary := startNode(t, "wait-1", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)
	proxy := newTCPProxy(t, "127.0.0.1:"+strconv.Itoa(primary.port))
	proxy.cut() // nothing listens: connections are refused
	_, portText, _ := net.SplitHostPort(proxy.addr)
	port, _ := strconv.Atoi(portText)

	replica := startNode(t, "wait-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: port})
	// Two refused attempts: it waited, tried again, and is still there.
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		if strings.Count(replica.logs(), "The primary cannot be reached yet; trying again") < 2 {
			return errNotYet("two refused attempts of the replica to reach its primary")
		}
		return nil
	})
	proxy.restore()
	replica.waitReady(instanceapi.RoleReplica)
}

type errNotYet string

func (e errNotYet) Error() string { return "not yet: " + string(e) }
