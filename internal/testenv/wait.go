package testenv

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Eventually polls check until it returns nil, and fails the test with the
// last error if that does not happen within timeout. It is for state that
// another goroutine or process changes (a controller, an API server); the
// timeout is a bound on a hang, not a guess at how long things take.
func Eventually(t testing.TB, timeout time.Duration, check func(ctx context.Context) error) {
	t.Helper()
	EventuallyEvery(t, timeout, 50*time.Millisecond, check)
}

// EventuallyEvery is Eventually polling every interval, for checks that are
// expensive to run (a process started in a pod, a query).
func EventuallyEvery(t testing.TB, timeout, interval time.Duration, check func(ctx context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), interval, timeout, true,
		func(ctx context.Context) (bool, error) {
			last = check(ctx)
			return last == nil, nil
		})
	if err != nil {
		t.Fatalf("not reached within %s: %v", timeout, last)
	}
}

// Consistently runs check every interval for duration and fails the test at
// the first error. It is for state that must not change while something
// else has every chance to change it (a restarted controller, a halted
// rollout). Each check gets a context of its own, so the end of the period
// never cuts a check short.
func Consistently(t testing.TB, duration, interval time.Duration, check func(ctx context.Context) error) {
	t.Helper()
	end := time.Now().Add(duration)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := check(ctx)
		cancel()
		if err != nil {
			t.Fatalf("did not hold for %s: %v", duration, err)
		}
		if time.Now().After(end) {
			return
		}
		time.Sleep(interval)
	}
}
