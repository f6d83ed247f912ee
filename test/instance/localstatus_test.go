//go:build integration

package instance

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"tusk.dev/tusk/internal/instance"
	"tusk.dev/tusk/internal/instanceapi"
)

// TestStatusOnTheLocalSocket: the manager serves its /status on a socket
// in its run directory that only its own user may open, and `tusk
// instance status` (ReadLocalStatus) reads it: the same report as the
// operator gets over HTTPS.
func TestStatusOnTheLocalSocket(t *testing.T) {
	n := startNode(t, "local-1", nodeOptions{role: instanceapi.RolePrimary})
	n.waitReady(instanceapi.RolePrimary)
	runDir := filepath.Join(n.dir, "run")
	fi, err := os.Stat(filepath.Join(runDir, instance.LocalStatusSocket))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("the local status socket is %v, want a socket of mode 0600", fi.Mode())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := instance.ReadLocalStatus(ctx, runDir, &out); err != nil {
		t.Fatal(err)
	}
	var st instanceapi.Status
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("the local status is not the status JSON: %v\n%s", err, out.String())
	}
	if st.Role != instanceapi.RolePrimary || !st.Ready || st.CurrentLSN == "" {
		t.Errorf("local status: role %s ready %v LSN %q, want a ready primary with its LSN", st.Role, st.Ready, st.CurrentLSN)
	}
	n.stop()
	if err := instance.ReadLocalStatus(ctx, runDir, &out); err == nil {
		t.Error("the local status answered after the manager stopped")
	}
}
