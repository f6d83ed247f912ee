package main

import (
	"bytes"
	"encoding/json"
	"testing"
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
		"check": {"dsn", "table", "ledger", "split-brain-window", "max-lost", "gap-threshold"},
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
