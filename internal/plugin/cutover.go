package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

type cutoverOptions struct {
	*options
	wait    bool
	timeout time.Duration
}

func newCutoverCommand(o *options) *cobra.Command {
	co := &cutoverOptions{options: o}
	cmd := &cobra.Command{
		Use:   "cutover CLUSTER",
		Short: "Move the writes of a logical import's source over to CLUSTER",
		Long: `Cutover asks for the end of CLUSTER's logical import (the ` + tuskv1alpha1.AnnotationImportCutover + `
annotation): the source's databases become read-only and their sessions
end, the last changes are applied, the sequences copied, and the
subscriptions dropped. When the source is a Tusk cluster
(bootstrap.initdb.import.source.cluster), its Services then send its
clients to CLUSTER. After a failed cutover, running it again tries again.`,
		Example: `  kubectl tusk cutover orders-18
  kubectl tusk cutover orders-18 --wait=false`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return co.run(cmd.Context(), args[0])
		},
	}
	cmd.Flags().BoolVar(&co.wait, "wait", true, "wait until the cutover is done, and print its write gap")
	cmd.Flags().DurationVar(&co.timeout, "timeout", 5*time.Minute, "how long --wait waits")
	return cmd
}

func (co *cutoverOptions) run(ctx context.Context, name string) error {
	cl, ns, err := co.client()
	if err != nil {
		return err
	}
	key := client.ObjectKey{Namespace: ns, Name: name}
	c := &tuskv1alpha1.PostgresCluster{}
	if err := cl.Get(ctx, key, c); err != nil {
		return fmt.Errorf("while reading the cluster %s: %w", name, err)
	}
	if err := cutoverAllowed(c); err != nil {
		return err
	}
	value := time.Now().UTC().Format(time.RFC3339Nano) // a new value each time: a new value tries again
	if err := setAnnotation(ctx, cl, key, tuskv1alpha1.AnnotationImportCutover, value); err != nil {
		return err
	}
	fmt.Fprintf(co.streams.Out, "Asked for the cutover of %s (%s=%s).\n", name, tuskv1alpha1.AnnotationImportCutover, value)
	if !co.wait {
		fmt.Fprintf(co.streams.Out, "Follow it with kubectl tusk status %s -n %s\n", name, ns)
		return nil
	}
	return co.waitForCutover(ctx, cl, key, value)
}

// cutoverAllowed refuses what has no cutover to start.
func cutoverAllowed(c *tuskv1alpha1.PostgresCluster) error {
	b := c.Spec.Bootstrap
	if b == nil || b.InitDB == nil || b.InitDB.Import == nil || b.InitDB.Import.Method != "logical" {
		return fmt.Errorf("%s has no logical import (bootstrap.initdb.import.method: logical) to cut over", c.Name)
	}
	imp := c.Status.Import
	switch {
	case imp == nil:
		return fmt.Errorf("%s's import does not follow its source yet (kubectl tusk status %s): cut over once it is Replicating", c.Name, c.Name)
	case imp.Phase == tuskv1alpha1.ImportCutOver:
		return fmt.Errorf("%s's import is already cut over", c.Name)
	case imp.Phase == tuskv1alpha1.ImportCuttingOver:
		return fmt.Errorf("%s's cutover is under way (kubectl tusk status %s)", c.Name, c.Name)
	}
	return nil
}

// waitForCutover polls the cluster until the cutover named value ends.
func (co *cutoverOptions) waitForCutover(ctx context.Context, cl client.Client, key client.ObjectKey, value string) error {
	ctx, cancel := context.WithTimeout(ctx, co.timeout)
	defer cancel()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		c := &tuskv1alpha1.PostgresCluster{}
		if err := cl.Get(ctx, key, c); err == nil && c.Status.Import != nil && c.Status.Import.Cutover == value {
			switch imp := c.Status.Import; imp.Phase {
			case tuskv1alpha1.ImportCutOver:
				gap := "unknown"
				if imp.WriteGap != nil {
					gap = imp.WriteGap.Duration.String()
				}
				fmt.Fprintf(co.streams.Out, "Cut over: %s (the source took no write for %s).\n", imp.Message, gap)
				return co.retireImportRole(ctx, cl, key)
			case tuskv1alpha1.ImportCutoverFailed:
				return fmt.Errorf("the cutover of %s failed, and the source takes writes again: %s", key.Name, imp.Message)
			}
		}
		select {
		case <-ctx.Done():
			return errors.New("gave up waiting for the cutover after " + co.timeout.String() + "; it goes on: kubectl tusk status " + key.Name)
		case <-ticker.C:
		}
	}
}

// retireImportRole takes away, once a logical upgrade's cutover is done,
// what kubectl tusk upgrade --logical made on the old cluster for the
// import: its role (replication, pg_read_all_data, pg_signal_backend, a
// member of the databases' owners) is set ensure: absent, which the old
// cluster's primary drops, and its publications are deleted, which drops
// them. An import that kubectl tusk upgrade did not make (no PostgresRole
// <CLUSTER>-import of that role) is left alone.
func (co *cutoverOptions) retireImportRole(ctx context.Context, cl client.Client, key client.ObjectKey) error {
	role := &tuskv1alpha1.PostgresRole{}
	err := cl.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name + "-import"}, role)
	if apierrors.IsNotFound(err) || (err == nil && role.Spec.Name != importRole) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cut over, but the import's role could not be read to retire it: %w", err)
	}
	if role.Spec.Ensure != tuskv1alpha1.EnsureAbsent {
		patch := client.MergeFrom(role.DeepCopy())
		role.Spec.Ensure = tuskv1alpha1.EnsureAbsent
		if err := cl.Patch(ctx, role, patch); err != nil {
			return fmt.Errorf("cut over, but the import's role %s could not be retired (set its ensure to absent): %w", role.Name, err)
		}
	}
	var pubs tuskv1alpha1.PostgresPublicationList
	if err := cl.List(ctx, &pubs, client.InNamespace(key.Namespace)); err != nil {
		return fmt.Errorf("cut over, but the import's publications could not be listed: %w", err)
	}
	var deleted []string
	for i := range pubs.Items {
		p := &pubs.Items[i]
		if strings.HasPrefix(p.Name, role.Name+"-") && p.Spec.Name == "tusk_import" && p.Spec.Cluster.Name == role.Spec.Cluster.Name {
			if err := cl.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("cut over, but the import's publication %s could not be deleted: %w", p.Name, err)
			}
			deleted = append(deleted, p.Name)
		}
	}
	_, err = fmt.Fprintf(co.streams.Out, "Retired the import's role %s on %s (PostgresRole %s: ensure absent) and deleted its publications %v; "+
		"delete the PostgresRole and the Secret %s once the role reports dropped.\n", importRole, role.Spec.Cluster.Name, role.Name, deleted, role.Name)
	return err
}
