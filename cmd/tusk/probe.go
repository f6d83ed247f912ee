package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/probe"
)

func newProbeCommand() *cobra.Command {
	var (
		o              probe.Options
		rwHost, roHost string
		listen         string
		objective      string
		port           int
		newLogger      func() logr.Logger
	)
	cmd := &cobra.Command{
		Use:   "probe",
		Short: "Write through the -rw Service and read through -ro every few seconds, and export what it saw as metrics (the SLI probe)",
		Long: "Write through the -rw Service and read through -ro every few seconds, each attempt on a new connection\n" +
			"with verified TLS as the role " + instanceapi.ProbeRole + " (a client certificate), and serve the outcomes at /metrics.\n" +
			"The operator runs it in the Deployment <cluster>-probe when spec.monitoring.probe is set.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Log = newLogger().WithName("probe")
			for _, t := range []probe.Target{{Name: probe.TargetWrite, Host: rwHost, Port: port}, {Name: probe.TargetRead, Host: roHost, Port: port}} {
				if t.Host != "" {
					o.Targets = append(o.Targets, t)
				}
			}
			percent, err := strconv.ParseFloat(objective, 64)
			if err != nil {
				return fmt.Errorf("--objective %q is not a percentage: %w", objective, err)
			}
			o.Objective = percent / 100
			if err := o.Validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			reg := probe.Registry(o)
			// A metrics server that cannot serve ends the probe: its
			// attempts would be counted where no one can read them.
			runCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			var serveErr error
			served := make(chan struct{})
			go func() {
				defer close(served)
				serveErr = probe.Serve(runCtx, listen, reg)
				cancel()
			}()
			o.Log.Info("Probing", "rw", rwHost, "ro", roHost, "interval", o.Interval.String(), "objective", objective)
			probe.Run(runCtx, o)
			cancel()
			<-served
			return serveErr
		},
	}
	f := cmd.Flags()
	f.StringVar(&rwHost, "rw-host", "", "the -rw Service's DNS name (empty: no write probe)")
	f.StringVar(&roHost, "ro-host", "", "the -ro Service's DNS name (empty: no read probe)")
	f.IntVar(&port, "port", 5432, "PostgreSQL's port")
	f.StringVar(&o.Database, "database", instanceapi.ProbeDatabase, "the database holding the probe's table")
	f.StringVar(&o.CertDir, "cert-dir", "/etc/tusk/probe-tls", "directory with tls.crt, tls.key (the client certificate) and ca.crt (the servers' CA)")
	f.DurationVar(&o.Interval, "interval", 5*time.Second, "time between two attempts on a target")
	f.DurationVar(&o.Timeout, "timeout", 0, "bound on each attempt, at most the interval (0: the interval)")
	f.StringVar(&objective, "objective", "99.9", "availability objective, in percent")
	f.StringVar(&listen, "listen", ":8000", "address of the metrics server")
	newLogger = logFlags(f)
	cmd.PreRun = func(*cobra.Command, []string) {
		if o.Timeout == 0 {
			o.Timeout = o.Interval
		}
	}
	return cmd
}
