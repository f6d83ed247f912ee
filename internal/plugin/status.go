package plugin

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

func newStatusCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status CLUSTER",
		Short: "Show a cluster's instances, roles, LSNs, lag, timelines and conditions",
		Example: `  kubectl tusk status orders
  kubectl tusk status orders -n shop -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			cl, ns, err := o.client()
			if err != nil {
				return err
			}
			c, err := getCluster(cmd.Context(), cl, ns, args[0])
			if err != nil {
				return err
			}
			return printStatus(o.streams.Out, c, output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml (the status as the operator wrote it); a table when unset")
	return cmd
}

func checkOutput(output string) error {
	switch output {
	case "", "json", "yaml":
		return nil
	}
	return fmt.Errorf("unknown output format %q: use json or yaml, or no -o for a table", output)
}

func printStatus(w io.Writer, c *tuskv1alpha1.PostgresCluster, output string) error {
	switch output {
	case "json":
		out, err := json.MarshalIndent(c.Status, "", "  ")
		if err != nil {
			return fmt.Errorf("while writing the status as JSON: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", out)
		return err
	case "yaml":
		out, err := yaml.Marshal(c.Status)
		if err != nil {
			return fmt.Errorf("while writing the status as YAML: %w", err)
		}
		_, err = w.Write(out)
		return err
	}
	return renderStatus(w, c)
}
