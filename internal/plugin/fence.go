package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

func newFenceCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "fence CLUSTER INSTANCE",
		Short: "Stop an instance's postgres and keep it stopped, keeping the pod for inspection",
		Long: `Fence adds INSTANCE to the cluster's ` + tuskv1alpha1.AnnotationFencedInstances + ` annotation;
the operator then stops its postgres (fast shutdown: open sessions end) and
keeps it stopped, with the pod and its data left for inspection. "*" fences
every instance.

A fenced primary is not failed over: writes stop until it is unfenced. A
fenced replica leaves the read Services.`,
		Example: `  kubectl tusk fence orders orders-2
  kubectl tusk fence orders '*'`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.editFenced(cmd, args[0], args[1], true)
		},
	}
}

func newUnfenceCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "unfence CLUSTER INSTANCE",
		Short: "Start a fenced instance's postgres again",
		Long: `Unfence removes INSTANCE (or "*") from the cluster's ` + tuskv1alpha1.AnnotationFencedInstances + `
annotation; the operator then starts its postgres again.`,
		Example: `  kubectl tusk unfence orders orders-2`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.editFenced(cmd, args[0], args[1], false)
		},
	}
}

func (o *options) editFenced(cmd *cobra.Command, name, instance string, fence bool) error {
	cl, ns, err := o.client()
	if err != nil {
		return err
	}
	key := client.ObjectKey{Namespace: ns, Name: name}
	if err := setFenced(cmd.Context(), cl, key, instance, fence); err != nil {
		return err
	}
	verb := "unfence"
	if fence {
		verb = "fence"
	}
	fmt.Fprintf(o.streams.Out, "Asked the operator to %s %s of %s; follow it with kubectl tusk status %s -n %s\n", verb, instance, name, name, ns)
	return nil
}

// setFenced adds instance to, or removes it from, the cluster's list of
// fenced instances. The update carries the resourceVersion it was read
// at, so two edits at once cannot drop one another.
func setFenced(ctx context.Context, cl client.Client, key client.ObjectKey, instance string, fence bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &tuskv1alpha1.PostgresCluster{}
		if err := cl.Get(ctx, key, c); err != nil {
			return fmt.Errorf("while reading the cluster %s: %w", key.Name, err)
		}
		if instance != tuskv1alpha1.FenceAll && !slices.ContainsFunc(c.Status.Instances, func(i tuskv1alpha1.InstanceStatus) bool { return i.Name == instance }) {
			return fmt.Errorf("%s is not an instance of %s (see kubectl tusk status %s)", instance, key.Name, key.Name)
		}
		var names []string
		if raw := c.Annotations[tuskv1alpha1.AnnotationFencedInstances]; raw != "" {
			if err := json.Unmarshal([]byte(raw), &names); err != nil {
				return fmt.Errorf("the annotation %s of %s is not a JSON array (%w); fix it with kubectl annotate", tuskv1alpha1.AnnotationFencedInstances, key.Name, err)
			}
		}
		names = slices.DeleteFunc(names, func(n string) bool { return n == instance })
		if fence {
			names = append(names, instance)
		}
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		if len(names) == 0 {
			delete(c.Annotations, tuskv1alpha1.AnnotationFencedInstances)
		} else {
			data, err := json.Marshal(names)
			if err != nil {
				return err
			}
			c.Annotations[tuskv1alpha1.AnnotationFencedInstances] = string(data)
		}
		return cl.Update(ctx, c)
	})
}
