package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// PrometheusBinDirEnv names the directory holding prometheus and promtool;
// `make integration` sets it from hack/install-prometheus.sh.
const PrometheusBinDirEnv = "TUSK_PROMETHEUS_BINDIR"

// RequirePromtool returns the path of promtool, skipping the test when it
// is not there, or failing it under CI, where every test must run.
func RequirePromtool(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(PrometheusBinDirEnv)
	err := errors.New(PrometheusBinDirEnv + " is not set: run hack/install-prometheus.sh and export it")
	if dir != "" {
		path := filepath.Join(dir, "promtool")
		if _, err = os.Stat(path); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(err)
	}
	t.Skip(err)
	return ""
}
