package instance

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"tusk.dev/tusk/internal/instance/lifecycle"
	"tusk.dev/tusk/internal/instanceapi"
)

func TestBackoffDoublesWithinBounds(t *testing.T) {
	b := Backoff{Min: time.Second, Max: 5 * time.Second}
	var got []time.Duration
	d := time.Duration(0)
	for range 5 {
		d = b.next(d)
		got = append(got, d)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoff sequence %v, want %v", got, want)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	valid := Options{Name: "pg-1", DataDir: "/d", SocketDir: "/s", RunDir: "/r", Port: 5432, Role: instanceapi.RolePrimary}
	if err := valid.validate(); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	bad := valid
	bad.Role, bad.Port = instanceapi.RoleReplica, 0
	err := bad.validate()
	for _, want := range []string{"port 0", "a replica needs an upstream host"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate() = %v, want it to mention %q", err, want)
		}
	}
	withTLS := valid
	withTLS.TLS = TLSOptions{Dir: "/tls", ReplicationDir: "/repl-tls"}
	if err := withTLS.validate(); err != nil {
		t.Fatalf("TLS options refused: %v", err)
	}
	withTLS.TLS.Dir = ""
	if err := withTLS.validate(); err == nil || !strings.Contains(err.Error(), "needs the server certificate") {
		t.Errorf("a replication certificate without a server certificate: %v", err)
	}
}

func TestPgpassEscape(t *testing.T) {
	if got := pgpassEscape(`a:b\c`); got != `a\:b\\c` {
		t.Fatalf("pgpassEscape = %q", got)
	}
}

func TestReadSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	s, err := readSecrets(SecretFiles{Superuser: write("su", "pw\n"), Replication: write("repl", "r")})
	if err != nil || s.superuserPassword != "pw" || s.replicationPassword != "r" {
		t.Fatalf("readSecrets = %+v, %v", s, err)
	}
	_, err = readSecrets(SecretFiles{Superuser: write("empty", "\n")})
	if err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("an empty password file was accepted: %v", err)
	}
}

// TestBootstrapNeverWipesUnknownData: a non-empty directory that holds no
// PostgreSQL cluster is refused, and left as it was.
func TestBootstrapNeverWipesUnknownData(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "pgdata")
	precious := filepath.Join(dataDir, "precious.txt")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(precious, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := &Manager{opts: Options{DataDir: dataDir, RunDir: dir, Role: instanceapi.RolePrimary}, log: logr.Discard()}
	_, err := m.bootstrap(context.Background())
	if err == nil || !strings.Contains(err.Error(), "refusing to bootstrap") {
		t.Fatalf("bootstrap into a non-empty directory: %v", err)
	}
	if data, err := os.ReadFile(precious); err != nil || string(data) != "keep me" {
		t.Fatalf("the existing file was touched: %q, %v", data, err)
	}
}

func TestIsDataDir(t *testing.T) {
	dir := t.TempDir()
	if isDataDir(dir) {
		t.Fatal("an empty directory is not a data directory")
	}
	if err := os.MkdirAll(filepath.Join(dir, "global"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"PG_VERSION", "global/pg_control"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if !isDataDir(dir) {
		t.Fatal("PG_VERSION and global/pg_control make a data directory")
	}
}

func TestChangedPasswords(t *testing.T) {
	old := secrets{superuserPassword: "su", replicationPassword: "repl", appPassword: "app"}
	tests := []struct {
		name          string
		next          secrets
		owner         string
		byPassword    bool
		wantRoles     string
		wantPasswords string
	}{
		{"nothing changed", old, "app", true, "", ""},
		{"all changed", secrets{superuserPassword: "su2", replicationPassword: "repl2", appPassword: "app2"}, "owner", true,
			"postgres tusk_replication owner", "su2 repl2 app2"},
		{"replication by certificate", secrets{superuserPassword: "su", replicationPassword: "repl2", appPassword: "app"}, "app", false, "", ""},
		{"no application owner", secrets{superuserPassword: "su", replicationPassword: "repl", appPassword: "app2"}, "", true, "", ""},
		{"a file no longer given", secrets{superuserPassword: "su", appPassword: "app"}, "app", true, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var roles, passwords []string
			for _, c := range changedPasswords(old, tt.next, tt.owner, tt.byPassword) {
				roles, passwords = append(roles, c.role), append(passwords, c.password)
			}
			if strings.Join(roles, " ") != tt.wantRoles || strings.Join(passwords, " ") != tt.wantPasswords {
				t.Fatalf("changed %v %v, want %q %q", roles, passwords, tt.wantRoles, tt.wantPasswords)
			}
		})
	}
}

func TestCurrentCrashStreak(t *testing.T) {
	started := time.Now()
	st := state{life: inPhase(t, lifecycle.Started, lifecycle.Accepting), crashStreak: 2, startedAt: started}
	if got := st.currentCrashStreak(started.Add(time.Second)); got != 2 {
		t.Errorf("running for 1s: streak %d, want 2 (not stable yet)", got)
	}
	if got := st.currentCrashStreak(started.Add(crashLoopStableRun)); got != 0 {
		t.Errorf("running for %s: streak %d, want 0", crashLoopStableRun, got)
	}
	st.life = inPhase(t, lifecycle.Started, lifecycle.Accepting, lifecycle.Exited)
	if got := st.currentCrashStreak(started.Add(time.Hour)); got != 2 {
		t.Errorf("crashed: streak %d, want 2", got)
	}
}

// inPhase is the lifecycle after events, which must all be accepted.
func inPhase(t *testing.T, events ...lifecycle.Event) lifecycle.State {
	t.Helper()
	var life lifecycle.State
	for _, e := range events {
		next, err := life.Apply(e)
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		life = next
	}
	return life
}
