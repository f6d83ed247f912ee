// Command tusk is the one Tusk binary: the operator (`tusk operator`), the
// instance manager inside every PostgreSQL pod (`tusk instance`), and the
// kubectl plugin when it runs as kubectl-tusk (or as `tusk plugin`).
package main

import (
	"os"

	"github.com/spf13/cobra"

	"tusk.dev/tusk/internal/plugin"
)

func main() {
	root := newRootCommand()
	if invokedAsPlugin(os.Args[0]) {
		root = newPluginCommand(plugin.BinaryName)
	}
	if err := root.Execute(); err != nil {
		os.Exit(exitCode(err))
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "tusk",
		Short:         "Tusk runs PostgreSQL clusters on Kubernetes",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newVersionCommand(), newOperatorCommand(), newInstanceCommand(), newWorkloadCommand(), newProbeCommand(), newPluginCommand("plugin"),
		newPoolerCommand())
	return root
}
