package main

import (
	"errors"
	goflag "flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"tusk.dev/tusk/internal/operator"
	"tusk.dev/tusk/internal/version"
)

func newOperatorCommand() *cobra.Command {
	opts := operator.Options{}
	var newLogger func() logr.Logger
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the Tusk operator (the controller manager)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger := newLogger()
			ctrl.SetLogger(logger)
			logger.Info("Starting tusk", "version", version.Get().Version, "commit", version.Get().Commit)
			if opts.Controllers.InstanceManagerImage == "" {
				return errors.New("--instance-manager-image (or TUSK_INSTANCE_MANAGER_IMAGE) is required: the PostgreSQL pods copy the tusk binary from it")
			}
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return err
			}
			ctx := ctrl.LoggerInto(ctrl.SetupSignalHandler(), logger)
			return operator.Run(ctx, cfg, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8443", `address of the metrics endpoint ("0" disables it)`)
	f.BoolVar(&opts.SecureMetrics, "metrics-secure", true, "serve metrics over HTTPS to authenticated, authorized callers only")
	f.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	f.BoolVar(&opts.LeaderElect, "leader-elect", true, "elect a leader so only one operator replica reconciles")
	f.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader Lease (the pod's own when empty)")
	f.StringSliceVar(&opts.WatchNamespaces, "watch-namespaces", nil,
		"reconcile only the clusters of these namespaces (comma-separated; every namespace when empty): the operator then needs rights in these namespaces only")
	f.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", 8,
		"how many objects of one kind are reconciled at once (one object never twice): a cluster whose instances do not answer must not hold up the others")
	f.DurationVar(&opts.ReconcileTimeout, "reconcile-timeout", 10*time.Minute,
		"bound on each pass of a controller (each call to an instance manager has its own, shorter one): a pass that reaches it ends and the object is retried")
	f.DurationVar(&opts.GracefulShutdownTimeout, "graceful-shutdown-timeout", 30*time.Second, "how long running reconciles may take to finish on shutdown")
	f.StringVar(&opts.Controllers.OperatorNamespace, "operator-namespace", os.Getenv("POD_NAMESPACE"),
		"the operator's own namespace (POD_NAMESPACE): the clusters' private keys are kept there, and the clusters' NetworkPolicies admit its operator pods to the instance managers")
	f.StringVar(&opts.Controllers.InstanceManagerImage, "instance-manager-image", os.Getenv("TUSK_INSTANCE_MANAGER_IMAGE"),
		"image with the tusk binary for the PostgreSQL pods' init container (the operator's own image)")
	f.StringVar(&opts.Controllers.PoolerImage, "pooler-image", envOr("TUSK_POOLER_IMAGE", defaultPoolerImage),
		"PgBouncer image the PostgresPoolers' pods run (hack/images.sh builds tusk/pgbouncer:dev)")
	f.Var(objectStorePaths{&opts.Controllers.AnyObjectStorePath}, "object-store-paths",
		`which object-store paths a cluster may archive to and recover from: "namespace" (the default: the cluster's namespace or under it, so tenants sharing a bucket's credentials neither read nor take each other's locations) or "any"`)
	newLogger = logFlags(f)
	// controller-runtime registers --kubeconfig on the standard flag set.
	if kubeconfig := goflag.CommandLine.Lookup("kubeconfig"); kubeconfig != nil {
		f.AddGoFlag(kubeconfig)
	}
	return cmd
}

// defaultPoolerImage is the PgBouncer image `make images` builds and loads.
const defaultPoolerImage = "tusk/pgbouncer:dev"

// envOr is the environment variable name, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// objectStorePaths is the --object-store-paths flag: "namespace" or "any".
type objectStorePaths struct{ anyPath *bool }

func (p objectStorePaths) String() string {
	if p.anyPath != nil && *p.anyPath {
		return "any"
	}
	return "namespace"
}

func (p objectStorePaths) Set(v string) error {
	switch v {
	case "namespace":
		*p.anyPath = false
	case "any":
		*p.anyPath = true
	default:
		return fmt.Errorf("%q is neither namespace nor any", v)
	}
	return nil
}

func (objectStorePaths) Type() string { return "namespace|any" }
