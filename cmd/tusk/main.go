// Command tusk is the one Tusk binary: the operator (`tusk operator`) and,
// as Tusk grows, the instance manager inside every PostgreSQL pod.
package main

import (
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "tusk",
		Short:         "Tusk runs PostgreSQL clusters on Kubernetes",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newVersionCommand(), newOperatorCommand(), newInstanceCommand(), newWorkloadCommand())
	return root
}
