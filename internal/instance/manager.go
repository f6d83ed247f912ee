// Package instance is the instance manager: PID 1 of every PostgreSQL pod.
// It creates the data directory, renders the configuration, supervises
// postgres, changes its role on the operator's word and reports its state.
// It never decides who is primary; the operator does.
package instance

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"tusk.dev/tusk/internal/instance/lifecycle"
	"tusk.dev/tusk/internal/instance/pgconf"
	"tusk.dev/tusk/internal/instance/supervisor"
	"tusk.dev/tusk/internal/instanceapi"
)

// Options configure one instance.
type Options struct {
	// Name is the instance's name (its pod's name); replicas use it as
	// application_name, which synchronous_standby_names refers to.
	Name string
	// ClusterName is the PostgresCluster's name.
	ClusterName string
	// DataDir is PGDATA. Its parent must be writable: bootstrap builds the
	// data directory next to it and renames it into place when complete.
	DataDir string
	// BinDir holds the PostgreSQL server programs.
	BinDir string
	// MajorVersion is the major version of those programs.
	MajorVersion int
	// Port is PostgreSQL's port.
	Port int
	// ListenAddresses is PostgreSQL's listen_addresses.
	ListenAddresses string
	// SocketDir is where PostgreSQL puts its unix socket; the manager
	// connects through it.
	SocketDir string
	// RunDir is a private directory for files with secrets (the passfile).
	RunDir string
	// HTTPAddr is where /status, /healthz, /readyz, /metrics and the
	// operator's commands are served.
	HTTPAddr string
	// HTTPLimits bound what clients of HTTPAddr may hold; the defaults
	// when zero.
	HTTPLimits HTTPLimits
	// Role is the role the operator asks for at start.
	Role instanceapi.Role
	// Upstream is the primary a replica streams from.
	Upstream instanceapi.Upstream
	// UpstreamPrimaryOnly makes a replica refuse to stream from anything
	// but a primary. The upstream is then a Service (<cluster>-rw) whose
	// endpoints lag behind a switchover: without this a stepped-down
	// primary could connect to itself, a standby now, and stream nothing
	// forever on its old timeline.
	UpstreamPrimaryOnly bool
	// InitDB says what a new primary creates.
	InitDB InitDBOptions
	// Secrets name the files with the passwords.
	Secrets SecretFiles
	// TLS names the mounted certificates; without them PostgreSQL and the
	// HTTP API use no TLS.
	TLS TLSOptions
	// SecretsPollInterval is how often the mounted certificate and password
	// files are checked for changes; 0 means DefaultSecretsPollInterval.
	SecretsPollInterval time.Duration
	// ReloadTimeout bounds how long a reload waits for postgres to load
	// its configuration after SIGHUP; 0 means DefaultReloadTimeout.
	ReloadTimeout time.Duration
	// Config is the initial PostgreSQL configuration.
	Config instanceapi.Config
	// Timeouts bound each shutdown mode.
	Timeouts supervisor.Timeouts
	// Termination says what SIGTERM does: hand a primary's role over,
	// leave the Services, drain.
	Termination TerminationOptions
	// Lease is the primary's Lease; none when its Client is nil.
	Lease LeaseOptions
	// RestartBackoff bounds the wait before restarting a crashed postgres.
	RestartBackoff Backoff
	// WALArchive turns continuous WAL archiving on; nil leaves
	// archive_mode off.
	WALArchive *WALArchiveOptions
	// Recovery makes a new primary restore a backup of another location
	// instead of running initdb; nil for initdb. Replicas and existing
	// data directories ignore it.
	Recovery *RecoveryOptions
	// Clone makes a new primary copy another cluster instead of running
	// initdb; nil otherwise. Replicas and existing data directories
	// ignore it.
	Clone *CloneOptions
	// Import makes a new primary copy databases and roles from another
	// PostgreSQL server after initdb; nil otherwise. Replicas and
	// existing data directories ignore it.
	Import *ImportOptions
	// Upgrade, when set, upgrades an older major's data directory to the
	// image's before postgres starts (a major upgrade's primary).
	Upgrade *UpgradeOptions
	// LogFields, when the logger adds them (LogFields.WrapCore), learn
	// the current timeline from the manager; nil otherwise.
	LogFields *LogFields
}

// InitDBOptions describe the database a new cluster starts with.
type InitDBOptions struct {
	// Database is the application database.
	Database string
	// Owner is the role owning it.
	Owner string
}

// SecretFiles are mounted Secret keys holding passwords.
type SecretFiles struct {
	Superuser   string
	Replication string
	App         string
}

// DefaultSecretsPollInterval is how often mounted Secrets are checked. The
// kubelet itself takes up to a minute or so to update them.
const DefaultSecretsPollInterval = 15 * time.Second

// DefaultReloadTimeout is how long a reload waits for postgres to load
// its configuration: a postgres that takes no SIGHUP (an image that
// ignores it, a hung postmaster) must not hold the manager's operations,
// and the operator's call, forever. PostgreSQL loads it within
// milliseconds.
const DefaultReloadTimeout = 20 * time.Second

// Backoff is an exponential backoff between Min and Max.
type Backoff struct {
	Min, Max time.Duration
}

// DefaultRestartBackoff restarts a crashed postgres almost at once: by the
// time the manager sees the postmaster's exit its children have exited
// too (they hold its output open), so nothing stands in the way of a new
// one, and every second waited is a second without writes. The wait
// doubles while postgres keeps crashing, and starts over once a run lasts
// (crashLoopStableRun).
var DefaultRestartBackoff = Backoff{Min: 100 * time.Millisecond, Max: 30 * time.Second}

// next doubles d within the bounds.
func (b Backoff) next(d time.Duration) time.Duration {
	if d < b.Min {
		return b.Min
	}
	if d*2 > b.Max {
		return b.Max
	}
	return d * 2
}

// Manager runs one PostgreSQL instance.
type Manager struct {
	opts Options
	// cutoverRunning says a logical import's cutover runs.
	cutoverRunning atomic.Bool
	// postUpgradeSQL is what pg_upgrade left to run once the upgraded
	// server is up (extension updates); guarded by mu.
	postUpgradeSQL string
	log            logr.Logger // logger "manager"
	// pgLog is the logger PostgreSQL's own records go to (as "postgres").
	pgLog logr.Logger
	// logPipes carry PostgreSQL's jsonlog (15 and later); nil while not
	// open, or before 15: postgres's stderr carries its log then.
	logPipes *supervisor.LogPipes
	reaper   *supervisor.Reaper
	lease    *leaseKeeper // nil without a Lease
	ops      chan operation
	stopped  chan struct{} // closed when Run is returning
	metrics  *metrics
	// observer answers readiness and metrics (ObservedStatus).
	observer observer
	// statusSession (status, readiness) and metricsSession are the
	// sessions the manager observes postgres through; monitorLogin says
	// which OS user may log in as their role (nil: none can, the manager
	// observes as the superuser).
	statusSession  monitorSession
	metricsSession monitorSession
	monitorLogin   *pgconf.MonitorLogin
	sizer          dirSizer

	// serverCerts and replicationCerts are nil without TLS; the run loop
	// alone syncs them. https is the HTTP API's current TLS configuration.
	serverCerts      *certFiles
	replicationCerts *certFiles
	// cloneCerts is the clone source's replication client certificate;
	// nil unless cloning.
	cloneCerts *certFiles
	https      atomic.Pointer[tls.Config]

	secretsMu sync.Mutex // guards secrets, which HTTP handlers use to connect
	secrets   secrets

	// leaseLeftUntil: a primary fenced because postgres did not answer
	// (leaseLeftFor) does not try to take its Lease again before then. The
	// run loop alone uses them.
	leaseLeftUntil time.Time
	leaseLeftFor   error
	// unprepared: fenced by hand since before this start, the data
	// directory was left as it was; Unfence prepares it.
	unprepared bool
	// primaryRightsGranted: this primary gave the replication and
	// monitoring roles their rights (ensurePrimaryRights); the run loop
	// alone uses it.
	primaryRightsGranted bool
	// crashes counts the short runs of postgres; the run loop alone uses
	// it (state.crashStreak shows it).
	crashes crashLoop

	backups     backups     // the base backups taken since the manager started
	walSwitches walSwitches // the last WAL switch asked for, for throttling
	walWatcher  *walWatcher // archives WAL ahead; nil when not archiving

	mu       sync.Mutex // guards what the HTTP handlers read
	state    state
	postgres *supervisor.Postmaster
	// health is the primary's health query session (checkAnswers).
	health healthSession
}

// state is what the manager knows about itself, for /status.
type state struct {
	// life is the phase and why postgres is kept stopped (fences, a
	// pending rejoin, termination); only applyLocked changes it.
	life     lifecycle.State
	role     instanceapi.Role // the role asked for
	upstream instanceapi.Upstream
	config   instanceapi.Config
	restarts int
	// crashStreak counts the unexpected exits in a row, each within
	// crashLoopStableRun of the start before it (crashLoop.streak).
	crashStreak int
	// startedAt is when the running (or last) postmaster was started.
	startedAt time.Time
	lastError string
	// lastPasswordRotation is when a changed password file was applied.
	lastPasswordRotation time.Time
	// recovery is the progress of a recovery bootstrap (replaced, never
	// changed in place); nil otherwise.
	recovery *instanceapi.RecoveryStatus
	// dataDir is what pg_control said of an existing data directory at
	// start (recordDataDirState); nil for one the manager created.
	dataDir *instanceapi.DataDirState
	// stoppedForRejoin is what pg_control said of a former primary's data
	// directory when a rejoin first found it stopped (noteStoppedForRejoin);
	// nil once it follows a primary.
	stoppedForRejoin *instanceapi.DataDirState
	// upgrade is the major upgrade this start ran or runs; nil for none.
	upgrade *instanceapi.UpgradeStatus
	// logicalImport is a logical import's state; nil without one.
	logicalImport *instanceapi.ImportStatus
}

// operation is work that must not overlap with supervision: role changes,
// restarts, configuration. The run loop executes them one at a time.
type operation struct {
	name   string
	fn     func(ctx context.Context) (any, error)
	result chan operationResult
}

type operationResult struct {
	value any
	err   error
}

// New returns a manager for opts; Run starts it.
func New(opts Options, log logr.Logger) (*Manager, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s, err := readSecrets(opts.Secrets)
	if err != nil {
		return nil, err
	}
	pgLog := log
	log = log.WithName("manager")
	m := &Manager{
		opts:    opts,
		log:     log,
		pgLog:   pgLog,
		reaper:  supervisor.NewReaper(log),
		secrets: s,
		ops:     make(chan operation),
		stopped: make(chan struct{}),
		state:   state{role: opts.Role, upstream: opts.Upstream, config: opts.Config},

		statusSession:  monitorSession{purpose: "status"},
		metricsSession: monitorSession{purpose: "metrics"},
	}
	if opts.TLS.Dir != "" {
		m.serverCerts = &certFiles{what: "server certificate", src: opts.TLS.Dir, dst: filepath.Join(opts.RunDir, "tls")}
	}
	if opts.TLS.ReplicationDir != "" {
		m.replicationCerts = &certFiles{what: "replication client certificate", src: opts.TLS.ReplicationDir, dst: filepath.Join(opts.RunDir, "replication-tls")}
	}
	m.cloneCerts = cloneCertsFor(opts)
	if opts.Lease.enabled() {
		m.lease = newLeaseKeeper(opts.Lease, opts.Name, log.WithName("lease"))
	}
	if m.monitorLogin, err = monitorLogin(); err != nil {
		log.Info("The monitoring role cannot log in: the manager observes postgres as the superuser", "reason", err.Error())
	}
	m.walWatcher = m.newWALWatcher()
	m.metrics = newMetrics(m)
	return m, nil
}

func (o Options) validate() error {
	var errs []error
	if o.Name == "" {
		errs = append(errs, errors.New("the instance needs a name"))
	}
	if o.DataDir == "" || o.SocketDir == "" || o.RunDir == "" {
		errs = append(errs, errors.New("the data, socket and run directories are required"))
	}
	if o.Port < 1 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d is not a TCP port", o.Port))
	}
	if o.Role != instanceapi.RolePrimary && o.Role != instanceapi.RoleReplica {
		errs = append(errs, fmt.Errorf("role %q is neither primary nor replica", o.Role))
	}
	if o.Role == instanceapi.RoleReplica && o.Upstream.Host == "" {
		errs = append(errs, errors.New("a replica needs an upstream host"))
	}
	if err := o.Lease.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.WALArchive.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Recovery.validate(o.WALArchive); err != nil {
		errs = append(errs, err)
	}
	if err := o.Clone.validate(o.Recovery); err != nil {
		errs = append(errs, err)
	}
	if err := o.Import.validate(o.Recovery, o.Clone); err != nil {
		errs = append(errs, err)
	}
	if o.TLS.ReplicationDir != "" && o.TLS.Dir == "" {
		errs = append(errs, errors.New("replication with a client certificate needs the server certificate (--tls-dir) too"))
	}
	return errors.Join(errs...)
}

// Run bootstraps the data directory if needed, then supervises postgres
// until ctx is cancelled, when it stops postgres and returns.
func (m *Manager) Run(ctx context.Context) error {
	stopReaper := make(chan struct{})
	defer close(stopReaper)
	go m.reaper.Run(stopReaper)
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	go m.runWALWatcher(watchCtx)

	// The HTTP API needs the server certificate before it can serve.
	if _, err := m.syncCertificates(); err != nil {
		return err
	}
	server, err := m.startHTTP()
	if err != nil {
		return err
	}
	defer shutdownHTTP(server, m.log)
	if local := m.serveLocalStatus(); local != nil {
		defer shutdownHTTP(local, m.log)
	}
	m.openLogPipes()
	defer m.closeLogPipes() // after postgres stopped
	defer close(m.stopped)  // before the HTTP server stops: waiting handlers give up

	if err := m.prepare(ctx); errors.Is(err, errUpgradeFailed) {
		// Postgres stays stopped; the status says why until the operator
		// replaces the pod with the old major's image.
		<-ctx.Done()
		return nil
	} else if err != nil {
		m.setError(err)
		return err
	}
	m.startLogicalImport(ctx)
	return m.supervise(ctx)
}

// prepare makes the data directory exist and match the role asked for.
func (m *Manager) prepare(ctx context.Context) error {
	m.record(lifecycle.Bootstrapping)
	// In a pod these live on emptyDir volumes that start empty.
	for _, dir := range []string{m.opts.RunDir, m.opts.SocketDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("while creating %s: %w", dir, err)
		}
	}
	if m.fencedByHandAtStart(ctx) {
		return nil
	}
	if err := m.resolveUpgrade(ctx); err != nil {
		return err
	}
	return m.prepareDataDir(ctx)
}

// prepareDataDir bootstraps the data directory, or aligns an existing one
// with the role asked for.
func (m *Manager) prepareDataDir(ctx context.Context) error {
	m.record(lifecycle.Bootstrapping)
	if !isDataDir(m.opts.DataDir) {
		m.mu.Lock()
		m.state.dataDir = &instanceapi.DataDirState{Empty: true}
		m.mu.Unlock()
	}
	fresh, err := m.bootstrapWithRetries(ctx)
	if err != nil {
		return err
	}
	if fresh {
		return nil
	}
	m.recordDataDirState(ctx)
	return m.alignExistingDataDir(ctx)
}

// recordDataDirState keeps what pg_control says of the existing data
// directory before anything (a rewind, a promotion) changes it, for
// /status. A failure is logged only: the state informs a choice the
// operator then waits with, it is not needed to run.
func (m *Manager) recordDataDirState(ctx context.Context) {
	cd, err := m.readControlData(ctx, m.opts.DataDir)
	if err != nil {
		m.log.Error(err, "Reading pg_control of the existing data directory")
		return
	}
	st := m.dataDirState(cd)
	m.opts.LogFields.SetTimeline(cd.timeline)
	m.log.Info("The existing data directory", "state", st.State, "standby", st.Standby, "timeline", st.Timeline,
		"checkpoint", st.CheckpointLSN, "minRecovery", st.MinRecoveryLSN)
	m.mu.Lock()
	m.state.dataDir = st
	m.mu.Unlock()
}

// dataDirState is cd, read from this instance's data directory, for
// /status.
func (m *Manager) dataDirState(cd controlData) *instanceapi.DataDirState {
	return &instanceapi.DataDirState{SystemIdentifier: cd.systemID, State: cd.state, Standby: isStandbyDataDir(m.opts.DataDir),
		Timeline: cd.timeline, CheckpointLSN: cd.checkpoint, MinRecoveryLSN: cd.minRecovery}
}

// supervise keeps postgres running, restarting it after unexpected exits,
// and runs operations in between. When ctx is cancelled (SIGTERM) it
// terminates the instance (terminate), after a handover when one may come:
// the work that takes runs on, under a context of its own.
func (m *Manager) supervise(ctx context.Context) error {
	s := &supervision{stop: ctx.Done()}
	defer s.stopHandoverChecks()
	ctx = context.WithoutCancel(ctx)
	poll := time.NewTicker(cmp.Or(m.opts.SecretsPollInterval, DefaultSecretsPollInterval))
	defer poll.Stop()
	leaseTick, stopLeaseTick := m.startLeaseTicker()
	defer stopLeaseTick()
	m.startSupervision(ctx, s)
	for {
		select {
		case <-s.stop:
			if m.askedToStop(ctx, s) {
				return m.terminate(ctx)
			}
		case <-s.handoverCheck:
			if !m.handoverStillPossible(ctx) {
				return m.terminate(ctx)
			}
		case <-s.handoverDeadline:
			m.log.Info("No handover came; shutting down as the primary", "waited", m.opts.Termination.HandoverWait.String())
			return m.terminate(ctx)
		case <-m.exited():
			if m.afterExit(ctx, s) {
				return m.terminate(ctx)
			}
		case <-s.restartAt:
			m.restartWhenDue(ctx, s)
		case <-leaseTick:
			m.keepLease(ctx)
		case <-poll.C:
			if err := m.checkSecrets(ctx); err != nil {
				m.log.Error(err, "Checking the mounted Secrets")
			}
		case op := <-m.ops:
			if m.runOperation(ctx, op, s) {
				return m.terminate(ctx)
			}
		}
	}
}

// supervision is the run loop's own state.
type supervision struct {
	// stop is closed on SIGTERM; nil once seen.
	stop <-chan struct{}
	// backoff is the last wait before a restart.
	backoff time.Duration
	// restartAt fires when postgres is to be started again.
	restartAt <-chan time.Time
	// handoverDeadline fires when a terminating primary has waited long
	// enough for a handover; handoverCheck when it is to check that a
	// handover may still come.
	handoverDeadline <-chan time.Time
	handoverCheck    <-chan time.Time
	handoverTicker   *time.Ticker
}

func (s *supervision) startHandoverChecks(wait time.Duration) {
	s.handoverDeadline = time.After(wait)
	s.handoverTicker = time.NewTicker(handoverCheckEvery)
	s.handoverCheck = s.handoverTicker.C
}

func (s *supervision) stopHandoverChecks() {
	if s.handoverTicker != nil {
		s.handoverTicker.Stop()
	}
}

// startSupervision starts postgres when the run loop begins. A primary
// fenced by hand takes its Lease at the first tick. A former primary that
// could not rejoin yet stays stopped until it does.
func (m *Manager) startSupervision(ctx context.Context, s *supervision) {
	switch st := m.snapshot(); {
	case rejoinDue(st):
		s.restartAt, s.backoff = m.scheduleRestart(s.backoff)
	case !st.life.FencedByHand() && m.mayStart(ctx):
		if err := m.startPostgres(ctx); err != nil {
			m.setError(err)
			s.restartAt, s.backoff = m.scheduleRestart(s.backoff)
		}
	}
}

// restartWhenDue starts postgres again when its restart is due, unless
// the manager is terminating.
func (m *Manager) restartWhenDue(ctx context.Context, s *supervision) {
	s.restartAt = nil
	if !m.snapshot().life.Terminating() {
		s.restartAt, s.backoff = m.restart(ctx, s.backoff)
	}
}

// askedToStop begins the termination (SIGTERM); it says whether to
// terminate at once, with no handover to wait for.
func (m *Manager) askedToStop(ctx context.Context, s *supervision) bool {
	s.stop = nil
	if !m.beginTermination(ctx) {
		return true
	}
	s.startHandoverChecks(m.opts.Termination.HandoverWait)
	return false
}

// afterExit handles an unexpected exit of postgres: a restart, scheduled
// by afterCrash, unless the manager is terminating (the pod is going),
// which it says.
func (m *Manager) afterExit(ctx context.Context, s *supervision) (terminating bool) {
	if m.snapshot().life.Terminating() {
		return true
	}
	s.restartAt, s.backoff = m.afterCrash(ctx, s.backoff)
	return false
}

// runOperation runs op, or refuses it once the manager is terminating
// (only the handover's step-down still runs); it says whether the
// terminating primary has handed over and the manager should finish.
func (m *Manager) runOperation(ctx context.Context, op operation, s *supervision) bool {
	if m.snapshot().life.Terminating() && op.name != opStepDown {
		op.result <- operationResult{nil, errTerminating}
		return false
	}
	m.log.Info("Running an operation", "operation", op.name)
	value, err := op.fn(ctx)
	op.result <- operationResult{value, err}
	if m.handedOver() {
		return true
	}
	if err == nil {
		s.backoff = 0
	}
	if _, pending := m.snapshot().life.PendingRejoin(); pending && s.restartAt == nil {
		s.restartAt, s.backoff = m.scheduleRestart(s.backoff)
	}
	return false
}

// running says a postmaster is running (or starting).
func (m *Manager) running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.postgres != nil
}

// exited is closed when the running postmaster exits; nil (never ready)
// when postgres is not running.
func (m *Manager) exited() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.postgres == nil {
		return nil
	}
	return m.postgres.Done()
}

// afterCrash schedules the restart of a postgres that exited unexpectedly,
// with the backoff started over after a stable run; a crash-looping
// primary gives up its Lease instead (nothing scheduled: holding the Lease
// again starts it).
func (m *Manager) afterCrash(ctx context.Context, backoff time.Duration) (<-chan time.Time, time.Duration) {
	looping, afterStableRun, mismatch := m.recordCrash()
	if afterStableRun {
		backoff = 0
	}
	if mismatch != "" && m.planReclone(mismatch) {
		return m.scheduleRestart(backoff)
	}
	if looping && m.giveUpPrimary(ctx) {
		return nil, backoff
	}
	return m.scheduleRestart(backoff)
}

// recordCrash records an unexpected exit of postgres; it says whether
// postgres is crash-looping, whether it had run stably before (see
// crashLoop.crashed), and the history mismatch that made it exit, if one
// did.
func (m *Manager) recordCrash() (looping, afterStableRun bool, mismatch string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	looping, afterStableRun = m.crashes.crashed(time.Since(m.state.startedAt))
	m.state.crashStreak = m.crashes.streak
	pm := m.postgres
	m.postgres = nil
	m.state.restarts++
	m.recordLocked(lifecycle.Exited)
	m.state.lastError = fmt.Sprintf("postgres exited unexpectedly (%v)", pm.ExitErr())
	if last := pm.LastError(); last != "" {
		m.state.lastError += ": " + last
	}
	m.log.Info("Restarting postgres after an unexpected exit", "exit", fmt.Sprint(pm.ExitErr()), "lastError", pm.LastError(),
		"crashesInARow", m.crashes.streak)
	return looping, afterStableRun, pm.HistoryMismatch()
}

// planReclone answers a replica whose postgres refused its own data
// directory's history (see supervisor.Postmaster.HistoryMismatch): every
// restart would fail the same way, and pg_rewind already found, or would
// find, nothing to rewind by the control file, which is behind the WAL
// that went past the fork. The run loop copies the upstream afresh in
// place, keeping the old directory aside, instead of crash-looping until
// the operator replaces the whole instance. It says whether it planned
// one: a primary, or an instance fenced by hand, is left alone.
func (m *Manager) planReclone(mismatch string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state.role != instanceapi.RoleReplica {
		return false
	}
	up := m.state.upstream
	if m.applyLocked(lifecycle.RecloneNeeded(up)) != nil {
		return false // fenced by hand: left as it is
	}
	m.log.Info("postgres refused this data directory's history; copying the upstream afresh", "reason", mismatch, "upstream", up.Host)
	return true
}

// restart starts postgres when the restart timer fires, and schedules
// another attempt when it cannot.
func (m *Manager) restart(ctx context.Context, backoff time.Duration) (<-chan time.Time, time.Duration) {
	if up, due := m.snapshot().life.RejoinDue(); due {
		return m.finishRejoin(ctx, up, backoff)
	}
	if m.snapshot().life.KeptStopped() {
		// Unfence, or holding the Lease again, starts it.
		m.log.Info("Not starting postgres again: it is fenced")
		return nil, backoff
	}
	if m.running() {
		return nil, backoff // an operation started it meanwhile
	}
	if err := m.startPostgres(ctx); err != nil {
		m.setError(err)
		return m.scheduleRestart(backoff)
	}
	return nil, backoff
}

// finishRejoin retries the rejoin of a demote that failed, then starts
// postgres as a replica; until then postgres stays stopped, so a former
// primary never serves on its old history.
func (m *Manager) finishRejoin(ctx context.Context, up instanceapi.Upstream, backoff time.Duration) (<-chan time.Time, time.Duration) {
	rejoin := m.rejoin
	if m.snapshot().life.RecloneInPlace() {
		rejoin = m.reclone
	}
	if err := rejoin(ctx, up); err != nil {
		m.setError(err)
		return m.scheduleRestart(backoff)
	}
	m.record(lifecycle.Rejoined)
	if err := m.startPostgres(ctx); err != nil {
		m.setError(err)
		return m.scheduleRestart(backoff)
	}
	return nil, 0
}

func (m *Manager) scheduleRestart(previous time.Duration) (<-chan time.Time, time.Duration) {
	wait := m.opts.RestartBackoff.next(previous)
	m.log.Info("Waiting before starting postgres again", "backoff", wait.String())
	return time.After(wait), wait
}

// do runs fn in the run loop and waits for its result.
func (m *Manager) do(ctx context.Context, name string, fn func(ctx context.Context) (any, error)) (any, error) {
	op := operation{name: name, fn: fn, result: make(chan operationResult, 1)}
	select {
	case m.ops <- op:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-m.stopped:
		return nil, errors.New("the instance manager is shutting down")
	}
	res := <-op.result
	return res.value, res.err
}

// record moves the lifecycle on by e, which the manager has acted on
// already (see recordLocked).
func (m *Manager) record(e lifecycle.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recordLocked(e)
}

// recordLocked is record with mu held. The events recorded so are never
// refused where they are applied; a refusal would be a mistake of the
// manager's, logged and otherwise ignored, as the action is done.
func (m *Manager) recordLocked(e lifecycle.Event) {
	if err := m.applyLocked(e); err != nil {
		m.log.Error(err, "Recording a lifecycle event", "event", e.String())
	}
}

// applyLocked moves the lifecycle on by e, with mu held: the one place
// the manager changes it. A refused event changes nothing and says why.
func (m *Manager) applyLocked(e lifecycle.Event) error {
	next, err := m.state.life.Apply(e)
	if err != nil {
		return err
	}
	m.state.life = next
	return nil
}

// rejoinDue says the run loop has a rejoin to try before it starts
// postgres (see lifecycle.State.RejoinDue).
func rejoinDue(st state) bool {
	_, due := st.life.RejoinDue()
	return due
}

func (m *Manager) setError(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state.lastError = err.Error()
	m.log.Error(err, "Instance manager error")
}

func (m *Manager) snapshot() state {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state
}

func shutdownHTTP(server *http.Server, log logr.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := server.Shutdown(ctx); err != nil {
		log.Error(err, "Stopping the HTTP server")
	}
}
