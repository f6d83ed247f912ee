// Package version reports which build of Tusk is running.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set at link time by the Makefile (-X tusk.dev/tusk/internal/version.Version=...).
var (
	Version   = "dev"
	Commit    = ""
	BuildDate = ""
)

// Info is the version of this binary.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	BuildDate string `json:"buildDate,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the version of this binary, falling back to the VCS revision
// the Go toolchain recorded when no commit was set at link time.
func Get() Info {
	info := Info{
		Version:   Version,
		Commit:    Commit,
		BuildDate: BuildDate,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if info.Commit == "" {
		info.Commit = vcsRevision()
	}
	return info
}

func vcsRevision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			return s.Value
		}
	}
	return ""
}

// String is the one-line form printed by `tusk version`.
func (i Info) String() string {
	s := fmt.Sprintf("tusk %s", i.Version)
	if i.Commit != "" {
		s += " (" + i.Commit + ")"
	}
	if i.BuildDate != "" {
		s += " built " + i.BuildDate
	}
	return s + " " + i.GoVersion + " " + i.Platform
}
