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
