//go:build integration

package instance

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
)

// TestHeldApplyLockAnswersBusy: any user who may connect can take the
// advisory key that serializes the role applies and keep it. A role apply
// meeting that session answers 423 within a few seconds, naming the
// session, instead of waiting as long as the user likes (which stalled
// every role apply, and the operator's worker sending it); once the
// session lets go, the apply goes through.
func TestHeldApplyLockAnswersBusy(t *testing.T) {
	primary := startNode(t, "applylock-1", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)
	primary.exec("CREATE ROLE mallory LOGIN PASSWORD 'mallory-pass'")
	session, err := primary.tryConnect(t.Context(), "mallory", "mallory-pass", "postgres")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = session.Close(context.Background()) }()
	if _, err := session.Exec(t.Context(), "SELECT pg_advisory_lock(1953854315)"); err != nil { // 0x7475736b, the apply lock's key
		t.Fatal(err)
	}

	start := time.Now()
	code, msg := applyRoleStatus(t, primary, instanceapi.RoleRequest{Name: "auditor", Login: true})
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the apply took %s behind a held lock, want an answer within 15s", took.Round(time.Second))
	}
	if code != http.StatusLocked || !strings.Contains(msg, `user "mallory"`) {
		t.Errorf("the apply behind mallory's lock answered %d %q, want 423 naming mallory's session", code, msg)
	}
	if readRole(t, primary, "auditor") != nil {
		t.Error("the apply answered busy but created the role")
	}

	if err := session.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	applyRole(t, primary, instanceapi.RoleRequest{Name: "auditor", Login: true})
	assertRole(t, primary, "auditor", roleRow{Login: true, Inherit: true, ConnLimit: -1, ValidUntil: "infinity"})
}
