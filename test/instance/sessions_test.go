//go:build integration

package instance

import (
	"context"
	"net/http"
	"testing"

	"tusk.dev/tusk/internal/instanceapi"
)

// TestEndClientSessions: POST /v1/sessions/end, which the operator sends
// an old primary once its Services moved to the cluster that imported it,
// ends the sessions of ordinary roles and leaves a superuser's.
func TestEndClientSessions(t *testing.T) {
	primary := startNode(t, "pg-1", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)
	ctx := context.Background()
	app, err := primary.connectOverTCP(ctx, "app", appPassword, "app")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = app.Close(ctx) }()
	dba := primary.connectAsSuperuser(t)

	var res instanceapi.EndSessionsResult
	primary.command(http.MethodPost, instanceapi.PathEndSessions, nil, &res)
	if res.Ended != 1 {
		t.Errorf("%s ended %d sessions, want 1 (the app's)", instanceapi.PathEndSessions, res.Ended)
	}
	if _, err := app.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("the app's session still answers after its end")
	}
	if _, err := dba.Exec(ctx, "SELECT 1"); err != nil {
		t.Errorf("the superuser's session was ended too: %v", err)
	}
}
