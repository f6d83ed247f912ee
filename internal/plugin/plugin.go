// Package plugin is kubectl-tusk, the kubectl plugin: it reads and acts on
// PostgresClusters through the Kubernetes API only, as any user would, with
// the user's own kubeconfig and RBAC. It never connects to the instances
// itself: what it runs in their pods (report's /status, psql) goes through
// the API server's pods/exec, as kubectl exec does.
package plugin

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/scheme"
)

// BinaryName is the plugin's executable name: kubectl runs kubectl-tusk
// from PATH for `kubectl tusk`.
const BinaryName = "kubectl-tusk"

// options is what every command needs: where the API server is, who the
// user is, the namespace, and where to write.
type options struct {
	configFlags *genericclioptions.ConfigFlags
	streams     genericiooptions.IOStreams
}

// NewCommand is the plugin's root command, named use ("kubectl-tusk", or
// "plugin" under the tusk binary), with the standard kubeconfig flags
// (--kubeconfig, --context, -n/--namespace, ...).
func NewCommand(use string, streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{configFlags: genericclioptions.NewConfigFlags(true), streams: streams}
	cmd := &cobra.Command{
		Use:          use,
		Short:        "Look after Tusk PostgreSQL clusters from kubectl",
		SilenceUsage: true,
		Annotations:  map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl tusk"},
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	o.configFlags.AddFlags(cmd.PersistentFlags())
	cmd.AddCommand(newStatusCommand(o), newPromoteCommand(o), newFenceCommand(o), newUnfenceCommand(o),
		newBackupCommand(o), newBackupsCommand(o), newReportCommand(o), newPsqlCommand(o),
		newUpgradeCommand(o), newCutoverCommand(o))
	return cmd
}

// client is a client for the user's cluster and the namespace to work in.
func (o *options) client() (client.Client, string, error) {
	ns, _, err := o.configFlags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("while reading the namespace from the kubeconfig: %w", err)
	}
	cfg, err := o.configFlags.ToRESTConfig()
	if err != nil {
		return nil, "", fmt.Errorf("while reading the kubeconfig: %w", err)
	}
	s, err := scheme.New()
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, "", fmt.Errorf("while connecting to the API server: %w", err)
	}
	return c, ns, nil
}

// getCluster reads a PostgresCluster, with an error that says what to do
// when it is not there.
func getCluster(ctx context.Context, c client.Client, ns, name string) (*tuskv1alpha1.PostgresCluster, error) {
	pgc := &tuskv1alpha1.PostgresCluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pgc); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, fmt.Errorf("PostgresCluster %q not found in namespace %q (kubectl get pgc -n %s lists them)", name, ns, ns)
		}
		return nil, fmt.Errorf("while reading PostgresCluster %s/%s: %w", ns, name, err)
	}
	return pgc, nil
}
