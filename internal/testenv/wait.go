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
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true,
		func(ctx context.Context) (bool, error) {
			last = check(ctx)
			return last == nil, nil
		})
	if err != nil {
		t.Fatalf("not reached within %s: %v", timeout, last)
	}
}
