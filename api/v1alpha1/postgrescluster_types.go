package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PostgresClusterSpec is what the user wants: how many PostgreSQL instances,
// from which image, on what storage, configured how, and protected how.
//
// +kubebuilder:validation:XValidation:rule="self.postgresql.synchronous.mode == 'off' || self.instances == 1 || self.postgresql.synchronous.number < self.instances",message="postgresql.synchronous.number must be less than instances: a quorum of N synchronous standbys needs at least N+1 instances (raise instances, lower the number, or set synchronous.mode: off)"
type PostgresClusterSpec struct {
	// Instances is the number of PostgreSQL servers: one primary and
	// instances-1 streaming replicas.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +optional
	Instances int32 `json:"instances,omitempty"`

	// Image is the container image with the PostgreSQL server binaries
	// (initdb, postgres, pg_ctl, pg_basebackup, pg_rewind) on PATH or under
	// /usr/lib/postgresql/<major>/bin. Tusk needs nothing else inside it.
	// Changing it rolls the instances over one at a time. A newer
	// PostgreSQL major version in its tag starts a major upgrade
	// (spec.upgrade, docs/upgrades.md); an older one is refused.
	// +kubebuilder:default="postgres:17"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.find(':[0-9]+([.][0-9]+)*(-[^/:@]*)?(@|$)') == '' || oldSelf.find(':[0-9]+([.][0-9]+)*(-[^/:@]*)?(@|$)') == '' || int(self.find(':[0-9]+([.][0-9]+)*(-[^/:@]*)?(@|$)').find('[0-9]+')) >= int(oldSelf.find(':[0-9]+([.][0-9]+)*(-[^/:@]*)?(@|$)').find('[0-9]+'))",message="image cannot go to an older PostgreSQL major version: pg_upgrade only goes forward; to go back, restore a backup taken before the upgrade into a new cluster (bootstrap.recovery)"
	// +optional
	// +kubebuilder:validation:Pattern=`^\S+$`
	Image string `json:"image,omitempty"`

	// ImagePullPolicy is the pull policy of the PostgreSQL image.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// Storage is the persistent volume each instance keeps its data
	// directory on.
	Storage StorageSpec `json:"storage"`

	// Resources are the CPU and memory requests and limits of the PostgreSQL
	// container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// PostgreSQL is the configuration of the PostgreSQL servers.
	// +kubebuilder:default={}
	// +optional
	PostgreSQL PostgreSQLSpec `json:"postgresql,omitempty"`

	// Bootstrap says how the cluster's data comes into being: a new empty
	// database (initdb), a restore from a backup (recovery), or a copy of
	// another running cluster (clone). It cannot change after creation.
	// +kubebuilder:default={initdb:{database:app,owner:app}}
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="bootstrap cannot change after the cluster is created: it only describes how the data first came to be"
	// +optional
	Bootstrap *BootstrapSpec `json:"bootstrap,omitempty"`

	// Backup configures continuous WAL archiving and base backups to an S3
	// compatible object store. Without it the cluster is not backed up.
	// +optional
	Backup *BackupSpec `json:"backup,omitempty"`

	// Affinity adds the user's scheduling constraints to the PostgreSQL pods.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// Tolerations let the PostgreSQL pods run on tainted nodes.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// PriorityClassName is the priority class of the PostgreSQL pods.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=253
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// PostgresUID runs PostgreSQL as this user ID instead of the image's
	// own user; the image must have a passwd entry for it (initdb needs
	// one). The official postgres images need 999: they start as root.
	// +kubebuilder:validation:Minimum=1
	// +optional
	PostgresUID *int64 `json:"postgresUID,omitempty"`

	// PostgresGID is the primary group ID PostgreSQL runs as; set it with
	// postgresUID.
	// +kubebuilder:validation:Minimum=1
	// +optional
	PostgresGID *int64 `json:"postgresGID,omitempty"`

	// Upgrade says how a major version upgrade runs. One starts when
	// spec.image names a newer major than the data's.
	// +optional
	Upgrade *UpgradeSpec `json:"upgrade,omitempty"`

	// HighAvailability tunes the primary's Lease, which decides how soon a
	// primary that is cut off is replaced. Unset: a 10s Lease renewed every
	// 2s.
	// +optional
	HighAvailability *HighAvailabilitySpec `json:"highAvailability,omitempty"`

	// NetworkPolicy configures the NetworkPolicy <cluster> that Tusk keeps
	// for the cluster's pods. Unset: the policy exists, PostgreSQL (5432)
	// admits anyone, and the instance managers' port (8000: commands,
	// status, probes, metrics) admits only the operator's pods.
	// +optional
	NetworkPolicy *NetworkPolicySpec `json:"networkPolicy,omitempty"`

	// SuperuserSecret names an existing Secret whose `password` key is the
	// postgres superuser's password. Tusk generates a strong one in the
	// Secret <cluster>-superuser when unset. Changing the password in the
	// Secret changes it in PostgreSQL.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.name.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$') && size(self.name) <= 253",message="must name a Secret of the namespace: a lowercase DNS subdomain name"
	SuperuserSecret *corev1.LocalObjectReference `json:"superuserSecret,omitempty"`

	// SuperuserAccess lets the postgres superuser log in over the network
	// with its password. Off by default: the superuser then reaches
	// PostgreSQL only over the Unix socket inside a pod (`kubectl exec`),
	// because a database superuser can read any file the server can: the
	// pod's service-account token, the object store's keys and the server's
	// private key among them. Tusk itself never needs it. Off, no role
	// that logs in may have superuser rights either, by its attributes or
	// through groups at any depth: SUPERUSER, membership of
	// pg_read_server_files, pg_write_server_files or
	// pg_execute_server_program, or CREATEROLE below PostgreSQL 16.
	// +optional
	SuperuserAccess bool `json:"superuserAccess,omitempty"`

	// AllowUntrustedExtensions lets a PostgresDatabase create or update an
	// extension PostgreSQL does not mark trusted (file_fdw, adminpack,
	// dblink, untrusted languages...). Off by default: Tusk installs
	// extensions as the superuser, and an untrusted extension's script was
	// not written to run safely in schemas other roles may write, nor are
	// its functions meant for roles that are not superusers.
	// +optional
	AllowUntrustedExtensions bool `json:"allowUntrustedExtensions,omitempty"`

	// TLS configures the certificates of the PostgreSQL servers. TLS is
	// always on; by default Tusk creates a CA per cluster.
	// +optional
	TLS *TLSSpec `json:"tls,omitempty"`

	// Monitoring configures what Tusk runs to watch the cluster from
	// outside (docs/monitoring.md).
	// +optional
	Monitoring *MonitoringSpec `json:"monitoring,omitempty"`
}

// MonitoringSpec configures the cluster's monitoring.
type MonitoringSpec struct {
	// Probe, when set, runs the SLI probe: the Deployment <cluster>-probe
	// writes a row through the -rw Service and reads it through -ro every
	// interval, each time on a new connection with verified TLS as the
	// role tusk_probe, and exports the outcomes as metrics from which the
	// shipped rules alert on the burn of the availability objective's
	// error budget.
	// +optional
	Probe *ProbeSpec `json:"probe,omitempty"`
}

// ProbeSpec configures the SLI probe.
type ProbeSpec struct {
	// Interval is the time between two attempts on each Service, from 1s
	// to 60s; an attempt with no answer within it is a failure.
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('60s')",message="monitoring.probe.interval must be from 1s to 60s"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Objective is the availability objective in percent: the share of
	// attempts that should succeed, from 90 to 99.999 (the error budget is
	// what is left to 100).
	// +kubebuilder:default="99.9"
	// +kubebuilder:validation:MaxLength=6
	// +kubebuilder:validation:XValidation:rule="self.matches('^9[0-9]([.][0-9]{1,3})?$')",message="monitoring.probe.objective must be a percentage from 90 to 99.999, such as \"99.9\""
	// +optional
	Objective string `json:"objective,omitempty"`
}

// TLSSpec configures the cluster's certificate authority.
type TLSSpec struct {
	// CASecret names an existing Secret with keys ca.crt and ca.key (PEM):
	// the CA Tusk issues the server and replication certificates from,
	// instead of a CA of its own. Clients then trust your CA.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.name.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$') && size(self.name) <= 253",message="must name a Secret of the namespace: a lowercase DNS subdomain name"
	CASecret *corev1.LocalObjectReference `json:"caSecret,omitempty"`
}

// StorageSpec describes the persistent volume of each instance.
type StorageSpec struct {
	// Size is the capacity of each instance's volume. It can grow (when the
	// storage class allows volume expansion) but never shrink.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="storage.size must be greater than zero"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity(string(oldSelf))) >= 0",message="storage.size cannot shrink: a PostgreSQL volume can grow but never shrink"
	Size resource.Quantity `json:"size"`

	// StorageClassName is the storage class of new volumes; the cluster's
	// default storage class when unset. Existing volumes keep their class.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`

	// ReclaimPolicy says what happens to the volumes when the cluster is
	// deleted: Retain keeps them (a new cluster of the same name picks
	// them up again), Delete deletes them with the cluster. Volumes of
	// replicas removed by scaling down are always deleted: a replica's
	// data is a copy of the primary's.
	// +kubebuilder:default=Retain
	// +optional
	ReclaimPolicy ReclaimPolicy `json:"reclaimPolicy,omitempty"`
}

// ReclaimPolicy says whether a deleted cluster's volumes are kept.
// +kubebuilder:validation:Enum=Retain;Delete
type ReclaimPolicy string

// The reclaim policies.
const (
	// ReclaimRetain keeps the volumes of a deleted cluster.
	ReclaimRetain ReclaimPolicy = "Retain"
	// ReclaimDelete deletes the volumes with the cluster.
	ReclaimDelete ReclaimPolicy = "Delete"
)

// ParameterValue is the value of a postgresql.conf setting, as PostgreSQL
// would read it from SET or ALTER SYSTEM (Tusk quotes it).
// +kubebuilder:validation:MaxLength=4096
// +kubebuilder:validation:XValidation:rule="!self.contains('\\n') && !self.contains('\\r') && !self.contains('\\x00')",message="parameter values cannot contain line breaks or NUL characters: postgresql.conf has one setting per line, so a line break would start a setting nobody asked for"
type ParameterValue string

// PostgreSQLSpec configures the PostgreSQL servers.
// +kubebuilder:validation:XValidation:rule="!has(self.logging) || !has(self.parameters) || ((!has(self.logging.slowStatementThreshold) || !('log_min_duration_statement' in self.parameters)) && (!has(self.logging.lockWaits) || !('log_lock_waits' in self.parameters)) && (!has(self.logging.lockWaitThreshold) || !('deadlock_timeout' in self.parameters)))",message="postgresql.logging and postgresql.parameters both set log_min_duration_statement, log_lock_waits or deadlock_timeout: set each in one place only (logging.slowStatementThreshold, logging.lockWaits, logging.lockWaitThreshold)"
type PostgreSQLSpec struct {
	// Parameters are postgresql.conf settings. Tusk owns the settings that
	// keep Services, replication, failover, archiving, TLS and logging
	// working (port, listen_addresses, data_directory, archive_command,
	// primary_conninfo, ssl, ...) and refuses them here.
	// +kubebuilder:validation:MaxProperties=128
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z_][a-z0-9_]*([.][a-z_][a-z0-9_]*)?$'))",message="parameter names are PostgreSQL setting names in lowercase: letters, digits, '_' and one '.' (for extension settings)"
	// +kubebuilder:validation:XValidation:rule="['listen_addresses', 'port', 'unix_socket_directories', 'data_directory', 'config_file', 'hba_file', 'ident_file', 'external_pid_file', 'archive_mode', 'archive_command', 'archive_library', 'archive_timeout', 'restore_command', 'archive_cleanup_command', 'recovery_end_command', 'primary_conninfo', 'primary_slot_name', 'promote_trigger_file', 'recovery_target', 'recovery_target_lsn', 'recovery_target_name', 'recovery_target_time', 'recovery_target_xid', 'recovery_target_inclusive', 'recovery_target_timeline', 'recovery_target_action', 'synchronous_standby_names', 'ssl', 'ssl_cert_file', 'ssl_key_file', 'ssl_ca_file', 'ssl_crl_file', 'cluster_name', 'hot_standby', 'logging_collector', 'log_destination', 'log_directory', 'log_filename'].all(p, !(p in self))",messageExpression="'parameter ' + ['listen_addresses', 'port', 'unix_socket_directories', 'data_directory', 'config_file', 'hba_file', 'ident_file', 'external_pid_file', 'archive_mode', 'archive_command', 'archive_library', 'archive_timeout', 'restore_command', 'archive_cleanup_command', 'recovery_end_command', 'primary_conninfo', 'primary_slot_name', 'promote_trigger_file', 'recovery_target', 'recovery_target_lsn', 'recovery_target_name', 'recovery_target_time', 'recovery_target_xid', 'recovery_target_inclusive', 'recovery_target_timeline', 'recovery_target_action', 'synchronous_standby_names', 'ssl', 'ssl_cert_file', 'ssl_key_file', 'ssl_ca_file', 'ssl_crl_file', 'cluster_name', 'hot_standby', 'logging_collector', 'log_destination', 'log_directory', 'log_filename'].filter(p, p in self)[0] + ' is managed by Tusk and cannot be set: Tusk sets it itself to keep Services, replication, failover, archiving, TLS and logging working (synchronous replication and archiving are configured with spec.postgresql.synchronous and spec.backup)'"
	// +kubebuilder:validation:XValidation:rule="!('wal_level' in self) || self['wal_level'] in ['replica', 'logical']",message="wal_level must be replica or logical: streaming replicas and backups need at least replica"
	// +optional
	Parameters map[string]ParameterValue `json:"parameters,omitempty"`

	// Synchronous configures synchronous replication, which is how a commit
	// acknowledged to a client survives the loss of the primary.
	// +kubebuilder:default={}
	// +optional
	Synchronous SynchronousSpec `json:"synchronous,omitempty"`

	// Logging says what PostgreSQL logs besides errors: slow statements and
	// lock waits. PostgreSQL's log reaches each instance's container log as
	// JSON records beside the instance manager's (docs/monitoring.md#logs).
	// +optional
	Logging *LoggingSpec `json:"logging,omitempty"`
}

// LoggingSpec says what PostgreSQL logs besides errors. A field left unset
// keeps PostgreSQL's default (or what postgresql.parameters sets).
type LoggingSpec struct {
	// SlowStatementThreshold logs every statement that runs this long or
	// longer, with its duration and text (log_min_duration_statement), in
	// whole milliseconds; 0s logs every statement. Unset, no statement is
	// logged for its duration.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('24h')",message="postgresql.logging.slowStatementThreshold must be a duration from 0s (every statement) to 24h, such as 500ms or 2s"
	// +optional
	SlowStatementThreshold *metav1.Duration `json:"slowStatementThreshold,omitempty"`

	// LockWaits logs a session that has waited longer than
	// lockWaitThreshold for a lock, with the sessions that hold it
	// (log_lock_waits), and a replica's replay that has waited as long for
	// queries in its way (log_recovery_conflict_waits, PostgreSQL 14 and
	// later). Unset: PostgreSQL's default (off before PostgreSQL 18).
	// +optional
	LockWaits *bool `json:"lockWaits,omitempty"`

	// LockWaitThreshold is how long a lock wait lasts before it is logged
	// (with lockWaits) and checked for a deadlock (deadlock_timeout), in
	// whole milliseconds. Unset: PostgreSQL's 1s. Lower values find
	// deadlocks sooner at the cost of more deadlock checks.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1ms') && duration(self) <= duration('1h')",message="postgresql.logging.lockWaitThreshold must be a duration from 1ms to 1h, such as 200ms or 1s"
	// +optional
	LockWaitThreshold *metav1.Duration `json:"lockWaitThreshold,omitempty"`
}

// SynchronousMode says whether commits wait for standbys.
// +kubebuilder:validation:Enum=off;quorum
type SynchronousMode string

const (
	// SynchronousOff acknowledges commits as soon as the primary has them:
	// a failover can lose the most recent acknowledged commits.
	SynchronousOff SynchronousMode = "off"
	// SynchronousQuorum acknowledges a commit once `number` standbys, any
	// of them, have it on disk.
	SynchronousQuorum SynchronousMode = "quorum"
)

// StandbyShortage says what a primary does when fewer standbys are connected
// than the synchronous quorum needs.
// +kubebuilder:validation:Enum=degrade;block
type StandbyShortage string

const (
	// StandbyShortageDegrade keeps accepting writes asynchronously until
	// enough standbys are back; status says the cluster is degraded, and
	// failover never promotes a standby outside the last known quorum.
	StandbyShortageDegrade StandbyShortage = "degrade"
	// StandbyShortageBlock makes commits wait until enough standbys are
	// back: no write is ever acknowledged by the primary alone.
	StandbyShortageBlock StandbyShortage = "block"
)

// SynchronousSpec configures synchronous replication.
type SynchronousSpec struct {
	// Mode is off (asynchronous) or quorum (ANY number of the standbys).
	// Tusk is durable by default: quorum with one standby.
	// +kubebuilder:default=quorum
	// +optional
	Mode SynchronousMode `json:"mode,omitempty"`

	// Number is how many standbys must confirm each commit in quorum mode.
	// It must be less than instances.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=15
	// +optional
	Number int32 `json:"number,omitempty"`

	// WhenTooFewStandbys says what the primary does while fewer than number
	// standbys are connected: degrade (keep writing, asynchronously) or
	// block (commits wait).
	// +kubebuilder:default=degrade
	// +optional
	WhenTooFewStandbys StandbyShortage `json:"whenTooFewStandbys,omitempty"`
}

// BootstrapSpec says how the cluster's data first comes into being. Exactly
// one method is set.
// +kubebuilder:validation:XValidation:rule="[has(self.initdb), has(self.recovery), has(self.clone)].filter(x, x).size() == 1",message="bootstrap needs exactly one of initdb, recovery or clone"
type BootstrapSpec struct {
	// InitDB creates a new, empty database cluster.
	// +optional
	InitDB *InitDBSpec `json:"initdb,omitempty"`

	// Recovery restores the cluster from a base backup and archived WAL,
	// optionally to a point in time.
	// +optional
	Recovery *RecoverySpec `json:"recovery,omitempty"`

	// Clone copies a running PostgresCluster of the same namespace.
	// +optional
	Clone *CloneSpec `json:"clone,omitempty"`
}

// InitDBSpec describes a new database cluster.
// +kubebuilder:validation:XValidation:rule="!has(self.database) || !(self.database in ['postgres', 'template0', 'template1'])",message="bootstrap.initdb.database must be an application database, not postgres, template0 or template1"
// +kubebuilder:validation:XValidation:rule="!has(self.owner) || (self.owner != 'postgres' && !self.owner.startsWith('pg_') && !self.owner.startsWith('tusk_'))",message="bootstrap.initdb.owner must be an ordinary role: postgres, pg_* and tusk_* are reserved"
type InitDBSpec struct {
	// Database is the application database to create.
	// +kubebuilder:default=app
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]{0,62}$`
	// +optional
	Database string `json:"database,omitempty"`

	// Owner is the role that owns the application database; the app Secret
	// holds its credentials.
	// +kubebuilder:default=app
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]{0,62}$`
	// +optional
	Owner string `json:"owner,omitempty"`

	// Secret names an existing Secret (keys username, password) with the
	// owner's credentials. Tusk generates a strong password when unset.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.name.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$') && size(self.name) <= 253",message="must name a Secret of the namespace: a lowercase DNS subdomain name"
	Secret *corev1.LocalObjectReference `json:"secret,omitempty"`

	// Import copies databases and roles from an existing PostgreSQL
	// server (major 12 or later, anywhere on the network) into the new
	// cluster before it first serves: pg_dump and pg_restore of each
	// named database, with the roles they need. The source is only read.
	// +optional
	Import *ImportSpec `json:"import,omitempty"`
}

// ImportSpec names the server to import from and what to take.
type ImportSpec struct {
	// Source is the server to import from.
	Source ImportSource `json:"source"`

	// Databases are the source's databases to copy, each into a database
	// of the same name (created with the source's owner and encoding; the
	// application database, when named, is filled).
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.all(d, !(d in ['postgres', 'template0', 'template1']))",message="bootstrap.initdb.import.databases lists application databases: postgres, template0 and template1 are not imported"
	// +kubebuilder:validation:XValidation:rule="self.all(d, !d.matches('[\\x00-\\x1f\\x7f]'))",message="bootstrap.initdb.import.databases: a database name has no control character (a line break, a tab)"
	Databases []string `json:"databases"`

	// Method is dump (default), a one-time copy of the data, or logical:
	// the schema is copied, then each database subscribes to the source's
	// publication and stays in step with it, under writes, until the
	// annotation tusk.dev/import-cutover asks for the cutover (the source
	// made read-only, the last changes applied, sequences copied, the
	// subscriptions dropped). The source needs wal_level=logical.
	// +kubebuilder:default=dump
	// +kubebuilder:validation:Enum=dump;logical
	// +optional
	Method string `json:"method,omitempty"`

	// Publication is the source's publication, in each imported database,
	// a logical import subscribes to: FOR ALL TABLES, so that every table
	// is copied and followed.
	// +kubebuilder:default=tusk_import
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_$-]{0,62}$`
	// +optional
	Publication string `json:"publication,omitempty"`
}

// ImportPhase is where a logical import is.
type ImportPhase string

const (
	// ImportReplicating says the subscriptions follow the source.
	ImportReplicating ImportPhase = "Replicating"
	// ImportCuttingOver says the source is read-only and the last changes are
	// being applied.
	ImportCuttingOver ImportPhase = "CuttingOver"
	// ImportCutOver says the cutover is done; the cluster no longer follows the source.
	ImportCutOver ImportPhase = "CutOver"
	// ImportCutoverFailed says the cutover stopped; the message says why,
	// and the annotation's next value tries again.
	ImportCutoverFailed ImportPhase = "CutoverFailed"
)

// ImportStatus is a logical import's state, as the primary reports it.
type ImportStatus struct {
	// Phase is Replicating, CuttingOver, CutOver or CutoverFailed.
	Phase ImportPhase `json:"phase"`
	// Message says what the import does or why the cutover failed.
	// +optional
	Message string `json:"message,omitempty"`
	// Cutover is the value of the tusk.dev/import-cutover annotation the
	// last cutover ran for.
	// +optional
	Cutover string `json:"cutover,omitempty"`
	// WriteGap is how long the cutover kept writes out: from the source
	// turning read-only to the cluster holding every change and sequence.
	// +optional
	WriteGap *metav1.Duration `json:"writeGap,omitempty"`
}

// ImportSource is how the new primary reaches the source server.
// +kubebuilder:validation:XValidation:rule="has(self.host) != has(self.cluster)",message="bootstrap.initdb.import.source needs exactly one of host (a server anywhere) or cluster (a Tusk cluster of this namespace)"
// +kubebuilder:validation:XValidation:rule="!(self.sslMode in ['verify-ca', 'verify-full']) || has(self.caSecret) || has(self.cluster)",message="bootstrap.initdb.import.source.caSecret is required with sslMode verify-ca or verify-full: the CA that signed the source server's certificate (or set sslMode require to encrypt without verifying, or disable)"
type ImportSource struct {
	// Host is the source server's DNS name or IP address.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Host string `json:"host,omitempty"`

	// Cluster names a Tusk cluster of this namespace as the source, in
	// place of host: the import connects to its -rw Service and verifies
	// its certificate against its CA (the <cluster>-ca ConfigMap) unless
	// caSecret is set. After a logical import's cutover, that cluster's
	// -rw, -ro and -r Services send their clients to this cluster, so
	// applications move without changing their connection string; this
	// cluster's certificate also covers those Services' names.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Cluster string `json:"cluster,omitempty"`

	// Port is the source server's port.
	// +kubebuilder:default=5432
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`

	// User is the role the import logs in as. It must be able to read
	// every imported database; roles' passwords are copied only when it
	// is a superuser (others cannot read them).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	User string `json:"user"`

	// PasswordSecret is the key of a Secret of this namespace holding the
	// user's password.
	PasswordSecret corev1.SecretKeySelector `json:"passwordSecret"`

	// Database is the source database the import connects to first, to
	// read the roles and the databases' owners.
	// +kubebuilder:default=postgres
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Database string `json:"database,omitempty"`

	// SSLMode is libpq's sslmode towards the source: verify-full
	// (default: encrypted, and the server's certificate must match the
	// host and be signed by caSecret's CA), verify-ca, require (encrypted,
	// not verified) or disable.
	// +kubebuilder:default=verify-full
	// +kubebuilder:validation:Enum=disable;require;verify-ca;verify-full
	// +optional
	SSLMode string `json:"sslMode,omitempty"`

	// CASecret is the key of a Secret of this namespace holding the CA
	// certificate (PEM) the source server's certificate is verified
	// against.
	// +optional
	CASecret *corev1.SecretKeySelector `json:"caSecret,omitempty"`
}

// RecoverySpec restores a cluster from a backup. Exactly one of backup and
// source is set.
// +kubebuilder:validation:XValidation:rule="has(self.backup) != has(self.source)",message="bootstrap.recovery needs exactly one of backup (a PostgresBackup name) or source (an object store location)"
// +kubebuilder:validation:XValidation:rule="!has(self.source) || has(self.source.path)",message="bootstrap.recovery.source.path is required: the location's path in the bucket (<namespace>/<source cluster> when its spec.backup.objectStore.path was unset)"
type RecoverySpec struct {
	// Backup is the name of a completed PostgresBackup in this namespace.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.name.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$') && size(self.name) <= 253",message="must name a PostgresBackup of the namespace"
	Backup *corev1.LocalObjectReference `json:"backup,omitempty"`

	// Source is an object store location that holds another cluster's base
	// backups and WAL archive; it works even when that cluster is gone. The
	// newest backup there that ended before the target is restored. Its
	// path is required.
	// +optional
	Source *ObjectStoreSpec `json:"source,omitempty"`

	// Target is the point in time to recover to; the end of the archive when
	// unset.
	// +optional
	Target *RecoveryTarget `json:"target,omitempty"`
}

// RecoveryTarget is a point in the WAL history. At most one field is set.
// +kubebuilder:validation:XValidation:rule="[has(self.time), has(self.lsn), has(self.name)].filter(x, x).size() <= 1",message="a recovery target is one of time, lsn or name, not several"
type RecoveryTarget struct {
	// Time recovers up to this time (RFC 3339), inclusive.
	// +kubebuilder:validation:Format=date-time
	// +optional
	Time *metav1.Time `json:"time,omitempty"`

	// LSN recovers up to this WAL location, such as 0/3000060.
	// +kubebuilder:validation:Pattern=`^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$`
	// +optional
	LSN string `json:"lsn,omitempty"`

	// Name recovers up to a restore point made with pg_create_restore_point.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Name string `json:"name,omitempty"`
}

// CloneSpec copies another cluster.
type CloneSpec struct {
	// Cluster is the name of a running PostgresCluster in this namespace;
	// its data is copied with pg_basebackup over TLS.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=50
	Cluster string `json:"cluster"`
}

// BackupTarget says which instance base backups are taken from.
// +kubebuilder:validation:Enum=prefer-replica;primary
type BackupTarget string

const (
	// BackupTargetPreferReplica takes backups from a healthy replica when
	// there is one, sparing the primary the I/O.
	BackupTargetPreferReplica BackupTarget = "prefer-replica"
	// BackupTargetPrimary always takes backups from the primary.
	BackupTargetPrimary BackupTarget = "primary"
)

// BackupSpec configures backups of a cluster.
type BackupSpec struct {
	// ObjectStore is where WAL and base backups go.
	ObjectStore ObjectStoreSpec `json:"objectStore"`

	// Schedule takes base backups on a cron schedule ("minute hour day
	// month weekday", or @daily, @hourly, ...). No scheduled backups when
	// unset; WAL is archived continuously either way.
	// +kubebuilder:validation:Pattern=`^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+\s+\S+\s+\S+\s+\S+\s+\S+)$`
	// +optional
	Schedule string `json:"schedule,omitempty"`

	// Retention keeps base backups (and the WAL they need) for this long,
	// in days or weeks, such as 7d or 4w. Backups are kept forever when
	// unset.
	// +kubebuilder:validation:Pattern=`^[1-9][0-9]*[dw]$`
	// +optional
	Retention string `json:"retention,omitempty"`

	// Target says which instance base backups are taken from.
	// +kubebuilder:default=prefer-replica
	// +optional
	Target BackupTarget `json:"target,omitempty"`
}

// ObjectStoreSpec is a location in an S3-compatible object store.
type ObjectStoreSpec struct {
	// Endpoint is the URL of the S3 API, such as https://s3.eu-west-1.amazonaws.com.
	// +kubebuilder:validation:Pattern=`^https?://[^\s/]+(/.*)?$`
	Endpoint string `json:"endpoint"`

	// Bucket is the name of the bucket.
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`
	Bucket string `json:"bucket"`

	// Path is the key prefix inside the bucket; for a cluster's archive,
	// <namespace>/<cluster> when unset (two clusters of one name in two
	// namespaces never share a location).
	// +kubebuilder:validation:Pattern=`^[^/].*$`
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)[.][.]?(/|$)') && !self.matches('[\\x00-\\x1f]')",message="path is a key prefix: no '.' or '..' segments, no control characters"
	// +optional
	Path string `json:"path,omitempty"`

	// Region is the S3 region, when the store needs one.
	// +optional
	Region string `json:"region,omitempty"`

	// CredentialsSecret names the Secret with the access key pair.
	CredentialsSecret S3CredentialsSecret `json:"credentialsSecret"`

	// CASecret names a Secret key with the PEM CA bundle that signed the
	// endpoint's certificate, for stores with a private CA.
	// +optional
	CASecret *corev1.SecretKeySelector `json:"caSecret,omitempty"`
}

// S3CredentialsSecret names a Secret holding an S3 access key pair.
type S3CredentialsSecret struct {
	// Name is the name of the Secret in the cluster's namespace.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// AccessKeyIDKey is the Secret key holding the access key ID.
	// +kubebuilder:default=ACCESS_KEY_ID
	// +optional
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +kubebuilder:validation:MaxLength=253
	AccessKeyIDKey string `json:"accessKeyIDKey,omitempty"`

	// SecretAccessKeyKey is the Secret key holding the secret access key.
	// +kubebuilder:default=SECRET_ACCESS_KEY
	// +optional
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +kubebuilder:validation:MaxLength=253
	SecretAccessKeyKey string `json:"secretAccessKeyKey,omitempty"`
}

// UpgradeSpec says how a major version upgrade runs.
type UpgradeSpec struct {
	// Mode is how pg_upgrade carries the data files into the new major's
	// data directory: link (hard links: fast, no extra space; the old
	// directory stays usable until the new server is committed to), copy
	// (as much free space again as the data; the old directory is never
	// touched) or clone (copy-on-write, on filesystems that have it).
	// +kubebuilder:validation:Enum=link;copy;clone
	// +kubebuilder:default=link
	// +optional
	Mode string `json:"mode,omitempty"`
}

// MajorUpgradePhase is how far a major upgrade is.
// +kubebuilder:validation:Enum=BackingUp;StoppingReplicas;Upgrading;RollingBack;CloningReplicas;Succeeded;Failed
type MajorUpgradePhase string

// The phases of a major upgrade.
const (
	// MajorUpgradeBackingUp: with spec.backup, a PostgresBackup is taken
	// first (status.majorUpgrade.backup): after the new server's first
	// write, it is the way back. The cluster serves meanwhile.
	MajorUpgradeBackingUp MajorUpgradePhase = "BackingUp"
	// MajorUpgradeStoppingReplicas: the replicas' pods are removed (their
	// volumes stay until the upgrade is committed).
	MajorUpgradeStoppingReplicas MajorUpgradePhase = "StoppingReplicas"
	// MajorUpgradeUpgrading: the primary's pod runs the new image, which
	// upgrades its data directory with pg_upgrade before starting.
	MajorUpgradeUpgrading MajorUpgradePhase = "Upgrading"
	// MajorUpgradeRollingBack: the upgrade failed before the new server
	// took a write; the primary goes back to the old image on its old,
	// untouched data directory.
	MajorUpgradeRollingBack MajorUpgradePhase = "RollingBack"
	// MajorUpgradeCloningReplicas: the primary runs the new major; the
	// replicas' old volumes are replaced by copies of it.
	MajorUpgradeCloningReplicas MajorUpgradePhase = "CloningReplicas"
	// MajorUpgradeSucceeded: done.
	MajorUpgradeSucceeded MajorUpgradePhase = "Succeeded"
	// MajorUpgradeFailed: rolled back; the cluster runs the old image
	// until spec.image changes again.
	MajorUpgradeFailed MajorUpgradePhase = "Failed"
)

// MajorUpgradeStatus is the current or last major upgrade.
type MajorUpgradeStatus struct {
	// Attempt names this attempt, for the instance manager.
	Attempt string `json:"attempt"`
	// FromImage is the image before the upgrade.
	FromImage string `json:"fromImage"`
	// ToImage is the image after it (spec.image when it started).
	ToImage string `json:"toImage"`
	// FromMajor is the PostgreSQL major version before the upgrade.
	FromMajor int32 `json:"fromMajor"`
	// ToMajor is the PostgreSQL major version after it.
	ToMajor int32 `json:"toMajor"`
	// Mode is pg_upgrade's transfer mode for this attempt.
	Mode string `json:"mode,omitempty"`
	// Phase is how far it is.
	Phase MajorUpgradePhase `json:"phase"`
	// Message says, for humans, what it does or why it failed.
	// +optional
	Message string `json:"message,omitempty"`
	// Backup is the PostgresBackup taken before the upgrade, with
	// spec.backup; it stays in the old system's location.
	// +optional
	Backup string `json:"backup,omitempty"`
	// PreviousArchiveSubdirectory is status.archiveSubdirectory before
	// this upgrade, put back by a rollback.
	// +optional
	PreviousArchiveSubdirectory string `json:"previousArchiveSubdirectory,omitempty"`
	// StartedAt is when the upgrade started.
	StartedAt metav1.Time `json:"startedAt"`
	// FinishedAt is when it succeeded or failed.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// PoolerPauseStatus is a pause of a cluster's rw poolers: their clients'
// transactions held in PgBouncer from before the old primary's step-down
// until the new primary answered.
type PoolerPauseStatus struct {
	// Time is when the pause was asked for.
	Time metav1.Time `json:"time"`
	// HeldMilliseconds is how long the clients were held: from the pause
	// to the resume.
	HeldMilliseconds int64 `json:"heldMilliseconds"`
	// Pods is how many pooler pods were paused.
	Pods int32 `json:"pods"`
	// Failures name the pods that could not be paused (their clients saw
	// what a client without a pooler sees) or resumed (each resumes by
	// itself 30 s after its pause), with why.
	// +optional
	Failures []string `json:"failures,omitempty"`
}

// PostgresClusterStatus is what Tusk last observed of the cluster.
type PostgresClusterStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is a one-word summary for humans; automation should read
	// conditions instead.
	// +optional
	Phase ClusterPhase `json:"phase,omitempty"`

	// Conditions are the cluster's standard conditions: Ready, Progressing,
	// Degraded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// CurrentPrimary is the instance that is primary now.
	// +optional
	CurrentPrimary string `json:"currentPrimary,omitempty"`

	// TargetPrimary is the instance Tusk wants to be primary; it differs
	// from currentPrimary while a failover or switchover is under way.
	// +optional
	TargetPrimary string `json:"targetPrimary,omitempty"`

	// ReadyInstances is the number of instances ready to serve.
	// +optional
	ReadyInstances int32 `json:"readyInstances,omitempty"`

	// Selector is the label selector of the cluster's pods, for the scale
	// subresource.
	// +optional
	Selector string `json:"selector,omitempty"`

	// LastInstanceSerial is the serial number of the newest instance;
	// instance names (<cluster>-<serial>) are never reused.
	// +optional
	LastInstanceSerial int32 `json:"lastInstanceSerial,omitempty"`

	// LastPoolerPause is the last pause of the cluster's rw poolers (pool
	// mode transaction) across a switchover or a handover.
	// +optional
	LastPoolerPause *PoolerPauseStatus `json:"lastPoolerPause,omitempty"`

	// PostgresMajor is the PostgreSQL major version of the cluster's data,
	// as its primary reports it.
	// +optional
	PostgresMajor int32 `json:"postgresMajor,omitempty"`

	// Image is the last spec.image of the data's major version: what the
	// instances run while an upgrade to a newer spec.image waits to start.
	// +optional
	Image string `json:"image,omitempty"`

	// MajorUpgrade is the current or last major version upgrade.
	// +optional
	MajorUpgrade *MajorUpgradeStatus `json:"majorUpgrade,omitempty"`

	// Import is a logical import's state (bootstrap.initdb.import with
	// method logical).
	// +optional
	Import *ImportStatus `json:"import,omitempty"`

	// ServedBy names the cluster this cluster's -rw, -ro and -r Services
	// send clients to since that cluster's logical import from this one
	// was cut over (bootstrap.initdb.import.source.cluster); empty while
	// they select this cluster's own instances.
	// +optional
	ServedBy string `json:"servedBy,omitempty"`

	// ArchiveSubdirectory is where, under the backup location, the
	// cluster's WAL and backups go since its last major upgrade: pg_upgrade
	// makes a new database system, which needs a location of its own; the
	// backups from before stay where they were, restorable.
	// +optional
	ArchiveSubdirectory string `json:"archiveSubdirectory,omitempty"`

	// BackupLocation is the object-store path (spec.backup.objectStore.path,
	// or its default) the operator accepted for this cluster's WAL and
	// backups. A path outside the cluster's namespace is accepted only when
	// it was already in use before the operator checked paths, or when the
	// operator allows any path (--object-store-paths=any).
	// +optional
	BackupLocation string `json:"backupLocation,omitempty"`

	// Instances is the last report of each instance. An instance that does
	// not answer keeps the role, timeline and LSN it last reported: after
	// an outage, failover never promotes an instance behind one of them.
	// +listType=map
	// +listMapKey=name
	// +optional
	Instances []InstanceStatus `json:"instances,omitempty"`

	// SynchronousQuorum is the quorum of synchronous standbys the primary
	// was last confirmed to use, or, while a change reaches the primary, a
	// quorum at least as strict as both the old and the new. Failover
	// promotes only one of these standbys, and only when so many of them
	// answer that one surely has every acknowledged commit. Absent while
	// replication is asynchronous.
	// +optional
	SynchronousQuorum *QuorumStatus `json:"synchronousQuorum,omitempty"`

	// SystemIdentifier is the database system identifier of the cluster's
	// data (pg_controldata), as its primary last reported it: every
	// instance, and a cluster recovered or cloned from its backups, share
	// it. Retention prunes only an object-store location whose marker names
	// it.
	// +optional
	SystemIdentifier string `json:"systemIdentifier,omitempty"`

	// Archive is the health of continuous WAL archiving, as the primary
	// last reported it (pg_stat_archiver). Absent without spec.backup.
	// +optional
	Archive *ArchiveStatus `json:"archive,omitempty"`

	// Backup is the state of scheduled base backups and retention. Absent
	// without spec.backup.
	// +optional
	Backup *BackupStatus `json:"backup,omitempty"`
}

// BackupStatus is the state of a cluster's scheduled base backups and of
// their retention.
type BackupStatus struct {
	// LastScheduleTime is the scheduled time of the last backup the
	// schedule created (its name ends with this time, UTC).
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// LastScheduledBackup is the PostgresBackup the schedule created last.
	// +optional
	LastScheduledBackup string `json:"lastScheduledBackup,omitempty"`

	// NextScheduleTime is when the schedule takes the next backup.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`

	// FirstRecoverabilityPoint is the earliest time the cluster can be
	// recovered to from its object store: the end of the oldest base
	// backup retention keeps. Set by retention.
	// +optional
	FirstRecoverabilityPoint *metav1.Time `json:"firstRecoverabilityPoint,omitempty"`

	// LastRetentionTime is when retention last ran to the end.
	// +optional
	LastRetentionTime *metav1.Time `json:"lastRetentionTime,omitempty"`
}

// ArchiveStatus is the health of continuous WAL archiving.
type ArchiveStatus struct {
	// LastArchivedWAL is the last WAL file archived successfully.
	// +optional
	LastArchivedWAL string `json:"lastArchivedWAL,omitempty"`

	// LastArchivedTime is when it was archived.
	// +optional
	LastArchivedTime *metav1.Time `json:"lastArchivedTime,omitempty"`

	// LastFailedWAL is the last WAL file whose archiving failed.
	// +optional
	LastFailedWAL string `json:"lastFailedWAL,omitempty"`

	// LastFailedTime is when it failed.
	// +optional
	LastFailedTime *metav1.Time `json:"lastFailedTime,omitempty"`

	// Failing says the last attempt failed: the last failure is newer than
	// the last success. PostgreSQL keeps the WAL and retries; the
	// instance's log says why it fails.
	// +optional
	Failing bool `json:"failing,omitempty"`

	// Reason is why archiving fails, as the primary's instance manager
	// last saw it: the kind of object store failure (credentials, bucket,
	// endpoint, TLS) or the error (a location that holds another
	// database's archive).
	// +optional
	Reason string `json:"reason,omitempty"`
}

// QuorumStatus is a primary's synchronous_standby_names: ANY number
// of the standbys.
type QuorumStatus struct {
	// Number is how many of the standbys confirm each commit.
	Number int32 `json:"number"`

	// Standbys are the instances named.
	// +listType=set
	Standbys []string `json:"standbys"`
}

// ClusterPhase is a one-word summary of a cluster's state.
type ClusterPhase string

// The phases of a cluster.
const (
	ClusterPhasePending       ClusterPhase = "Pending"
	ClusterPhaseCreating      ClusterPhase = "Creating"
	ClusterPhaseHealthy       ClusterPhase = "Healthy"
	ClusterPhaseDegraded      ClusterPhase = "Degraded"
	ClusterPhaseScaling       ClusterPhase = "Scaling"
	ClusterPhaseUpdating      ClusterPhase = "Updating"
	ClusterPhaseSwitchingOver ClusterPhase = "SwitchingOver"
	ClusterPhaseFailingOver   ClusterPhase = "FailingOver"
	ClusterPhaseFailed        ClusterPhase = "Failed"
)

// InstanceRole is the replication role of an instance.
// +kubebuilder:validation:Enum=primary;replica;unknown
type InstanceRole string

// The roles an instance can have.
const (
	RolePrimary InstanceRole = "primary"
	RoleReplica InstanceRole = "replica"
	RoleUnknown InstanceRole = "unknown"
)

// InstanceStatus is the last report of one instance.
type InstanceStatus struct {
	// Name is the instance's name, which is also its pod's name.
	Name string `json:"name"`

	// Role is primary or replica, as the instance reports it.
	// +optional
	Role InstanceRole `json:"role,omitempty"`

	// Ready says whether the instance accepts connections (and, for a
	// replica, is streaming or replaying WAL).
	// +optional
	Ready bool `json:"ready,omitempty"`

	// LSN is the instance's current WAL location: written on a primary,
	// replayed on a replica.
	// +optional
	LSN string `json:"lsn,omitempty"`

	// LagBytes is how far a replica's replay is behind the primary.
	// +optional
	LagBytes *int64 `json:"lagBytes,omitempty"`

	// Timeline is the instance's PostgreSQL timeline.
	// +optional
	Timeline int32 `json:"timeline,omitempty"`

	// Phase is where the instance manager is: Bootstrapping, Starting,
	// Running, Rejoining, Stopped or Crashed; Unreachable when it did not
	// answer; Pending before its pod runs.
	// +optional
	Phase string `json:"phase,omitempty"`

	// Message says what is wrong with the instance, when something is.
	// +optional
	Message string `json:"message,omitempty"`
}

// PostgresCluster is a PostgreSQL primary with its streaming replicas,
// their Services, Secrets and backups, managed by Tusk.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.instances,statuspath=.status.readyInstances,selectorpath=.status.selector
// +kubebuilder:resource:shortName=pgc,categories=tusk
// +kubebuilder:printcolumn:name="Instances",type=integer,JSONPath=`.spec.instances`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyInstances`
// +kubebuilder:printcolumn:name="Primary",type=string,JSONPath=`.status.currentPrimary`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 50",message="a PostgresCluster name is at most 50 characters, so its instance Pods and Services have room for their suffixes"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="a PostgresCluster name starts with a lowercase letter and has only lowercase letters, digits and '-' (no dots): it names the cluster's Services, which must be DNS labels"
type PostgresCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired cluster.
	Spec PostgresClusterSpec `json:"spec"`

	// Status is the observed cluster.
	// +optional
	Status PostgresClusterStatus `json:"status,omitempty"`
}

// PostgresClusterList is a list of PostgresClusters.
//
// +kubebuilder:object:root=true
type PostgresClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PostgresCluster `json:"items"`
}

// AnnotationSwitchoverTo on a PostgresCluster asks for a switchover to the
// instance it names (kubectl tusk promote sets it). The operator checks
// that the instance is a ready replica streaming from the primary, records
// it as status.targetPrimary and removes the annotation; a request it
// refuses is removed too, with a SwitchoverRefused Event saying why. A
// request made while another switchover or a failover is under way waits
// for it. Status is written by the operator alone: this is how users ask.
const AnnotationSwitchoverTo = "tusk.dev/switchover-to"

// AnnotationFencedInstances on a PostgresCluster lists, as a JSON array,
// the instances to fence: their postgres is stopped and kept stopped, the
// pod and data kept for inspection, until the name is removed. "*" fences
// every instance. A fenced primary is not failed over: writes stop until
// it is unfenced. `kubectl tusk fence` and `unfence` edit it.
const AnnotationFencedInstances = "tusk.dev/fenced-instances"

// FenceAll in AnnotationFencedInstances fences every instance.
const FenceAll = "*"

// LabelCluster names the PostgresCluster an object belongs to: the operator
// puts it on every object it makes for a cluster (pods, volumes, Services,
// Secrets...), so `-l tusk.dev/cluster=<name>` selects them all.
const LabelCluster = "tusk.dev/cluster"

// HighAvailabilitySpec sets the timings of the primary's Lease
// (docs/high-availability.md). The primary renews the Lease every
// leaseRenewInterval; one that could not renew stops taking writes
// 1.5 renewal intervals before its Lease can expire, and a replica may be
// promoted once it has expired. A shorter Lease replaces a primary that is
// cut off sooner; it also fences a primary sooner when the API server or
// postgres is merely slow.
// +kubebuilder:validation:XValidation:rule="duration(self.leaseRenewInterval).getMilliseconds() * 2 <= duration(self.leaseDuration).getMilliseconds()",message="leaseRenewInterval must be at most half of leaseDuration: the primary stops taking writes 1.5 renewal intervals before its Lease can expire"
type HighAvailabilitySpec struct {
	// LeaseDuration is how long a renewal holds the primary Lease, in
	// whole seconds (2s to 60s). A primary that stopped renewing is
	// replaced no sooner than this after its last renewal.
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:XValidation:rule="duration(self).getMilliseconds() % 1000 == 0 && duration(self) >= duration('2s') && duration(self) <= duration('60s')",message="leaseDuration must be whole seconds from 2s to 60s"
	// +optional
	LeaseDuration metav1.Duration `json:"leaseDuration,omitempty"`

	// LeaseRenewInterval is how often the primary renews its Lease, and how
	// long each renewal may take (at least 500ms).
	// +kubebuilder:default="2s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('500ms')",message="leaseRenewInterval must be at least 500ms"
	// +optional
	LeaseRenewInterval metav1.Duration `json:"leaseRenewInterval,omitempty"`
}

// NetworkPolicySpec configures the NetworkPolicy of a cluster's pods. It is
// enforced only where the network plugin enforces NetworkPolicies; it
// admits traffic and never denies what another policy of yours admits.
type NetworkPolicySpec struct {
	// Disabled removes the policy: the cluster's pods then admit what your
	// own policies (or none) admit.
	// +optional
	Disabled bool `json:"disabled,omitempty"`

	// PostgresFrom are who may connect to PostgreSQL (5432) besides the
	// cluster's own instances (replication). Unset: anyone.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	PostgresFrom []networkingv1.NetworkPolicyPeer `json:"postgresFrom,omitempty"`

	// MetricsFrom are who may reach the instance managers' port besides
	// the operator, such as the Prometheus that scrapes /metrics.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	MetricsFrom []networkingv1.NetworkPolicyPeer `json:"metricsFrom,omitempty"`
}

// AnnotationRetryUpgrade on a PostgresCluster whose major upgrade failed
// starts it again when its value is the failed attempt's name
// (status.majorUpgrade.attempt): after fixing the cause outside the spec,
// such as a prepared transaction. A change of spec.image starts a new
// upgrade without it.
const AnnotationRetryUpgrade = "tusk.dev/retry-upgrade"

// AnnotationImportCutover on a PostgresCluster with a logical import asks
// for its cutover; a new value after a failed cutover tries again.
const AnnotationImportCutover = "tusk.dev/import-cutover"
