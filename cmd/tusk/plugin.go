package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"tusk.dev/tusk/internal/plugin"
)

// invokedAsPlugin says whether the binary runs as kubectl-tusk (a copy or
// a link of tusk under that name, which kubectl finds on PATH).
func invokedAsPlugin(arg0 string) bool {
	base := strings.TrimSuffix(filepath.Base(arg0), ".exe")
	return base == plugin.BinaryName
}

// newPluginCommand is the kubectl plugin: kubectl-tusk as its own root, or
// `tusk plugin` under the tusk binary.
func newPluginCommand(use string) *cobra.Command {
	return plugin.NewCommand(use, genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
}
