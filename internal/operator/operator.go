// Package operator assembles the Tusk controller manager: the controllers,
// leader election, health, readiness and metrics endpoints.
package operator

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"tusk.dev/tusk/internal/controller"
	"tusk.dev/tusk/internal/scheme"
)

// LeaderElectionID names the Lease the operator replicas compete for.
const LeaderElectionID = "tusk-operator.tusk.dev"

// Options configure the controller manager.
type Options struct {
	// MetricsAddr is where /metrics is served ("0" turns it off).
	MetricsAddr string
	// SecureMetrics serves /metrics over HTTPS and lets only callers that
	// the API server authenticates and authorizes read it.
	SecureMetrics bool
	// ProbeAddr is where /healthz and /readyz are served.
	ProbeAddr string
	// LeaderElect makes only one replica reconcile at a time.
	LeaderElect bool
	// LeaderElectionNamespace holds the leader Lease; the pod's own
	// namespace when empty and running in a cluster.
	LeaderElectionNamespace string
	// GracefulShutdownTimeout bounds how long running reconciles may take to
	// finish after SIGTERM.
	GracefulShutdownTimeout time.Duration
	// MaxConcurrentReconciles is how many objects of one kind are
	// reconciled at once (never the same object twice). A pass may wait
	// seconds on an instance manager that does not answer (a frozen or
	// cut-off pod): with one worker, every other cluster's failover would
	// queue behind it.
	MaxConcurrentReconciles int
	// ReconcileTimeout bounds each pass of every controller (0: none): a
	// backstop beside each call's own deadline to an instance manager, so
	// that a pass over a cluster whose managers all stall frees its worker.
	ReconcileTimeout time.Duration
	// WatchNamespaces limit the operator to the clusters of these
	// namespaces (and what it reads and caches to them); every namespace
	// when empty.
	WatchNamespaces []string
	// Controllers configure the reconcilers.
	Controllers controller.Config
}

// Run starts the controller manager and blocks until ctx is cancelled, then
// shuts down gracefully (releasing the leader Lease so a standby replica
// takes over at once).
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	mgr, err := newManager(ctx, cfg, opts)
	if err != nil {
		return err
	}
	if err := controller.SetupWithManager(mgr, opts.Controllers, opts.WatchNamespaces); err != nil {
		return fmt.Errorf("while registering controllers: %w", err)
	}
	// Every cluster's metrics, read from this operator's cache when
	// scraped; served on controller-runtime's registry, which is global.
	clusters := controller.ClusterCollector{Reader: mgr.GetCache()}
	if err := ctrlmetrics.Registry.Register(clusters); err != nil {
		return fmt.Errorf("while registering the cluster metrics: %w", err)
	}
	defer ctrlmetrics.Registry.Unregister(clusters)
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("while adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("while adding the readiness check: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("Starting the operator", "leaderElection", opts.LeaderElect, "watchNamespaces", opts.WatchNamespaces)
	return mgr.Start(ctx)
}

func newManager(ctx context.Context, cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	metrics := metricsserver.Options{BindAddress: opts.MetricsAddr, SecureServing: opts.SecureMetrics}
	if opts.SecureMetrics {
		// Without a CertDir controller-runtime serves a self-signed
		// certificate; the filter asks the API server who the caller is and
		// whether it may "get /metrics".
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	shutdown := opts.GracefulShutdownTimeout
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        s,
		Cache:                         controller.CacheOptions(opts.WatchNamespaces, opts.Controllers.OperatorNamespace),
		Logger:                        ctrl.LoggerFrom(ctx),
		Metrics:                       metrics,
		HealthProbeBindAddress:        opts.ProbeAddr,
		LeaderElection:                opts.LeaderElect,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &shutdown,
		Controller: config.Controller{MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
			ReconciliationTimeout: opts.ReconcileTimeout},
	})
	if err != nil {
		return nil, fmt.Errorf("while creating the controller manager: %w", err)
	}
	return mgr, nil
}
