package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/remotecommand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// What psql needs in an instance pod and of its credentials.
const (
	// serverCAPath is the CA that signed the servers' certificates: the
	// replication Secret's ca.crt, which replicas verify their upstream
	// with. (The server Secret's ca.crt is the CA of client certificates,
	// another CA when spec.tls.caSecret names the user's.)
	serverCAPath = instanceapi.ReplicationTLSDir + "/ca.crt"
	postgresPort = "5432"
	// superuserName is PostgreSQL's superuser.
	superuserName = "postgres"
	// defaultAppName is bootstrap.initdb's default owner and database.
	defaultAppName = "app"
	// passwordKey is the key of a password in every credential Secret.
	passwordKey = corev1.BasicAuthPasswordKey
)

type psqlOptions struct {
	*options
	role     string
	secret   string
	database string
	replica  bool
}

func newPsqlCommand(o *options) *cobra.Command {
	po := &psqlOptions{options: o}
	cmd := &cobra.Command{
		Use:   "psql CLUSTER [-- PSQL ARGS...]",
		Short: "Open psql in a cluster's primary (or a replica) as the application owner, over TLS",
		Long: `Psql runs psql in the postgres container of the cluster's ready primary
(--replica: a ready replica), as kubectl exec does, with a terminal when
yours is one. psql connects through the cluster's -rw Service (--replica: the
-ro Service) with sslmode=verify-full, as an application does.

The role is the application owner (bootstrap.initdb.owner) and the database
its own (bootstrap.initdb.database), unless --role and --database say
otherwise. The password is read from the role's Secret with your own
credentials and handed to psql on its standard input: it is never in a
command line, never printed and never logged.

Arguments after -- go to psql; psql's exit code is the command's.`,
		Example: `  kubectl tusk psql orders
  kubectl tusk psql orders --replica -- -c 'select pg_is_in_recovery()'
  kubectl tusk psql orders --role reporting --secret reporting-login --database sales`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, psqlArgs, err := splitPsqlArgs(args, cmd.ArgsLenAtDash())
			if err != nil {
				return err
			}
			err = po.run(cmd.Context(), name, psqlArgs)
			if _, ok := errors.AsType[*ExitCodeError](err); ok {
				// psql has said what went wrong: only its exit code is
				// left to pass on.
				cmd.SilenceErrors = true
			}
			return err
		},
	}
	cmd.Flags().StringVar(&po.role, "role", "", "the PostgreSQL role to log in as (default: the application owner, bootstrap.initdb.owner)")
	cmd.Flags().StringVar(&po.secret, "secret", "", "the Secret whose key password holds --role's password (needed for roles other than the owner and postgres)")
	cmd.Flags().StringVar(&po.database, "database", "", "the database (default: the application database, bootstrap.initdb.database)")
	cmd.Flags().BoolVar(&po.replica, "replica", false, "run in a ready replica and connect to the read-only Service")
	return cmd
}

// splitPsqlArgs splits the cluster's name from the arguments for psql,
// which follow "--" (dash is cobra's ArgsLenAtDash: -1 without "--").
func splitPsqlArgs(args []string, dash int) (string, []string, error) {
	if dash == -1 {
		dash = len(args)
	}
	if dash != 1 {
		return "", nil, fmt.Errorf("psql takes one cluster name, then psql's own arguments after --, such as: kubectl tusk psql orders -- -c 'select 1'; got %q", args)
	}
	return args[0], args[1:], nil
}

func (po *psqlOptions) run(ctx context.Context, name string, psqlArgs []string) error {
	cl, ns, err := po.client()
	if err != nil {
		return err
	}
	cfg, err := po.configFlags.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("while reading the kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("while connecting to the API server: %w", err)
	}
	c, err := getCluster(ctx, cl, ns, name)
	if err != nil {
		return err
	}
	l, err := chooseLogin(c, po.role, po.secret, po.database)
	if err != nil {
		return err
	}
	pod, err := findPod(ctx, cl, c, po.replica)
	if err != nil {
		return err
	}
	if err := checkCanExec(ctx, cs, pod); err != nil {
		return err
	}
	password, err := readPassword(ctx, cl, ns, l)
	if err != nil {
		return err
	}
	command := psqlCommand(l, psqlHost(c, po.replica), psqlArgs)
	stream := func(ctx context.Context, opts remotecommand.StreamOptions) error {
		return streamInPod(ctx, cfg, cs, pod, opts, command...)
	}
	return sessionError(po.session(ctx, stream, password), pod)
}

// checkCanExec asks the API server whether the user may exec in the pod,
// before the password is read: exec's own refusal is a mere string.
// When the question itself fails, exec says what it says.
func checkCanExec(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) error {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: pod.Namespace, Verb: "create", Resource: "pods", Subresource: "exec", Name: pod.Name,
		},
	}}
	got, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	if err != nil || got.Status.Allowed {
		return nil
	}
	return fmt.Errorf("cannot run psql in pod %s: you may not exec in it (psql needs create on pods/exec in namespace %s)", pod.Name, pod.Namespace)
}

// login is who psql logs in as, where, and the Secret with the password.
type login struct {
	role     string
	database string
	secret   string
}

// chooseLogin picks the role, its password's Secret and the database:
// the application owner by default, with the Secret the instances read its
// password from; the superuser only where it may log in over the network;
// any other role with the Secret the user names.
func chooseLogin(c *tuskv1alpha1.PostgresCluster, role, secret, database string) (login, error) {
	owner, appDB, ownerSecret := defaultAppName, defaultAppName, c.Name+"-app"
	if b := c.Spec.Bootstrap; b != nil && b.InitDB != nil {
		owner, appDB = orDefault(b.InitDB.Owner, owner), orDefault(b.InitDB.Database, appDB)
		if b.InitDB.Secret != nil {
			ownerSecret = b.InitDB.Secret.Name
		}
	}
	l := login{role: orDefault(role, owner), database: orDefault(database, appDB), secret: secret}
	switch {
	case l.role == superuserName && !c.Spec.SuperuserAccess:
		return login{}, fmt.Errorf("the superuser %s may not log in over the network in cluster %s (spec.superuserAccess is false): "+
			"log in as the owner %s (no --role), or set spec.superuserAccess to true, or use the Unix socket in a pod (kubectl exec -it %s -c %s -- psql -U %s)",
			superuserName, c.Name, owner, orDash(c.Status.CurrentPrimary), instanceContainer, superuserName)
	case secret != "":
	case l.role == owner:
		l.secret = ownerSecret
	case l.role == superuserName:
		l.secret = c.Name + "-superuser"
		if c.Spec.SuperuserSecret != nil {
			l.secret = c.Spec.SuperuserSecret.Name
		}
	default:
		return login{}, fmt.Errorf("--role %s needs --secret: the Secret whose key %q holds its password (Tusk keeps the passwords of the owner %s and of %s only)",
			l.role, passwordKey, owner, superuserName)
	}
	return l, nil
}

// orDefault is s, or def when s is empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// findPod returns the pod psql runs in: the ready primary, or with replica
// a ready replica.
func findPod(ctx context.Context, cl client.Client, c *tuskv1alpha1.PostgresCluster, replica bool) (*corev1.Pod, error) {
	var pods corev1.PodList
	err := cl.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels{tuskv1alpha1.LabelCluster: c.Name})
	if apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("cannot list the pods of %s: %w (psql needs list on pods in namespace %s)", c.Name, err, c.Namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("while listing the pods of %s: %w", c.Name, err)
	}
	return choosePod(c, pods.Items, replica)
}

// choosePod picks, among the cluster's pods, the ready one labelled
// primary (the one the -rw Service selects), preferring
// status.currentPrimary; with replica, the first ready one labelled
// replica, by name.
func choosePod(c *tuskv1alpha1.PostgresCluster, pods []corev1.Pod, replica bool) (*corev1.Pod, error) {
	role := instanceapi.RolePrimary
	if replica {
		role = instanceapi.RoleReplica
	}
	var ready []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Labels[instanceapi.LabelRole] == string(role) && podReady(p) {
			ready = append(ready, p)
		}
	}
	if i := slices.IndexFunc(ready, func(p *corev1.Pod) bool { return p.Name == c.Status.CurrentPrimary }); i >= 0 {
		return ready[i], nil
	}
	if len(ready) > 0 {
		return slices.MinFunc(ready, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) }), nil
	}
	if replica {
		return nil, fmt.Errorf("cluster %s has no ready replica (spec.instances %d; kubectl tusk status %s says why); without --replica psql connects to the primary",
			c.Name, c.Spec.Instances, c.Name)
	}
	return nil, fmt.Errorf("cluster %s has no ready primary (status.currentPrimary %s, phase %s); kubectl tusk status %s says why",
		c.Name, orDash(c.Status.CurrentPrimary), orDash(string(c.Status.Phase)), c.Name)
}

// podReady says the pod is ready and not on its way out, with its
// postgres container running: psql can run in it.
func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || !containerRunning(p, instanceContainer) {
		return false
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// psqlHost is the Service psql connects to, as applications do: -rw, or
// -ro for replica. The server certificate names both (and localhost).
// Through the Service rather than localhost, a session that psql
// reconnects after a switchover reaches the new primary.
func psqlHost(c *tuskv1alpha1.PostgresCluster, replica bool) string {
	svc := c.Name + "-rw"
	if replica {
		svc = c.Name + "-ro"
	}
	return svc + "." + c.Namespace + ".svc"
}
