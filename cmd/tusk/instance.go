package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	crzap "sigs.k8s.io/controller-runtime/pkg/log/zap"

	"tusk.dev/tusk/internal/instance"
	"tusk.dev/tusk/internal/instance/pgbin"
	"tusk.dev/tusk/internal/instance/pgupgrade"
	"tusk.dev/tusk/internal/instance/supervisor"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/walarchive"
)

func newInstanceCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "instance",
		Short: "The instance manager, PID 1 of every PostgreSQL pod",
	}
	cmd.AddCommand(newInstanceRunCommand(), newBootstrapCopyCommand(), newWALArchiveCommand(), newWALRestoreCommand(),
		newBackupCommand(), newRestoreCommand(), newInstanceStatusCommand(), newCopyBinariesCommand(), newUpgradeCommand())
	return cmd
}

type instanceFlags struct {
	opts        instance.Options
	role        string
	roleFile    string
	kubeconfig  string
	binDir      string
	configFile  string
	archive     archiveFlags
	recovery    recoveryFlags
	clone       instance.CloneOptions
	imp         instance.ImportOptions
	upgrade     instance.UpgradeOptions
	upgradeMode string
}

// storeFlags name an object store location: --<prefix>-endpoint, -bucket,
// -path, -region and the files of its credentials and CA.
type storeFlags struct {
	endpoint, bucket, path, region string
	accessKeyIDFile, secretKeyFile string
	caFile                         string
}

// add adds the flags; of says whose location it is, endpointHelp and
// pathHelp what an empty endpoint and an empty path mean.
func (s *storeFlags) add(fl *pflag.FlagSet, prefix, of, endpointHelp, pathHelp string) {
	fl.StringVar(&s.endpoint, prefix+"-endpoint", "", "S3 endpoint (http[s]://host[:port]) of "+of+"; "+endpointHelp)
	fl.StringVar(&s.bucket, prefix+"-bucket", "", "bucket of "+of)
	fl.StringVar(&s.path, prefix+"-path", "", "path prefix of "+of+" in the bucket "+pathHelp)
	fl.StringVar(&s.region, prefix+"-region", "", "S3 region of "+of+", when the store needs one")
	fl.StringVar(&s.accessKeyIDFile, prefix+"-access-key-id-file", "", "file holding the S3 access key ID of "+of)
	fl.StringVar(&s.secretKeyFile, prefix+"-secret-access-key-file", "", "file holding the S3 secret access key of "+of)
	fl.StringVar(&s.caFile, prefix+"-ca-file", "", "PEM bundle trusted for the certificate of "+of+", besides the system's")
}

func (s *storeFlags) config() objectstore.Config {
	return objectstore.Config{
		Endpoint: s.endpoint, Bucket: s.bucket, Path: s.path, Region: s.region,
		AccessKeyIDFile: s.accessKeyIDFile, SecretAccessKeyFile: s.secretKeyFile, CAFile: s.caFile,
	}
}

// tuskBinary is given, or this executable when empty: the binary postgres
// runs as its archive or restore command (use says which).
func tuskBinary(given, use string) (string, error) {
	if given != "" {
		return given, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("while finding the tusk binary for %s: %w", use, err)
	}
	return self, nil
}

// recoveryFlags make a new primary recover from a backup when a source
// endpoint is given.
type recoveryFlags struct {
	source                            storeFlags
	backup                            string
	targetTime, targetLSN, targetName string
}

func (r *recoveryFlags) add(fl *pflag.FlagSet) {
	r.source.add(fl, "recovery-source", "the recovery source",
		"a new primary recovers from this location instead of running initdb; no recovery when empty", "(required)")
	fl.StringVar(&r.backup, "recovery-backup", instance.LatestBackup, "backup to recover from; "+instance.LatestBackup+
		": the newest that ended before the target")
	fl.StringVar(&r.targetTime, "recovery-target-time", "", "recover up to this time (RFC 3339) and promote")
	fl.StringVar(&r.targetLSN, "recovery-target-lsn", "", "recover up to this LSN (such as 0/3000060) and promote")
	fl.StringVar(&r.targetName, "recovery-target-name", "", "recover up to this restore point and promote")
}

// options returns the recovery options, nil without a source endpoint.
func (r *recoveryFlags) options(cluster, binary string) (*instance.RecoveryOptions, error) {
	if r.source.endpoint == "" {
		return nil, nil
	}
	target, err := parseTarget(r.targetTime, r.targetLSN, r.targetName, "--recovery-target")
	if err != nil {
		return nil, err
	}
	if binary, err = tuskBinary(binary, "restore_command"); err != nil {
		return nil, err
	}
	return &instance.RecoveryOptions{
		Backup: r.backup, Target: target, Binary: binary,
		Source: walarchive.Config{Cluster: cluster, ObjectStore: r.source.config()},
	}, nil
}

// archiveFlags turn continuous WAL archiving on when an endpoint is given.
type archiveFlags struct {
	store   storeFlags
	binary  string
	timeout time.Duration
}

func (a *archiveFlags) add(fl *pflag.FlagSet) {
	a.store.add(fl, "wal-archive", "the WAL archive", "no archiving when empty", "(the cluster's name when empty)")
	fl.StringVar(&a.binary, "wal-archive-binary", "", "tusk binary postgres runs as archive_command (this executable when empty)")
	fl.DurationVar(&a.timeout, "archive-timeout", instance.DefaultArchiveTimeout, "archive_timeout: the longest WAL waits before its segment is switched and archived")
}

// options returns the archiving options, nil without an endpoint.
func (a *archiveFlags) options(cluster string) (*instance.WALArchiveOptions, error) {
	if a.store.endpoint == "" {
		return nil, nil
	}
	binary, err := tuskBinary(a.binary, "archive_command")
	if err != nil {
		return nil, err
	}
	return &instance.WALArchiveOptions{
		Binary:  binary,
		Timeout: a.timeout,
		Config:  walarchive.Config{Cluster: cluster, ObjectStore: a.store.config()},
	}, nil
}

func newInstanceRunCommand() *cobra.Command {
	f := instanceFlags{opts: instance.Options{
		Timeouts:       supervisor.DefaultTimeouts,
		RestartBackoff: instance.DefaultRestartBackoff,
	}}
	var newLogger func(...crzap.Opts) logr.Logger
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Bootstrap the data directory if needed, then run and supervise postgres",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Every record, the manager's and PostgreSQL's, names the
			// cluster, the instance and the current timeline.
			f.opts.LogFields = instance.NewLogFields(f.opts.ClusterName, f.opts.Name)
			// One JSON stream on stdout, PostgreSQL's records and the
			// manager's alike.
			log := newLogger(crzap.WriteTo(os.Stdout), crzap.RawZapOpts(zap.WrapCore(f.opts.LogFields.WrapCore)))
			if err := f.complete(); err != nil {
				return err
			}
			return runInstance(f.opts, log)
		},
	}
	fl := cmd.Flags()
	newLogger = logFlagsWith(fl)
	o := &f.opts
	fl.StringVar(&o.Name, "name", os.Getenv("POD_NAME"), "instance name (the pod's name)")
	fl.StringVar(&o.ClusterName, "cluster", "", "PostgresCluster name")
	fl.StringVar(&o.DataDir, "pgdata", os.Getenv("PGDATA"), "data directory; its parent must be writable")
	fl.StringVar(&f.binDir, "pg-bindir", "", "directory of the PostgreSQL server programs (found on PATH, by pg_config or in /usr/lib/postgresql when empty)")
	fl.IntVar(&o.Port, "port", 5432, "PostgreSQL port")
	fl.StringVar(&o.ListenAddresses, "listen-addresses", "*", "PostgreSQL listen_addresses")
	fl.StringVar(&o.SocketDir, "socket-dir", "/run/tusk/socket", "directory of PostgreSQL's unix socket")
	fl.StringVar(&o.RunDir, "run-dir", "/run/tusk", "private directory for the passfile and the copies of the certificates")
	fl.StringVar(&o.HTTPAddr, "http-addr", fmt.Sprintf(":%d", instanceapi.DefaultStatusPort), "address of /status, probes, metrics and commands")
	fl.StringVar(&f.role, "role", "primary", "role asked for at start: primary or replica")
	fl.StringVar(&f.roleFile, "role-file", "", "downward API file of the pod's labels; its "+instanceapi.LabelRole+" label overrides --role")
	fl.StringVar(&o.Upstream.Host, "upstream-host", "", "primary a replica copies and streams from")
	fl.IntVar(&o.Upstream.Port, "upstream-port", 5432, "port of the upstream")
	fl.BoolVar(&o.UpstreamPrimaryOnly, "upstream-primary-only", false, "stream only from a primary (target_session_attrs=primary, PostgreSQL 14+): for an upstream Service whose endpoints may lag a switchover")
	fl.StringVar(&o.InitDB.Database, "database", "app", "application database a new cluster creates")
	fl.StringVar(&o.InitDB.Owner, "owner", "app", "owner of the application database")
	fl.StringVar(&o.Secrets.Superuser, "superuser-password-file", "", "file holding the postgres superuser's password")
	fl.StringVar(&o.Secrets.Replication, "replication-password-file", "", "file holding the replication role's password")
	fl.StringVar(&o.Secrets.App, "app-password-file", "", "file holding the application owner's password")
	fl.StringVar(&o.TLS.Dir, "tls-dir", "", "directory with the server certificate (tls.crt, tls.key) and the cluster's CA (ca.crt); "+
		"turns on TLS for PostgreSQL and HTTPS with client certificates for the API")
	fl.StringVar(&o.TLS.ReplicationDir, "replication-tls-dir", "", "directory with the replication role's client certificate (tls.crt, tls.key, ca.crt); "+
		"replicas then authenticate with it instead of a password (needs --tls-dir)")
	fl.StringVar(&o.TLS.APIClientCN, "api-client-cn", instanceapi.DefaultAPIClientCN, "common name of the client certificate allowed to read /status and send commands")
	fl.DurationVar(&o.SecretsPollInterval, "secrets-poll-interval", instance.DefaultSecretsPollInterval, "how often the mounted certificate and password files are checked for changes")
	fl.DurationVar(&o.ReloadTimeout, "reload-timeout", instance.DefaultReloadTimeout,
		"how long a configuration change waits for postgres to load it after SIGHUP before it answers with an error")
	fl.StringVar(&f.configFile, "config-file", "", "JSON file with the initial configuration (parameters, synchronousStandbyNames)")
	fl.DurationVar(&o.Timeouts.Smart, "smart-shutdown-timeout", o.Timeouts.Smart, "how long a replica's sessions may finish on shutdown before fast mode (a primary stops fast at once)")
	fl.DurationVar(&o.Timeouts.Fast, "fast-shutdown-timeout", o.Timeouts.Fast, "how long a fast shutdown may take before immediate mode")
	fl.StringVar(&o.Lease.Name, "lease-name", "", "the primary Lease (coordination.k8s.io) a primary holds; none when empty")
	fl.StringVar(&o.Lease.Namespace, "lease-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the primary Lease")
	fl.DurationVar(&o.Lease.Duration, "lease-duration", instance.DefaultLeaseDuration, "how long a renewal holds the primary Lease")
	fl.DurationVar(&o.Lease.RenewEvery, "lease-renew-every", instance.DefaultLeaseRenewEvery, "how often the primary renews its Lease")
	fl.DurationVar(&o.Lease.FenceMargin, "lease-fence-margin", instance.DefaultLeaseFenceMargin,
		"a primary that could not renew stops postgres this long before its Lease could expire")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig for the Lease and the EndpointSlices (the pod's service account when empty)")
	addTerminationFlags(fl, &o.Termination)
	f.archive.add(fl)
	f.recovery.add(fl)
	f.addCloneAndUpgradeFlags(fl)
	return cmd
}

// setStartOptions sets the options of a start that clones or upgrades,
// from their flags.
func (f *instanceFlags) setStartOptions() {
	if f.clone.Source.Host != "" {
		f.opts.Clone = &f.clone
	}
	if f.imp.Host != "" {
		f.opts.Import = &f.imp
	}
	if f.upgrade.OldCopy != "" {
		f.upgrade.Mode = pgupgrade.Mode(f.upgradeMode)
		f.opts.Upgrade = &f.upgrade
	}
}

// addCloneAndUpgradeFlags are the flags of a primary that clones another
// cluster or imports from another server, or upgrades its data directory
// to a newer major.
func (f *instanceFlags) addCloneAndUpgradeFlags(fl *pflag.FlagSet) {
	fl.StringVar(&f.clone.Source.Host, "clone-host", "", "primary of another cluster a new primary copies (pg_basebackup over TLS) instead of running initdb; no cloning when empty")
	fl.IntVar(&f.clone.Source.Port, "clone-port", 5432, "port of the clone source")
	fl.StringVar(&f.clone.TLSDir, "clone-tls-dir", "", "directory with the clone source's replication client certificate (tls.crt, tls.key) and its CA (ca.crt)")
	fl.StringVar(&f.imp.Host, "import-host", "", "PostgreSQL server a new primary imports databases and roles from after initdb (pg_dump, pg_restore); no import when empty")
	fl.IntVar(&f.imp.Port, "import-port", 5432, "port of the import source")
	fl.StringVar(&f.imp.User, "import-user", "", "role the import logs in to the source as")
	fl.StringVar(&f.imp.PasswordFile, "import-password-file", "", "file holding the import user's password")
	fl.StringVar(&f.imp.Database, "import-source-database", "postgres", "source database read for the roles and the databases' owners")
	fl.StringVar(&f.imp.SSLMode, "import-sslmode", "verify-full", "libpq sslmode towards the import source: disable, require, verify-ca or verify-full")
	fl.StringVar(&f.imp.CAFile, "import-ca-file", "", "CA certificate (PEM) the import source's server certificate is verified against")
	fl.StringVar(&f.imp.Method, "import-method", "dump", "dump (a one-time copy) or logical (the schema, then a subscription per database until a cutover)")
	fl.StringVar(&f.imp.Publication, "import-publication", "tusk_import", "the source's publication (in each database) a logical import subscribes to")
	fl.StringArrayVar(&f.imp.Databases, "import-database", nil, "source database to copy into one of the same name (repeat for several)")
	fl.StringVar(&f.upgrade.OldCopy, "upgrade-from", "", "where the old major's server was copied (tusk instance copy-binaries): upgrade an older data directory to this image's major before starting; no upgrade when empty")
	fl.StringVar(&f.upgradeMode, "upgrade-mode", string(pgupgrade.ModeLink), "how the upgrade carries data files: link, copy or clone")
	fl.StringVar(&f.upgrade.Attempt, "upgrade-attempt", "", "the operator's name for this upgrade attempt: a failed attempt is not run again under the same name")
}

// addTerminationFlags adds the flags of what SIGTERM does.
func addTerminationFlags(fl *pflag.FlagSet, t *instance.TerminationOptions) {
	fl.DurationVar(&t.HandoverWait, "handover-wait", 0,
		"on SIGTERM, how long a primary with a streaming standby keeps serving while it waits for the operator to switch over (0: shut down at once)")
	fl.DurationVar(&t.DrainTimeout, "drain-timeout", 0,
		"on SIGTERM, how long to wait for the Services (EndpointSlices) to stop sending connections here, before and after postgres stops (0: no wait)")
	fl.DurationVar(&t.DrainQuiet, "drain-quiet", 2*time.Second,
		"after the EndpointSlices stopped sending connections here, and after the last one refused, how long to wait before exiting")
}

func (f *instanceFlags) complete() error {
	f.opts.Role = instanceapi.Role(f.role)
	archive, err := f.archive.options(f.opts.ClusterName)
	if err != nil {
		return err
	}
	f.opts.WALArchive = archive
	if f.opts.Recovery, err = f.recovery.options(f.opts.ClusterName, f.archive.binary); err != nil {
		return err
	}
	f.setStartOptions()
	if f.opts.Lease.Name != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
		if err != nil {
			return fmt.Errorf("while configuring the API client for the primary Lease: %w", err)
		}
		clients, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		f.opts.Lease.Client = clients.CoordinationV1()
		// Draining reads the EndpointSlices of the Lease's (the pod's)
		// namespace.
		f.opts.Termination.Endpoints = clients.DiscoveryV1()
		f.opts.Termination.Namespace = f.opts.Lease.Namespace
	}
	if f.roleFile != "" {
		role, found, err := instance.RoleFromLabels(f.roleFile)
		if err != nil {
			return err
		}
		if found {
			f.opts.Role = role
		}
	}
	dir, err := pgbin.Finder{Dir: f.binDir}.Find()
	if err != nil {
		return err
	}
	f.opts.BinDir = dir
	if f.opts.MajorVersion, err = pgbin.MajorVersion(dir); err != nil {
		return err
	}
	if f.configFile != "" {
		data, err := os.ReadFile(f.configFile)
		if err != nil {
			return fmt.Errorf("while reading the configuration: %w", err)
		}
		if err := json.Unmarshal(data, &f.opts.Config); err != nil {
			return fmt.Errorf("while parsing the configuration %s: %w", f.configFile, err)
		}
	}
	return nil
}

// runInstance runs the manager until SIGTERM or SIGINT, then stops postgres
// in order and returns. SIGHUP is passed on as a configuration reload, and
// makes the manager check the mounted certificates and passwords at once.
func runInstance(opts instance.Options, log logr.Logger) error {
	m, err := instance.New(opts, log)
	if err != nil {
		return err
	}
	log = log.WithName("manager")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			m.ForwardSignal(syscall.SIGHUP)
			if err := m.CheckSecrets(ctx); err != nil && ctx.Err() == nil {
				log.Error(err, "Checking the mounted Secrets")
			}
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

func newBootstrapCopyCommand() *cobra.Command {
	var dest string
	cmd := &cobra.Command{
		Use:   "bootstrap-copy",
		Short: "Copy this binary into a shared volume, for the PostgreSQL container to run (init container)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return copySelf(dest)
		},
	}
	cmd.Flags().StringVar(&dest, "dest", "/tusk-bin/tusk", "where to put the binary")
	return cmd
}

// copySelf copies the running executable to dest atomically.
func copySelf(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self) //nolint:gosec // our own executable
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil { //nolint:gosec // a shared, read-only-to-others bin dir
		return err
	}
	tmp := dest + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755) //nolint:gosec // an executable
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dest)
}
