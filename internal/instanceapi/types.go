// Package instanceapi is the wire contract between the operator and the
// instance manager: what GET /status returns and what the operator may ask
// for. It is a leaf package (standard library only) so that neither side
// imports the other.
package instanceapi

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Paths served by the instance manager.
const (
	PathStatus  = "/status"
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
	PathMetrics = "/metrics"
	PathPromote = "/v1/promote"
	PathDemote  = "/v1/demote"
	// PathStepDown is the first half of a switchover; see StepDownResult.
	PathStepDown = "/v1/step-down"
	PathFollow   = "/v1/follow"
	// PathReconnect makes a replica's WAL receiver connect to its upstream
	// afresh; see ReconnectResult.
	PathReconnect = "/v1/reconnect"
	PathRestart   = "/v1/restart"
	PathConfig    = "/v1/config"
	// PathFence stops postgres (fast) and keeps it stopped, the pod and its
	// data left for inspection, until PathUnfence; see Status.Fenced.
	PathFence   = "/v1/fence"
	PathUnfence = "/v1/unfence"
	// PathBackups takes a base backup of the instance in the background
	// (POST, body: a BackupRequest); PathBackups + "/" + name reports one
	// (GET). See BackupStatus.
	PathBackups = "/v1/backups"
	// PathWALSwitch makes a primary switch to a new WAL segment (POST, no
	// body), so that the one in progress is archived now rather than at
	// archive_timeout: a standby's backup waits for its last segment. See
	// WALSwitchResult.
	PathWALSwitch = "/v1/wal/switch"
	// PathCheckpoint makes a primary run CHECKPOINT (POST, no body): the
	// operator asks before a switchover, while the primary still takes
	// writes, so that the shutdown checkpoint of the step-down, during
	// which nothing can be written, has little left to write. See
	// CheckpointResult.
	PathCheckpoint = "/v1/checkpoint"
	// PathImportCutover starts the cutover of a logical import on the
	// primary (POST, ImportCutoverRequest); it answers 202 at once, and
	// Status.Import follows it.
	PathImportCutover = "/v1/import/cutover"
	// PathEndSessions ends the sessions of ordinary roles (POST, no body):
	// the operator asks an old primary whose Services moved to the
	// cluster that imported it. See EndSessionsResult.
	PathEndSessions = "/v1/sessions/end"
	// PathImportAbandon drops a logical import's subscriptions, and their
	// slots on the source, before the cluster is deleted uncut over (POST,
	// no body). See ImportAbandonResult.
	PathImportAbandon = "/v1/import/abandon"
	// PathUpgradePrecheck runs, on the serving primary, the major
	// upgrade's pre-checks a running server can answer (POST, no body).
	// See UpgradePrecheckResult.
	PathUpgradePrecheck = "/v1/upgrade/precheck"
)

// ImportCutoverRequest names the cutover asked for (the annotation's
// value): a cutover that ran for it is not run again.
type ImportCutoverRequest struct {
	Cutover string `json:"cutover"`
}

// UpgradePrecheckResult says what would make a major upgrade fail
// (Problem, with what to do), "" when nothing does.
type UpgradePrecheckResult struct {
	Problem string `json:"problem,omitempty"`
}

// ImportAbandonResult names the import's slots dropped on the source, and
// those left there because the source could not be reached.
type ImportAbandonResult struct {
	Dropped []string `json:"dropped,omitempty"`
	Left    []string `json:"left,omitempty"`
}

// ImportStatus is a logical import's state on the primary.
type ImportStatus struct {
	// Phase is Replicating, CuttingOver, CutOver or CutoverFailed.
	Phase string `json:"phase"`
	// Message says what the import does, or why the cutover failed.
	Message string `json:"message,omitempty"`
	// Cutover is the request the last cutover ran for.
	Cutover string `json:"cutover,omitempty"`
	// WriteGapSeconds is how long the cutover kept writes out.
	WriteGapSeconds float64 `json:"writeGapSeconds,omitempty"`
}

// DefaultStatusPort is where the instance manager serves HTTP in a pod.
const DefaultStatusPort = 8000

// ManagerBinary is where the instance manager's binary is in every
// PostgreSQL pod: an init container copies it there from the operator's
// image, so any PostgreSQL image works.
const ManagerBinary = "/tusk-bin/tusk"

// PostgresContainer is the name of the container that runs the instance
// manager and PostgreSQL in every instance pod; ReplicationTLSDir is where
// its replication certificate is mounted, whose ca.crt signed the
// servers' certificates (the operator builds the pod; kubectl tusk execs
// in it).
const (
	PostgresContainer = "postgres"
	ReplicationTLSDir = "/etc/tusk/tls/replication"
)

// ProbeRole is the role the SLI probe (tusk probe) logs in as, with a
// client certificate whose CN is the role; it may only write and read
// ProbeTable of the database ProbeDatabase, which the primary's instance
// manager makes.
const (
	ProbeRole     = "tusk_probe"
	ProbeDatabase = "postgres"
	ProbeTable    = "tusk_probe.heartbeat"
)

// LabelRole is the pod label holding the role the operator wants for the
// instance; the -rw Service selects the primary by it, and the instance
// manager reads it at start through the downward API (--role-file).
const LabelRole = "tusk.dev/role"

// DefaultAPIClientCN is the CommonName of the client certificate the
// operator presents when the instance manager serves HTTPS: GET /status and
// the /v1 commands require it (the probes and /metrics do not).
const DefaultAPIClientCN = "tusk-operator"

// OperatorIdentity is the URI subject alternative name of the operator's
// client certificate, which the instance manager requires besides the
// CommonName: a PostgresRole's certificate comes from the same CA with the
// role's name as CommonName (a role may be called tusk-operator) and never
// carries a URI.
const OperatorIdentity = "urn:tusk.dev:operator"

// Role is the replication role of an instance.
type Role string

// The roles an instance can report.
const (
	RolePrimary Role = "primary"
	RoleReplica Role = "replica"
	RoleUnknown Role = "unknown"
)

// Phase is where the instance manager is in its life.
type Phase string

// The phases of an instance.
const (
	// PhaseBootstrapping: creating the data directory (initdb, pg_basebackup).
	PhaseBootstrapping Phase = "Bootstrapping"
	// PhaseStarting: postgres was started and does not accept connections
	// yet (it may be replaying WAL after a crash, which can take long).
	PhaseStarting Phase = "Starting"
	// PhaseRunning: postgres accepts connections.
	PhaseRunning Phase = "Running"
	// PhaseRejoining: a former primary is being rewound to follow another.
	PhaseRejoining Phase = "Rejoining"
	// PhaseStopped: postgres is stopped on purpose (shutdown, restart).
	PhaseStopped Phase = "Stopped"
	// PhaseFenced: a primary that could not hold the primary Lease keeps
	// postgres stopped, so it takes no writes while another may be promoted.
	PhaseFenced Phase = "Fenced"
	// PhaseRecovering: a new primary is being restored from a base backup
	// and the WAL archive (bootstrap.recovery); Status.Recovery says how
	// far, LastError why the last attempt failed. It can take long.
	PhaseRecovering Phase = "Recovering"
	// PhaseCrashed: postgres exited unexpectedly and will be restarted
	// after a backoff; LastError says why it stopped.
	PhaseCrashed Phase = "Crashed"
	// PhaseUpgrading: the data directory is being upgraded to the image's
	// major version (pg_upgrade); Status.Upgrade says how far.
	PhaseUpgrading Phase = "Upgrading"
	// PhaseUpgradeFailed: the upgrade failed and was rolled back (or, if
	// Status.Upgrade says not, could not be); postgres stays stopped until
	// the pod runs the old major's image again.
	PhaseUpgradeFailed Phase = "UpgradeFailed"
)

// FenceCause says what keeps a fenced instance's postgres stopped.
type FenceCause string

const (
	// FenceCauseHand is POST /v1/fence (the operator, on the cluster's
	// tusk.dev/fenced-instances annotation) until POST /v1/unfence.
	FenceCauseHand FenceCause = "hand"
	// FenceCauseLease is a primary that could not hold the primary Lease;
	// it lifts this fence itself when it holds the Lease again.
	FenceCauseLease FenceCause = "lease"
)

// Status is one instance's report, served on GET /status.
type Status struct {
	// Instance is the instance's name (its pod's name).
	Instance string `json:"instance"`
	// Phase is where the instance manager is.
	Phase Phase `json:"phase"`
	// Role is what PostgreSQL says it is (pg_is_in_recovery), or unknown
	// when it does not accept connections.
	Role Role `json:"role"`
	// Ready is what /readyz answers: accepting connections and, for a
	// replica, streaming or replaying WAL.
	Ready bool `json:"ready"`
	// Timeline is the current timeline.
	Timeline uint32 `json:"timeline,omitempty"`
	// CurrentLSN is the primary's current write location.
	CurrentLSN string `json:"currentLSN,omitempty"`
	// ReceivedLSN is the last WAL location a replica received and flushed.
	ReceivedLSN string `json:"receivedLSN,omitempty"`
	// ReplayedLSN is the last WAL location a replica replayed.
	ReplayedLSN string `json:"replayedLSN,omitempty"`
	// Streaming says a replica has a live WAL receiver.
	Streaming bool `json:"streaming,omitempty"`
	// Upstream is where a replica is set to stream from.
	Upstream *Upstream `json:"upstream,omitempty"`
	// Diverged is PostgreSQL's own message when a replica cannot follow
	// its upstream's timeline because it has WAL past the point where that
	// timeline forked off; only a rewind helps. Empty otherwise.
	Diverged string `json:"diverged,omitempty"`
	// ReplayLagBytes is how far replay is behind what was received.
	ReplayLagBytes int64 `json:"replayLagBytes,omitempty"`
	// ReplayLagSeconds is the age of the last replayed transaction while
	// WAL is waiting to be replayed; 0 when caught up.
	ReplayLagSeconds float64 `json:"replayLagSeconds,omitempty"`
	// Replicas are the standbys streaming from this instance: a primary's
	// replicas, or a replica's cascading ones.
	Replicas []ReplicaConnection `json:"replicas,omitempty"`
	// PendingRestart lists settings changed in the configuration that take
	// effect only after a restart.
	PendingRestart []string `json:"pendingRestart,omitempty"`
	// PendingValues are the settings in PendingRestart with their running
	// and their new value, so the operator can order restarts (a standby
	// needs some settings at least as high as its primary's).
	PendingValues []PendingValue `json:"pendingValues,omitempty"`
	// ConfigErrors are settings PostgreSQL refused on the last reload.
	ConfigErrors []string `json:"configErrors,omitempty"`
	// PostgresVersion is server_version, such as "15.18".
	PostgresVersion string `json:"postgresVersion,omitempty"`
	// SystemIdentifier identifies the database cluster; all instances of one
	// cluster share it.
	SystemIdentifier string `json:"systemIdentifier,omitempty"`
	// DataDirBytes is the size of the data directory.
	DataDirBytes int64 `json:"dataDirBytes,omitempty"`
	// LastPasswordRotation is when the manager last applied a changed
	// password file: on a primary with ALTER ROLE, on a replica to its
	// passfile only. Nil when no password changed since the manager started.
	LastPasswordRotation *time.Time `json:"lastPasswordRotation,omitempty"`
	// Fenced says postgres is kept stopped by hand (POST /v1/fence) until
	// POST /v1/unfence; Phase is then Fenced. A fenced primary still
	// renews its Lease: it is the primary, only stopped, and must not be
	// failed over. A primary that lost its Lease also reports phase Fenced,
	// but not Fenced: it lifts that fence itself when it holds the Lease
	// again.
	Fenced bool `json:"fenced,omitempty"`
	// FencedBy names what keeps postgres stopped: "hand" (as Fenced says)
	// or "lease" (a primary that could not hold its Lease, or gave it up
	// crash-looping); the hand fence when both, as it is the one a human
	// must lift (LastError names both). Empty when not fenced. Operators
	// that predate it read Fenced and Phase.
	FencedBy FenceCause `json:"fencedBy,omitempty"`
	// Archive is the health of continuous WAL archiving on a primary that
	// archives (pg_stat_archiver); nil on a replica or without archiving.
	Archive *ArchiveStatus `json:"archive,omitempty"`
	// Recovery is the progress of a recovery bootstrap; nil otherwise.
	Recovery *RecoveryStatus `json:"recovery,omitempty"`
	// Upgrade is the major upgrade this instance ran or runs; nil when
	// it was started without one.
	Upgrade *UpgradeStatus `json:"upgrade,omitempty"`
	// Import is the logical import this primary follows or followed; nil
	// without one.
	Import *ImportStatus `json:"import,omitempty"`
	// Restarts counts unexpected postgres exits the manager recovered from.
	Restarts int `json:"restarts,omitempty"`
	// CrashStreak counts the unexpected exits in a row, each within 30 s of
	// the start before it: a crash loop, as opposed to separate faults. It
	// is 0 once postgres has run for 30 s.
	CrashStreak int `json:"crashStreak,omitempty"`
	// Terminating says the manager was asked to stop (its pod is being
	// deleted or evicted). A primary that says so keeps serving while it
	// waits, for a while, for the operator to hand its role over to a
	// standby (POST /v1/stepdown); see docs/high-availability.md.
	Terminating bool `json:"terminating,omitempty"`
	// LastError is the last thing that went wrong, for humans.
	LastError string `json:"lastError,omitempty"`
	// DataDir is what the manager found when it started: no data
	// directory (Empty), or what pg_control said of one before anything
	// changed it. The operator compares them to choose the primary among
	// volumes kept from a deleted cluster. Nil until the manager looked.
	DataDir *DataDirState `json:"dataDir,omitempty"`
	// StoppedForRejoin is what pg_control says of a former primary's data
	// directory while its postgres stays stopped until it rejoins as a
	// replica (phase Rejoining): read once postgres stopped, before a
	// rewind touched it. A primary that shut down cleanly ("shut down")
	// wrote nothing after that checkpoint, so a standby that received it
	// has every commit the primary acknowledged: the operator may promote
	// that standby even when the synchronous quorum cannot answer. Nil
	// otherwise.
	StoppedForRejoin *DataDirState `json:"stoppedForRejoin,omitempty"`
}

// UpgradeStatus is a major upgrade of the data directory.
type UpgradeStatus struct {
	// Attempt is the operator's name for this attempt (--upgrade-attempt).
	Attempt string `json:"attempt"`
	// From and To are the major versions.
	From int `json:"from,omitempty"`
	To   int `json:"to,omitempty"`
	// Step is the upgrade's last step (pgupgrade's Step, or Committed
	// once the new server took over the data directory).
	Step string `json:"step,omitempty"`
	// Failed says the attempt failed; Reason says where and why, and
	// RolledBack whether the old data directory is back in place.
	Failed     bool   `json:"failed,omitempty"`
	Reason     string `json:"reason,omitempty"`
	RolledBack bool   `json:"rolledBack,omitempty"`
	// NewerData is the data directory's major when it is newer than the
	// image's: an upgrade to it was committed, and no older image can
	// serve it. The manager then waits with postgres stopped.
	NewerData int `json:"newerData,omitempty"`
}

// StateShutDown is pg_control's cluster state of a primary that shut down
// cleanly: its shutdown checkpoint is the last record it wrote.
const StateShutDown = "shut down"

// DataDirState is what pg_control says of a data directory.
type DataDirState struct {
	// Empty says there was no data directory: the manager creates one
	// (the other fields are empty).
	Empty bool `json:"empty,omitempty"`
	// SystemIdentifier is the database system identifier.
	SystemIdentifier string `json:"systemIdentifier,omitempty"`
	// State is pg_control's cluster state: "shut down" or "in production"
	// for a primary's, "shut down in recovery" or "in archive recovery"
	// for a standby's.
	State string `json:"state,omitempty"`
	// Standby says standby.signal is there: the data directory is a
	// standby's.
	Standby bool `json:"standby,omitempty"`
	// Timeline is the latest checkpoint's timeline.
	Timeline uint32 `json:"timeline,omitempty"`
	// CheckpointLSN is the latest checkpoint's location; MinRecoveryLSN a
	// standby's minimum recovery ending location (how far it replayed, at
	// least; 0/0 on a primary's).
	CheckpointLSN  string `json:"checkpointLSN,omitempty"`
	MinRecoveryLSN string `json:"minRecoveryLSN,omitempty"`
}

// RecoveryStatus is how far a recovery bootstrap is.
type RecoveryStatus struct {
	// Backup is the backup being restored, once chosen.
	Backup string `json:"backup,omitempty"`
	// Step is what the instance manager is doing, for humans.
	Step string `json:"step"`
	// FailedAttempts counts the attempts that failed; LastError says why
	// the last did. The next one waits longer each time.
	FailedAttempts int `json:"failedAttempts,omitempty"`
}

// ArchiveStatus is what pg_stat_archiver says of WAL archiving since the
// statistics were last reset (they survive restarts, not crashes).
type ArchiveStatus struct {
	// LastArchivedWAL is the last WAL file archived successfully.
	LastArchivedWAL string `json:"lastArchivedWAL,omitempty"`
	// LastArchivedTime is when it was archived.
	LastArchivedTime *time.Time `json:"lastArchivedTime,omitempty"`
	// LastFailedWAL is the last WAL file whose archiving failed.
	LastFailedWAL string `json:"lastFailedWAL,omitempty"`
	// LastFailedTime is when it failed.
	LastFailedTime *time.Time `json:"lastFailedTime,omitempty"`
	// ArchivedCount and FailedCount count successes and failed attempts.
	ArchivedCount int64 `json:"archivedCount"`
	FailedCount   int64 `json:"failedCount"`
	// Failing says the last attempt failed: the last failure is newer
	// than the last success (see ArchiveFailing).
	Failing bool `json:"failing"`
	// Reason is why the manager's last attempt failed, while Failing: the
	// kind of object store failure, or the error (a location that holds
	// another database's archive).
	Reason string `json:"reason,omitempty"`
}

// ArchiveFailing says whether archiving is failing now: a failure newer than
// the last success, or failures and no success at all.
func ArchiveFailing(lastArchived, lastFailed *time.Time) bool {
	return lastFailed != nil && (lastArchived == nil || lastFailed.After(*lastArchived))
}

// PendingValue is a setting whose new value takes effect at the next
// restart.
type PendingValue struct {
	// Name is the setting's name.
	Name string `json:"name"`
	// Running is the value in effect (pg_settings.setting).
	Running string `json:"running"`
	// Pending is the value in the configuration file.
	Pending string `json:"pending"`
}

// ReplicaConnection is one standby as a primary sees it (pg_stat_replication).
type ReplicaConnection struct {
	// Name is the standby's application_name: its instance name.
	Name string `json:"name"`
	// State is the WAL sender's state, such as streaming.
	State string `json:"state"`
	// SyncState is async, potential, sync or quorum.
	SyncState string `json:"syncState"`
	// FlushLSN is the last location the standby flushed to disk.
	FlushLSN string `json:"flushLSN,omitempty"`
	// ReplayLSN is the last location the standby replayed.
	ReplayLSN string `json:"replayLSN,omitempty"`
	// LagBytes is how far the standby's replay is behind the primary.
	LagBytes int64 `json:"lagBytes"`
	// ReplayLagSeconds is how long the standby took to replay recent WAL
	// (pg_stat_replication.replay_lag); 0 when there was none to replay.
	ReplayLagSeconds float64 `json:"replayLagSeconds,omitempty"`
}

// Upstream is the primary a replica streams from.
type Upstream struct {
	// Host is the primary's host name, normally the cluster's -rw Service.
	Host string `json:"host"`
	// HostAddr, when set, is the primary's pod IP: the replica connects
	// to it first, checking the certificate against Host, and to Host by
	// name when that fails. After a failover it reaches the new primary
	// without waiting for kube-proxy to move Host's Service.
	HostAddr string `json:"hostAddr,omitempty"`
	// Port is the primary's port.
	Port int `json:"port"`
}

// FollowRequest asks a replica to stream from another primary (POST
// /v1/follow), or a former primary to rejoin as a replica (POST /v1/demote).
type FollowRequest struct {
	Upstream Upstream `json:"upstream"`
}

// ReconnectResult is the answer to POST /v1/reconnect. After a failover a
// replica's WAL receiver may still wait on a connection to the former
// primary that the network dropped (TCP notices only after
// tcp_user_timeout, and a partition that heals may even deliver WAL the new
// primary never had); the operator asks the remaining replicas to connect
// to the -rw Service again as soon as it points at the new primary.
type ReconnectResult struct {
	// Restarted says a WAL receiver was running and was stopped; the
	// startup process starts a new one at once. False when none ran: one
	// is already being started.
	Restarted bool `json:"restarted"`
}

// StepDownResult is the answer to POST /v1/step-down (body: a
// FollowRequest): the primary shut down cleanly, which made its connected
// standbys flush every WAL record, and started again as a replica of the
// upstream. The standby to promote must have received WAL up to
// ShutdownCheckpointLSN.
type StepDownResult struct {
	// ShutdownCheckpointLSN is the location of the shutdown checkpoint,
	// the last record the former primary wrote.
	ShutdownCheckpointLSN string `json:"shutdownCheckpointLSN"`
}

// Config is the PostgreSQL configuration the operator wants (PUT
// /v1/config). Settings Tusk owns are not part of it.
type Config struct {
	// Parameters are the user's postgresql.conf settings.
	Parameters map[string]string `json:"parameters,omitempty"`
	// SynchronousStandbyNames is the primary's synchronous_standby_names,
	// computed by the operator from the cluster's quorum and members.
	SynchronousStandbyNames string `json:"synchronousStandbyNames,omitempty"`
	// SuperuserRemoteAccess lets the superuser log in over the network
	// (pg_hba.conf); off, over the pod's Unix socket only.
	SuperuserRemoteAccess bool `json:"superuserRemoteAccess,omitempty"`
	// Logging is what PostgreSQL logs besides errors
	// (spec.postgresql.logging); nil leaves PostgreSQL's settings.
	Logging *Logging `json:"logging,omitempty"`
}

// Logging is what PostgreSQL logs besides errors; a nil field leaves the
// setting as PostgreSQL (or the user's parameters) has it.
type Logging struct {
	// SlowStatementThresholdMillis is log_min_duration_statement: a
	// statement that runs this long or longer is logged with its duration
	// (0: every statement).
	SlowStatementThresholdMillis *int64 `json:"slowStatementThresholdMillis,omitempty"`
	// LockWaits is log_lock_waits (and log_recovery_conflict_waits): a
	// wait longer than LockWaitThresholdMillis is logged.
	LockWaits *bool `json:"lockWaits,omitempty"`
	// LockWaitThresholdMillis is deadlock_timeout.
	LockWaitThresholdMillis *int64 `json:"lockWaitThresholdMillis,omitempty"`
}

// MaxLogMillis is the longest duration a Logging field may carry (INT_MAX
// milliseconds, PostgreSQL's bound).
const MaxLogMillis = 1<<31 - 1

// validate refuses durations PostgreSQL would not take.
func (l *Logging) validate() []error {
	if l == nil {
		return nil
	}
	var errs []error
	if d := l.SlowStatementThresholdMillis; d != nil && (*d < 0 || *d > MaxLogMillis) {
		errs = append(errs, fmt.Errorf("logging.slowStatementThresholdMillis %d is not from 0 to %d", *d, MaxLogMillis))
	}
	if d := l.LockWaitThresholdMillis; d != nil && (*d < 1 || *d > MaxLogMillis) {
		errs = append(errs, fmt.Errorf("logging.lockWaitThresholdMillis %d is not from 1 to %d", *d, MaxLogMillis))
	}
	return errs
}

// MaxParameterValue is the longest parameter value a Config may carry.
const MaxParameterValue = 4096

// parameterName is a PostgreSQL setting name in lowercase, with at most one
// dot (extension settings).
var parameterName = regexp.MustCompile(`^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$`)

// Validate refuses a configuration that no postgresql.conf could carry: a
// name that is not a setting name, a value with a line break or NUL (the
// rest would become a setting of its own), or one longer than
// MaxParameterValue. Both sides check it before anything changes: the
// operator before it sends a configuration, the instance manager before it
// stores one.
func (c Config) Validate() error {
	var errs []error
	for name, value := range c.Parameters {
		switch {
		case !parameterName.MatchString(name):
			errs = append(errs, fmt.Errorf("parameter name %q is not a PostgreSQL setting name", name))
		case strings.ContainsAny(value, "\n\r\x00"):
			errs = append(errs, fmt.Errorf("the value of parameter %s contains a line break or NUL", name))
		case len(value) > MaxParameterValue:
			errs = append(errs, fmt.Errorf("the value of parameter %s is longer than %d bytes", name, MaxParameterValue))
		}
	}
	if strings.ContainsAny(c.SynchronousStandbyNames, "\n\r\x00") {
		errs = append(errs, errors.New("synchronousStandbyNames contains a line break or NUL"))
	}
	errs = append(errs, c.Logging.validate()...)
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// ConfigResult tells what applying a Config did.
type ConfigResult struct {
	// Reloaded says PostgreSQL re-read its configuration.
	Reloaded bool `json:"reloaded"`
	// PendingRestart lists settings that need a restart to take effect.
	PendingRestart []string `json:"pendingRestart,omitempty"`
	// Errors are settings PostgreSQL refused.
	Errors []string `json:"errors,omitempty"`
}

// WALSwitchResult answers POST /v1/wal/switch. A manager switches at
// most once every few seconds, whoever asks: a request within that time
// is answered with the last switch's result and Throttled.
type WALSwitchResult struct {
	// LSN is what pg_switch_wal() returned: the end of the segment it
	// completed, or where WAL is written now when nothing was written since
	// the last switch (then nothing was switched).
	LSN string `json:"lsn"`
	// Segment is the WAL file that ends before LSN: the one completed.
	Segment string `json:"segment"`
	// Throttled: this request did not switch; LSN and Segment are the last
	// switch's.
	Throttled bool `json:"throttled,omitempty"`
}

// BackupRequest asks the instance manager to take a base backup of its
// instance into the cluster's object store (POST /v1/backups).
type BackupRequest struct {
	// Name is the backup's name: base/<name>/ in the cluster's location.
	Name string `json:"name"`
}

// BackupPhase is where a base backup taken by an instance manager is.
type BackupPhase string

// The phases of a base backup.
const (
	BackupRunning   BackupPhase = "running"
	BackupCompleted BackupPhase = "completed"
	BackupFailed    BackupPhase = "failed"
)

// Kinds of backup failures the user fixes in the object store or its
// Secret (BackupStatus.ErrorKind); empty for anything else.
const (
	BackupErrorWrongCredentials    = "WrongCredentials"
	BackupErrorBucketNotFound      = "BucketNotFound"
	BackupErrorEndpointUnreachable = "EndpointUnreachable"
	BackupErrorTLSFailure          = "TLSFailure"
)

// BackupStatus is the answer to POST /v1/backups and GET
// /v1/backups/<name>. A manager knows the backups it took since it started;
// asked for another one it looks in the object store, where a backup's
// record marks it complete, and answers 404 when there is none.
type BackupStatus struct {
	Name  string      `json:"name"`
	Phase BackupPhase `json:"phase"`
	// StartedAt is when the manager started the backup (zero for a backup
	// found in the store).
	StartedAt time.Time `json:"startedAt,omitzero"`
	// CompletedAt is when it completed or failed.
	CompletedAt *time.Time `json:"completedAt,omitempty"`
	// WaitingForWAL is, while running, the WAL segment the backup waits to
	// see archived: a backup from a standby is complete only once the
	// primary archived the WAL up to its end.
	WaitingForWAL string `json:"waitingForWAL,omitempty"`
	// Location is where the backup goes: s3://bucket/path/base/<name>/.
	Location string `json:"location,omitempty"`
	// Record is the completed backup's record (backup.json).
	Record *BackupRecord `json:"record,omitempty"`
	// Error says why the backup failed; ErrorKind classifies object store
	// failures (BackupErrorWrongCredentials...).
	Error     string `json:"error,omitempty"`
	ErrorKind string `json:"errorKind,omitempty"`
}

// BackupRecord is what the operator needs of a backup's record.
type BackupRecord struct {
	// BeginLSN is where recovery starts; EndLSN where the restored copy
	// is consistent; Timeline is BeginLSN's timeline.
	BeginLSN string `json:"beginLSN"`
	EndLSN   string `json:"endLSN"`
	Timeline uint32 `json:"timeline"`
	// BeginWAL is the first WAL segment recovery reads.
	BeginWAL string `json:"beginWAL"`
	// StartTime and EndTime bound the backup by the instance's clock.
	StartTime time.Time `json:"startTime"`
	EndTime   time.Time `json:"endTime"`
	// Size is the tar stream's size; CompressedSize the stored object's.
	Size           int64 `json:"size"`
	CompressedSize int64 `json:"compressedSize"`
	// PostgreSQLVersion is the server's server_version.
	PostgreSQLVersion string `json:"postgresqlVersion"`
	// SystemIdentifier is the database system identifier.
	SystemIdentifier string `json:"systemIdentifier"`
}

// EndSessionsResult answers POST /v1/sessions/end.
type EndSessionsResult struct {
	// Ended is how many sessions were ended.
	Ended int `json:"ended"`
}

// CheckpointResult answers POST /v1/checkpoint.
type CheckpointResult struct {
	// TookMilliseconds is how long the CHECKPOINT ran.
	TookMilliseconds int64 `json:"tookMilliseconds"`
}

// Password is a password as Tusk uses it, read from a Secret's value or a
// mounted file: without the line breaks that end it (kubectl create secret
// --from-file keeps a file's last newline). The operator (the credential
// Secrets' URIs) and the instance manager (the role's password) both read
// passwords through it, so they never disagree.
func Password(raw []byte) string {
	return strings.TrimRight(string(raw), "\r\n")
}
