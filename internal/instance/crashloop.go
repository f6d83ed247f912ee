package instance

import (
	"errors"
	"time"
)

// A postgres that keeps crashing right after each restart is a crash loop.
// A primary in one gives its Lease up (crashLoop.crashed, giveUpPrimary),
// so the operator fails over to a replica that runs, instead of the
// manager restarting it forever while no write goes through.
const (
	// crashLoopLimit is how many short runs in a row make a crash loop.
	crashLoopLimit = 3
	// crashLoopStableRun: a postgres that ran this long before it crashed
	// ends the streak, and the restart backoff starts over.
	crashLoopStableRun = 30 * time.Second
)

// errCrashLoop is why a crash-looping primary fenced itself.
var errCrashLoop = errors.New("postgres keeps crashing right after each restart")

// crashLoop counts the consecutive short runs of postgres. The run loop
// alone uses it.
type crashLoop struct {
	// streak is how many runs in a row ended in a crash before
	// crashLoopStableRun.
	streak int
}

// crashed records an unexpected exit after a run of uptime. It says
// whether the streak now makes a crash loop, and whether the crash came
// after a stable run, when the restart backoff starts over from its
// shortest wait.
func (c *crashLoop) crashed(uptime time.Duration) (looping, afterStableRun bool) {
	afterStableRun = uptime >= crashLoopStableRun
	if afterStableRun {
		c.streak = 0
	}
	c.streak++
	return c.streak >= crashLoopLimit, afterStableRun
}
