package version

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	info := Info{Version: "v0.1.0", Commit: "abc123", BuildDate: "2026-11-22T00:00:00Z", GoVersion: "go1.26.8", Platform: "linux/amd64"}
	want := "tusk v0.1.0 (abc123) built 2026-11-22T00:00:00Z go1.26.8 linux/amd64"
	if got := info.String(); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestGetReportsTheLinkedVersion(t *testing.T) {
	old := Version
	Version = "v9.9.9"
	defer func() { Version = old }()
	if got := Get(); got.Version != "v9.9.9" || !strings.HasPrefix(got.GoVersion, "go") {
		t.Fatalf("Get() = %+v", got)
	}
}
