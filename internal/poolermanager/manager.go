// Package poolermanager is `tusk pooler`, PID 1 of every pooler pod: it
// runs PgBouncer as its child (restarting it, within a bound, when it
// dies), serves the pooler API (internal/poolerapi) over HTTPS behind the
// operator's client certificate, pauses and resumes PgBouncer for a
// switchover (each pause bounded twice), exports PgBouncer's pools to
// Prometheus and, on SIGTERM, shuts PgBouncer down without failing a
// transaction in flight.
package poolermanager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"tusk.dev/tusk/internal/instance/supervisor"
	"tusk.dev/tusk/internal/poolerapi"
)

// Options configure the manager; the flags of `tusk pooler` set them.
type Options struct {
	// PgBouncer is the program; Config its pgbouncer.ini (read-only: the
	// ConfigMap). PgBouncer writes nothing beside its configuration (the
	// ini names no pidfile or logfile), so it runs on the mounted file
	// itself, and a RELOAD reads whatever the ConfigMap holds then.
	PgBouncer string
	Config    string
	// RunDir is the ini's unix_socket_dir: the admin console's socket.
	RunDir string
	// PeerID is this PgBouncer's peer_id among the pooler's pods (the
	// [peers] section of Config names them); 0 for none. With one,
	// PgBouncer runs on a file in RunDir that includes Config and sets
	// peer_id (PeerConfigName): Config is every pod's.
	PeerID int
	// Addr is where the API is served (":8000").
	Addr string
	// TLS files: the server certificate and key, and the CA the
	// operator's client certificate is checked against.
	TLSCert, TLSKey, ClientCA string
	// AuthCert is the auth role's client certificate, which PgBouncer
	// presents to PostgreSQL (its ini names it): the manager reads it only
	// for its expiry metric. Optional.
	AuthCert string
	// ShutdownTimeout bounds PgBouncer's safe shutdown on SIGTERM (the
	// transactions in flight it waits for); past it, PgBouncer stops at
	// once. DefaultShutdownTimeout when zero.
	ShutdownTimeout time.Duration
	// Restarts bound PgBouncer's restarts (DefaultRestarts when zero).
	Restarts RestartBound

	// bouncerConfig is the file PgBouncer runs on: Config, or the peer
	// file that includes it.
	bouncerConfig string
}

// DefaultShutdownTimeout fits the pod's 30 s grace after its 5 s preStop
// sleep, leaving the manager time to exit.
const DefaultShutdownTimeout = 20 * time.Second

// Manager runs one pooler pod.
type Manager struct {
	opts    Options
	log     logr.Logger
	port    int // PgBouncer's listen_port, from the ini
	reaper  *supervisor.Reaper
	bouncer *bouncer
	admin   *adminConsole
	pause   *pauser
	metrics *metrics
	// stopping is set on SIGTERM: the pod is not ready from then on.
	stopping atomic.Bool
}

// New checks the options and reads the port PgBouncer listens on.
func New(opts Options, log logr.Logger) (*Manager, error) {
	if opts.PgBouncer == "" || opts.Config == "" || opts.RunDir == "" {
		return nil, errors.New("the PgBouncer program, its configuration and the run directory are required")
	}
	if opts.TLSCert == "" || opts.TLSKey == "" || opts.ClientCA == "" {
		return nil, errors.New("the pooler API is served over HTTPS only: --tls-cert, --tls-key and --client-ca are required")
	}
	port, err := listenPort(opts.Config)
	if err != nil {
		return nil, err
	}
	if opts.PeerID != 0 {
		// The bouncer runs on the peer file; listen_port and the primary
		// check are still read from Config.
		if opts.bouncerConfig, err = writePeerConfig(opts.RunDir, opts.Config, opts.PeerID); err != nil {
			return nil, err
		}
	}
	opts.ShutdownTimeout = cmp.Or(opts.ShutdownTimeout, DefaultShutdownTimeout)
	opts.Restarts = opts.Restarts.orDefault()
	m := &Manager{opts: opts, log: log, port: port, reaper: supervisor.NewReaper(log.WithName("reaper"))}
	m.admin = &adminConsole{dir: opts.RunDir, port: port}
	m.metrics = newMetrics(m)
	m.pause = newPauser(m.admin, m.metrics, log.WithName("pause"))
	m.bouncer = newBouncer(opts, m.reaper, log.WithName("pgbouncer"), m.onPgBouncerStart)
	return m, nil
}

// onPgBouncerStart forgets a pause: a new PgBouncer is not paused.
func (m *Manager) onPgBouncerStart(restarts int) {
	m.pause.forget()
	m.metrics.restarts.Store(int64(restarts))
}

// Run runs PgBouncer and the API until ctx ends (SIGTERM), then shuts
// PgBouncer down safely. It returns an error when PgBouncer cannot be kept
// running or the API cannot be served.
func (m *Manager) Run(ctx context.Context) error {
	stopReaper := make(chan struct{})
	defer close(stopReaper)
	go m.reaper.Run(stopReaper)
	server, err := m.serve()
	if err != nil {
		return err
	}
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdownCtx)
	}()
	supervised := make(chan error, 1)
	go func() { supervised <- m.bouncer.supervise() }()
	select {
	case err := <-supervised:
		m.stopping.Store(true)
		return err
	case <-ctx.Done():
	}
	m.stopping.Store(true)
	m.log.Info("Stopping: the pod is no longer ready; shutting PgBouncer down once its transactions end")
	m.pause.resumeForShutdown(context.Background())
	m.bouncer.shutdown(m.opts.ShutdownTimeout)
	if err := <-supervised; err != nil {
		return err
	}
	m.log.Info("PgBouncer stopped")
	return nil
}

// Reload makes PgBouncer read its configuration again (SIGHUP, as
// RELOAD does): the kubelet updates a mounted ConfigMap in place, and
// `kill -HUP 1` in the pod applies it without dropping a client.
func (m *Manager) Reload() {
	m.log.Info("Reloading PgBouncer's configuration")
	m.bouncer.signal(syscall.SIGHUP)
}

// ready says PgBouncer accepts connections on its port and the pod is not
// stopping.
func (m *Manager) ready(ctx context.Context) (bool, string) {
	if m.stopping.Load() {
		return false, "the pod is stopping"
	}
	if !m.bouncer.running() {
		return false, "PgBouncer is not running"
	}
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("localhost", strconv.Itoa(m.port)))
	if err != nil {
		return false, fmt.Sprintf("PgBouncer does not accept connections on port %d: %v", m.port, err)
	}
	_ = conn.Close()
	return true, ""
}

// Status is what GET /status returns.
func (m *Manager) Status(ctx context.Context) poolerapi.Status {
	ready, _ := m.ready(ctx)
	st := poolerapi.Status{Ready: ready}
	st.Paused, st.PausedSince = m.pause.state()
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	version, err := m.admin.version(ctx)
	if err == nil {
		st.Version = version
		st.Pools, err = m.admin.pools(ctx)
	}
	if err != nil {
		st.Error = "PgBouncer's admin console: " + err.Error()
	}
	return st
}
