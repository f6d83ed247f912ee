package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

type promoteOptions struct {
	*options
	wait    bool
	timeout time.Duration
}

func newPromoteCommand(o *options) *cobra.Command {
	po := &promoteOptions{options: o}
	cmd := &cobra.Command{
		Use:   "promote CLUSTER INSTANCE",
		Short: "Switch the primary over to a ready replica, without losing a committed write",
		Long: `Promote asks the operator for a planned switchover: the primary steps down
cleanly (its standbys receive every WAL record), INSTANCE is promoted once it
has all of it, and the old primary follows the new one as a replica.

Writes pause for a few seconds while the primary changes. The plugin only asks:
it sets the annotation ` + tuskv1alpha1.AnnotationSwitchoverTo + `=INSTANCE on the PostgresCluster
(the status is the operator's alone to write). The operator checks the
request, records the target primary, removes the annotation and does the
work; it refuses a target that cannot take over.`,
		Example: `  kubectl tusk promote orders orders-2
  kubectl tusk promote orders orders-3 --wait=false`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return po.run(cmd.Context(), args[0], args[1])
		},
	}
	cmd.Flags().BoolVar(&po.wait, "wait", true, "wait until the instance is the primary and the cluster is Ready")
	cmd.Flags().DurationVar(&po.timeout, "timeout", 2*time.Minute, "how long --wait waits")
	return cmd
}

func (po *promoteOptions) run(ctx context.Context, name, instance string) error {
	cl, ns, err := po.client()
	if err != nil {
		return err
	}
	key := client.ObjectKey{Namespace: ns, Name: name}
	from, err := requestSwitchover(ctx, cl, key, instance)
	if err != nil {
		return err
	}
	describeSwitchover(po.streams.Out, name, from, instance)
	if !po.wait {
		fmt.Fprintf(po.streams.Out, "Not waiting: follow it with kubectl tusk status %s -n %s\n", name, ns)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, po.timeout)
	defer cancel()
	return waitForSwitchover(ctx, cl, key, instance, po.streams.Out)
}

// requestSwitchover asks the operator for a switchover to instance
// (tuskv1alpha1.AnnotationSwitchoverTo), after checking the cluster can
// switch over to it; the operator checks again, records the target and
// removes the request. The cluster is patched with the resourceVersion it
// was checked at, so a concurrent change fails the patch; it is then read
// and checked again. It returns the primary the switchover starts from.
func requestSwitchover(ctx context.Context, cl client.Client, key client.ObjectKey, instance string) (string, error) {
	var from string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &tuskv1alpha1.PostgresCluster{}
		if err := cl.Get(ctx, key, c); err != nil {
			if client.IgnoreNotFound(err) == nil {
				return fmt.Errorf("PostgresCluster %q not found in namespace %q (kubectl get pgc -n %s lists them)", key.Name, key.Namespace, key.Namespace)
			}
			return fmt.Errorf("while reading PostgresCluster %s: %w", key, err)
		}
		if err := validatePromote(c, instance); err != nil {
			return err
		}
		from = c.Status.CurrentPrimary
		patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[tuskv1alpha1.AnnotationSwitchoverTo] = instance
		return cl.Patch(ctx, c, patch)
	})
	if apierrors.IsForbidden(err) {
		return "", fmt.Errorf("cannot promote %s: %w (promote needs get and patch on postgresclusters, which the edit role grants)", instance, err)
	}
	if err != nil {
		return "", fmt.Errorf("cannot promote %s: %w", instance, err)
	}
	return from, nil
}

// errRefused wraps every reason the plugin gives for not promoting.
var errRefused = errors.New("refused")

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errRefused}, args...)...)
}

// validatePromote says why instance cannot become c's primary by a
// switchover now, or nil when it can. The operator checks again before
// acting; these checks give the user a clear answer at once.
func validatePromote(c *tuskv1alpha1.PostgresCluster, instance string) error {
	st := c.Status
	switch {
	case c.DeletionTimestamp != nil:
		return refuse("cluster %s is being deleted", c.Name)
	case c.Spec.Instances < 2 || len(st.Instances) < 2:
		return refuse("cluster %s has no replica to switch over to (spec.instances %d); scale it to 2 or more instances first", c.Name, c.Spec.Instances)
	case st.CurrentPrimary == "":
		return refuse("cluster %s has no primary yet; wait until it is created", c.Name)
	case st.TargetPrimary != "" && st.TargetPrimary != st.CurrentPrimary:
		return refuse("a switchover from %s to %s is already under way; wait for it to finish (kubectl tusk status %s)", st.CurrentPrimary, st.TargetPrimary, c.Name)
	case c.Annotations[tuskv1alpha1.AnnotationSwitchoverTo] != "":
		return refuse("a switchover to %s was asked for and the operator has not taken it yet; wait for it (kubectl tusk status %s)",
			c.Annotations[tuskv1alpha1.AnnotationSwitchoverTo], c.Name)
	case instance == st.CurrentPrimary:
		return refuse("%s is already the primary of %s", instance, c.Name)
	}
	i := slices.IndexFunc(st.Instances, func(in tuskv1alpha1.InstanceStatus) bool { return in.Name == instance })
	if i < 0 {
		return refuse("%s is not an instance of cluster %s; its instances are %s", instance, c.Name, instanceNames(st.Instances))
	}
	if in := st.Instances[i]; !in.Ready || in.Role != tuskv1alpha1.RoleReplica {
		return refuse("%s is not a ready replica (role %s, ready %t, phase %s%s); promote a ready replica", instance,
			orDash(string(in.Role)), in.Ready, orDash(in.Phase), messageSuffix(in.Message))
	}
	return nil
}

func instanceNames(instances []tuskv1alpha1.InstanceStatus) string {
	names := make([]string, 0, len(instances))
	for _, in := range instances {
		names = append(names, in.Name)
	}
	return strings.Join(names, ", ")
}

func messageSuffix(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + oneLine(msg)
}

// describeSwitchover tells the user what the operator now does.
func describeSwitchover(w io.Writer, cluster, from, to string) {
	fmt.Fprintf(w, `Switching the primary of %[1]s from %[2]s to %[3]s. The operator will:
  1. shut %[2]s down cleanly: its standbys receive every WAL record before it stops, then it restarts as a replica;
  2. point %[1]s-rw at %[3]s at once, and promote it once it has received all of %[2]s's WAL (writes wait, a second or two, until then);
  3. make %[2]s follow %[3]s.
`, cluster, from, to)
}
