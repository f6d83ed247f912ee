package controller

import (
	"strings"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
)

// Every call to an instance manager has a deadline, whatever its caller
// passes: a manager that takes the request and never answers (a frozen
// pod, a postgres that ignores SIGHUP, a network that drops the answer)
// must not hold a worker, and with it other clusters' passes, forever.
// A caller may bound a call more tightly (statusTimeout, the backups'
// backupCallTimeout); the earlier deadline wins. A call cut off by its
// deadline is an error like a refused connection: the pass ends and the
// next one observes what the manager did meanwhile in /status, so a
// generous bound on a long command costs nothing but the wait.
const (
	// commandTimeout bounds a command the manager answers within seconds:
	// fence, unfence, follow, reconnect, checkpoint, WAL switch, the
	// backups' calls, ending sessions, an import's cutover (which answers
	// once started) and abandoning an import.
	commandTimeout = 30 * time.Second
	// configTimeout bounds a configuration push: the manager waits up to
	// its --reload-timeout (20s by default) for postgres to load it, after
	// any operation queued before it.
	configTimeout = 45 * time.Second
	// longCommandTimeout bounds what stops or starts postgres, or waits
	// for WAL or the Lease: promote, demote, step-down, restart, and the
	// upgrade's pre-checks (catalog queries). Generous, finite.
	longCommandTimeout = 5 * time.Minute
)

// callTimeout is the deadline of a call to path.
func callTimeout(path string) time.Duration {
	switch {
	case path == instanceapi.PathStatus:
		return statusTimeout
	case path == instanceapi.PathConfig:
		return configTimeout
	case strings.HasPrefix(path, "/v1/sql/") && path != instanceapi.PathSQLSlots:
		return sqlCallTimeout
	}
	switch path {
	case instanceapi.PathPromote, instanceapi.PathDemote, instanceapi.PathStepDown, instanceapi.PathRestart,
		instanceapi.PathUpgradePrecheck:
		return longCommandTimeout
	}
	return commandTimeout
}
