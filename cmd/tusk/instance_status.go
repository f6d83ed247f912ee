package main

import (
	"github.com/spf13/cobra"

	"tusk.dev/tusk/internal/instance"
)

// newInstanceStatusCommand prints the status of the instance manager of
// this pod, asked over its local socket: what `kubectl tusk report` runs
// in each instance's pod.
func newInstanceStatusCommand() *cobra.Command {
	var runDir string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the /status of the instance manager of this pod (JSON), asked over its local socket",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return instance.ReadLocalStatus(cmd.Context(), runDir, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&runDir, "run-dir", "/run/tusk", "the instance manager's run directory (tusk instance run --run-dir)")
	return cmd
}
