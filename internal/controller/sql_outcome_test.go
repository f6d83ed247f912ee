package controller

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// TestApplyOutcome: what each answer of the primary to an apply makes of
// the object. A busy primary (a session holds the applies' lock: 423) is
// told as ApplyBusy with the manager's words and retried soon, not taken
// for a failure retried slowly; a call that did not answer in time waits
// for the primary.
func TestApplyOutcome(t *testing.T) {
	answer := func(code int, msg string) error {
		return &instanceAPIError{method: http.MethodPut, path: instanceapi.PathSQLRoles, pod: "pg-1", code: code,
			body: fmt.Sprintf(`{"error":%q}`, msg)}
	}
	timedOut := fmt.Errorf("PUT /v1/sql/roles on pg-1 did not answer within 1m0s: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		name    string
		err     error
		reason  string
		retry   time.Duration
		message string
	}{
		{"applied", nil, tuskv1alpha1.ReasonApplied, sqlResync, "the catalogs of the primary pg-1 match the spec"},
		{"busy", answer(http.StatusLocked, `another session holds the lock of the SQL applies: session 42 (user "mallory") held it`),
			tuskv1alpha1.ReasonApplyBusy, sqlWaitPrimary, `the primary pg-1 is busy, Tusk tries again: another session holds the lock of the SQL applies: session 42 (user "mallory")`},
		{"refused", answer(http.StatusUnprocessableEntity, "role ghost does not exist"), tuskv1alpha1.ReasonApplyRefused, sqlRetryRefused, "role ghost does not exist"},
		{"not writable", answer(http.StatusConflict, "this instance is a replica"), tuskv1alpha1.ReasonWaitingForPrimary, sqlWaitPrimary, "waiting for the primary pg-1: this instance is a replica"},
		{"timed out", timedOut, tuskv1alpha1.ReasonWaitingForPrimary, sqlWaitPrimary, "did not answer within 1m0s"},
		{"failed", answer(http.StatusInternalServerError, "out of memory"), tuskv1alpha1.ReasonApplyFailed, sqlRetryRefused, "out of memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := applyOutcome("pg-1", instanceapi.ApplyResult{}, tc.err)
			if got.reason != tc.reason || got.retry != tc.retry || !strings.Contains(got.message, tc.message) {
				t.Errorf("got %s, retry %s, %q; want %s, retry %s, a message with %q", got.reason, got.retry, got.message, tc.reason, tc.retry, tc.message)
			}
		})
	}
}
