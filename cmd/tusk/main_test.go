package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"tusk.dev/tusk/internal/plugin"
)

func TestVersionCommandJSON(t *testing.T) {
	var out bytes.Buffer
	cmd := newRootCommand()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"version", "--json"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("version --json printed %q: %v", out.String(), err)
	}
	if got["version"] == "" || got["goVersion"] == "" || got["platform"] == "" {
		t.Fatalf("version --json lacks fields: %v", got)
	}
}

func TestOperatorCommandHasItsFlags(t *testing.T) {
	cmd := newOperatorCommand()
	for _, name := range []string{"leader-elect", "metrics-bind-address", "metrics-secure", "health-probe-bind-address", "zap-log-level", "kubeconfig"} {
		if cmd.Flags().Lookup(name) == nil {
			t.Errorf("tusk operator has no --%s flag", name)
		}
	}
}

func TestWorkloadCommandsHaveTheirFlags(t *testing.T) {
	cmd := newWorkloadCommand()
	want := map[string][]string{
		"write": {"dsn", "clients", "duration", "table", "ledger", "timeout", "fsync-interval", "gap-threshold"},
		"check": {"dsn", "table", "ledger", "split-brain-window", "max-lost", "gap-threshold", "live"},
	}
	for sub, flags := range want {
		c, _, err := cmd.Find([]string{sub})
		if err != nil || c.Name() != sub {
			t.Fatalf("tusk workload has no %s subcommand: %v", sub, err)
		}
		for _, name := range flags {
			if c.Flags().Lookup(name) == nil {
				t.Errorf("tusk workload %s has no --%s flag", sub, name)
			}
		}
	}
}

func TestInvokedAsPlugin(t *testing.T) {
	for arg0, want := range map[string]bool{
		"kubectl-tusk":                    true,
		"/home/me/bin/kubectl-tusk":       true,
		"kubectl-tusk.exe":                true,
		"tusk":                            false,
		"/usr/local/bin/tusk":             false,
		"/usr/local/bin/kubectl-tusk-old": false,
	} {
		if got := invokedAsPlugin(arg0); got != want {
			t.Errorf("invokedAsPlugin(%q) = %v, want %v", arg0, got, want)
		}
	}
}

func TestPluginCommandHasKubeconfigFlags(t *testing.T) {
	cmd := newPluginCommand("kubectl-tusk")
	for _, name := range []string{"kubeconfig", "context", "namespace"} {
		if cmd.PersistentFlags().Lookup(name) == nil {
			t.Errorf("kubectl-tusk has no --%s flag", name)
		}
	}
	if f := cmd.PersistentFlags().ShorthandLookup("n"); f == nil || f.Name != "namespace" {
		t.Errorf("-n is %v, want --namespace", f)
	}
}

func TestWALCommandsHaveTheirFlags(t *testing.T) {
	cmd := newInstanceCommand()
	for _, sub := range []string{"wal-archive", "wal-restore"} {
		c, _, err := cmd.Find([]string{sub})
		if err != nil || c.Name() != sub {
			t.Fatalf("tusk instance has no %s subcommand: %v", sub, err)
		}
		for _, name := range []string{"config", "timeout"} {
			if c.Flags().Lookup(name) == nil {
				t.Errorf("tusk instance %s has no --%s flag", sub, name)
			}
		}
	}
}

// TestWALRestoreUsageErrorsStopRecovery: a restore_command that is wrong
// must not look like "file not in the archive" (exit 1) to PostgreSQL.
func TestWALRestoreUsageErrorsStopRecovery(t *testing.T) {
	for args, want := range map[string]int{
		"wal-restore only-one-arg":                exitAbortRecovery,
		"wal-restore --no-such-flag a b":          exitAbortRecovery,
		"wal-archive":                             1,
		"wal-restore --config /nonexistent a b":   exitAbortRecovery,
		"wal-archive --config /nonexistent a/b/c": 1,
	} {
		cmd := newRootCommand()
		cmd.SetArgs(append([]string{"instance"}, strings.Fields(args)...))
		cmd.SetErr(io.Discard)
		if got := exitCode(cmd.Execute()); got != want {
			t.Errorf("tusk instance %s: exit %d, want %d", args, got, want)
		}
	}
}

func TestExitCodeIsPsqlsUnderThePlugin(t *testing.T) {
	if got := exitCode(fmt.Errorf("while running: %w", &plugin.ExitCodeError{Code: 3})); got != 3 {
		t.Errorf("exitCode of psql's exit code 3 = %d", got)
	}
	if got := exitCode(errors.New("cluster not found")); got != 1 {
		t.Errorf("exitCode of another error = %d, want 1", got)
	}
}

// TestWaitsAreBoundedByDefault: the operator runs several workers per kind
// and bounds each pass, and the instance manager bounds a reload, unless
// told otherwise: a stuck instance must not stall every namespace.
func TestWaitsAreBoundedByDefault(t *testing.T) {
	operator := newOperatorCommand()
	run := newInstanceRunCommand()
	for _, f := range []struct {
		command, flag, want string
	}{
		{"operator", "max-concurrent-reconciles", "8"},
		{"operator", "reconcile-timeout", "10m0s"},
		{"instance run", "reload-timeout", "20s"},
	} {
		flags := operator.Flags()
		if f.command == "instance run" {
			flags = run.Flags()
		}
		got := flags.Lookup(f.flag)
		if got == nil || got.DefValue != f.want {
			t.Errorf("tusk %s --%s: %+v, want default %s", f.command, f.flag, got, f.want)
		}
	}
}
