package main

import (
	"context"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"tusk.dev/tusk/internal/instance/supervisor"
	"tusk.dev/tusk/internal/pooler"
	"tusk.dev/tusk/internal/poolerapi"
	"tusk.dev/tusk/internal/poolermanager"
)

// newPoolerCommand is `tusk pooler`, PID 1 of every pooler pod: the
// StatefulSet the operator builds passes these flags.
func newPoolerCommand() *cobra.Command {
	var opts poolermanager.Options
	var port int
	var podName string
	cmd := &cobra.Command{
		Use:   "pooler",
		Short: "The pooler manager, PID 1 of every PgBouncer pod",
		Args:  cobra.NoArgs,
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.PgBouncer, "pgbouncer", "/usr/sbin/pgbouncer", "the PgBouncer program")
	fl.StringVar(&opts.Config, "config", "/etc/tusk/pooler/pgbouncer.ini", "PgBouncer's configuration (read-only)")
	fl.StringVar(&opts.RunDir, "run-dir", "/run/tusk-pooler", "the configuration's unix_socket_dir: where PgBouncer's admin console is reached")
	fl.IntVar(&port, "port", poolerapi.DefaultPort, "the pooler API's HTTPS port")
	fl.StringVar(&opts.TLSCert, "tls-cert", "/etc/tusk/pooler-tls/tls.crt", "the pooler API's server certificate")
	fl.StringVar(&opts.TLSKey, "tls-key", "/etc/tusk/pooler-tls/tls.key", "the pooler API's server key")
	fl.StringVar(&opts.ClientCA, "client-ca", "/etc/tusk/pooler-tls/client-ca.crt", "the CA the operator's client certificate is checked against")
	fl.StringVar(&opts.AuthCert, "auth-cert", "/etc/tusk/pooler-auth-tls/tls.crt",
		"the auth role's client certificate PgBouncer presents to PostgreSQL (read for its expiry metric only)")
	hostname, _ := os.Hostname()
	fl.StringVar(&podName, "pod-name", hostname, "the pod's name (a StatefulSet's pod's is its hostname): its ordinal + 1 is PgBouncer's "+
		"peer_id; a name without an ordinal runs PgBouncer without one")
	fl.DurationVar(&opts.ShutdownTimeout, "shutdown-timeout", poolermanager.DefaultShutdownTimeout,
		"on SIGTERM, how long PgBouncer may wait for transactions in flight before it stops at once")
	buildLog := logFlags(fl)
	cmd.RunE = func(*cobra.Command, []string) error {
		opts.Addr = net.JoinHostPort("", strconv.Itoa(port))
		log := buildLog().WithName("pooler")
		if id, err := pooler.PeerIDFromPodName(podName); err == nil {
			opts.PeerID = id
		} else {
			log.Info("Running PgBouncer without a peer_id: cancel requests are not forwarded to the other pods", "reason", err.Error())
		}
		m, err := poolermanager.New(opts, log)
		if err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go func() {
			for range hup {
				m.Reload()
			}
		}()
		if os.Getpid() != 1 {
			// Outside a container, still inherit (and reap) orphans.
			if err := supervisor.BecomeSubreaper(); err != nil {
				log.Error(err, "Becoming a child subreaper")
			}
		}
		return m.Run(ctx)
	}
	return cmd
}
