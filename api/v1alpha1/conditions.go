package v1alpha1

// Condition types and reasons are part of the API: the operator sets them,
// and clients (kubectl wait, the kubectl plugin, metrics, alerts, tests)
// read them by these names instead of repeating the strings.

// Condition types of a PostgresCluster. Ready is derived from Progressing
// and Degraded; ScheduledBackups and BackupRetention do not change it (a
// cluster whose backup schedule is wrong still serves).
const (
	// ConditionReady is true when the object does what its spec asks. A
	// PostgresBackup has it too: true once the backup completed.
	ConditionReady = "Ready"
	// ConditionProgressing is true while Tusk is changing the cluster:
	// creating, scaling, rolling out, switching or failing over.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is true while part of the cluster is not working.
	ConditionDegraded = "Degraded"
	// ConditionScheduledBackups is true while spec.backup.schedule is
	// valid and backups are created on it.
	ConditionScheduledBackups = "ScheduledBackups"
	// ConditionBackupRetention is true when retention last ran to the end.
	ConditionBackupRetention = "BackupRetention"
	// ConditionMajorUpgrade is true while a major version upgrade runs; it
	// stays false afterwards with the reason of how the last one ended
	// (MajorUpgradeFailed says why, on the old major).
	ConditionMajorUpgrade = "MajorUpgrade"
)

// Reasons of a PostgresCluster's MajorUpgrade condition (and Progressing,
// while one runs).
const (
	ReasonMajorUpgradeRunning   = "MajorUpgradeRunning"
	ReasonMajorUpgradeFailed    = "MajorUpgradeFailed"
	ReasonMajorUpgradeSucceeded = "MajorUpgradeSucceeded"
)

// Reasons of a PostgresCluster's Ready, Progressing and Degraded
// conditions. A spec error (Ready false, phase Failed) has the reason of
// the error: the *Invalid and ObjectNotOwned reasons.
const (
	ReasonClusterReady        = "ClusterReady"
	ReasonCreating            = "Creating"
	ReasonAdoptingVolumes     = "AdoptingVolumes"
	ReasonRecovering          = "Recovering"
	ReasonWaitingForBackup    = "WaitingForBackup"
	ReasonWaitingForSource    = "WaitingForSource"
	ReasonPrimaryNotReady     = "PrimaryNotReady"
	ReasonInstancesNotReady   = "InstancesNotReady"
	ReasonScaling             = "Scaling"
	ReasonRollingOut          = "RollingOut"
	ReasonRolloutHalted       = "RolloutHalted"
	ReasonSwitchingOver       = "SwitchingOver"
	ReasonFailingOver         = "FailingOver"
	ReasonFailoverBlocked     = "FailoverBlocked"
	ReasonUpToDate            = "UpToDate"
	ReasonAllInstancesReady   = "AllInstancesReady"
	ReasonSynchronousDegraded = "SynchronousDegraded"
	ReasonArchiveFailing      = "ArchiveFailing"

	ReasonSecretInvalid       = "SecretInvalid"
	ReasonBackupSecretInvalid = "BackupSecretInvalid"
	// ReasonBackupPathRefused: spec.backup.objectStore.path does not start
	// with the cluster's namespace.
	ReasonBackupPathRefused     = "BackupPathRefused"
	ReasonCASecretInvalid       = "CASecretInvalid"
	ReasonRecoverySourceInvalid = "RecoverySourceInvalid"
	ReasonCloneSourceInvalid    = "CloneSourceInvalid"
	ReasonImportSourceInvalid   = "ImportSourceInvalid"
	// ReasonImportSourceUnverified: an import from a server whose
	// certificate is not verified (a Warning Event).
	ReasonImportSourceUnverified = "ImportSourceUnverified"
	ReasonFenceInvalid           = "FenceAnnotationInvalid"
	ReasonInvalidParameters      = "InvalidParameters"
	ReasonObjectNotOwned         = "ObjectNotOwned"
)

// Reasons of a PostgresCluster's ScheduledBackups and BackupRetention
// conditions.
const (
	ReasonScheduled        = "Scheduled"
	ReasonScheduleInvalid  = "ScheduleInvalid"
	ReasonRetentionApplied = "RetentionApplied"
	ReasonRetentionInvalid = "RetentionInvalid"
	ReasonRetentionFailed  = "RetentionFailed"
	// ReasonRetentionRefused: the location is not proved to be the
	// cluster's own (its marker names another database system, or none),
	// so retention deletes nothing there.
	ReasonRetentionRefused = "RetentionRefused"
)

// Reasons of a PostgresBackup's Ready condition.
const (
	ReasonClusterNotFound      = "ClusterNotFound"
	ReasonBackupNotConfigured  = "BackupNotConfigured"
	ReasonBackupAlreadyRunning = "BackupAlreadyRunning"
	ReasonWaitingForInstance   = "WaitingForInstance"
	ReasonBackupRunning        = "BackupRunning"
	ReasonBackupCompleted      = "BackupCompleted"
	ReasonBackupFailed         = "BackupFailed"
)

// Reasons of a PostgresPooler's Ready condition; each refusal is also a
// Warning Event with its reason. ReasonClusterNotFound and
// ReasonObjectNotOwned are the pooler's too.
const (
	// ReasonPoolerReady: every pod the spec asks for is ready, and none of
	// an earlier spec is left.
	ReasonPoolerReady = "PoolerReady"
	// ReasonPodsNotReady: pods are starting, rolling or failing; the
	// message counts them.
	ReasonPodsNotReady = "PodsNotReady"
	// ReasonNoReplicas: type ro on a cluster of one instance, which has
	// no replica to send clients to.
	ReasonNoReplicas = "NoReplicas"
	// ReasonNameCollision: the pooler's name, or the name of one of its
	// objects, is a PostgresCluster's or one of its objects'.
	ReasonNameCollision = "NameCollision"
	// ReasonWaitingForCluster: the cluster has no certificates yet to
	// issue the pooler's from.
	ReasonWaitingForCluster = "WaitingForCluster"
	// ReasonPoolerCreated and ReasonPoolerUpdated are the Events of a
	// pooler's objects applied for a new generation of its spec.
	ReasonPoolerCreated = "Created"
	ReasonPoolerUpdated = "Updated"
)

// Reasons of Events only: something Tusk did or refused, told once. An
// Event about a condition's change (RollingOut, SwitchingOver,
// FailingOver, RetentionFailed...) carries the condition's reason.
const (
	ReasonBackupStarted      = "BackupStarted"
	ReasonBackupCreated      = "ScheduledBackupCreated"
	ReasonBackupsPruned      = "BackupsPruned"
	ReasonVolumeResizeFailed = "VolumeResizeFailed"
	ReasonSwitchoverRefused  = "SwitchoverRefused"
	ReasonFailedOver         = "FailedOver"
	ReasonDemoting           = "DemotingFormerPrimary"
	ReasonFenced             = "Fenced"
	ReasonUnfenced           = "Unfenced"
	ReasonRewinding          = "RewindingReplica"
	ReasonCAExpiring         = "CAExpiring"
	ReasonKeysMoved          = "KeysMoved"
	ReasonPausedPoolers      = "PausedPoolers"
	ReasonResumedPoolers     = "ResumedPoolers"
	ReasonCreatedInstance    = "CreatedInstance"
	ReasonRecreatedInstance  = "RecreatedInstance"
	ReasonRemovedInstance    = "RemovedInstance"
	ReasonRecloningInstance  = "RecloningInstance"
	ReasonRestarting         = "Restarting"
	ReasonResizingVolume     = "ResizingVolume"
	ReasonConfigRefused      = "ConfigurationRefused"
	ReasonSwitchedOver       = "SwitchedOver"
	ReasonSwitchoverAborted  = "SwitchoverAborted"
	ReasonAdoptedVolumes     = "AdoptedVolumes"
	ReasonKeptSecrets        = "KeptSecrets"
	ReasonDeletedVolumes     = "DeletedVolumes"
	// ReasonImportAbandoned: a cluster deleted before its logical
	// import's cutover dropped the import's slots on the source.
	ReasonImportAbandoned = "ImportAbandoned"
	// ReasonImportSlotsLeft: the slots of a deleted cluster's logical
	// import could not be dropped on the source; the Event names them.
	ReasonImportSlotsLeft = "ImportSlotsLeft"
)

// Condition types of the declarative SQL objects (PostgresRole,
// PostgresDatabase, PostgresPublication, PostgresSubscription). Ready is
// Applied, and for a subscription also not SlotLagging.
const (
	// ConditionApplied is true when the primary's catalogs matched the
	// spec at the last apply.
	ConditionApplied = "Applied"
	// ConditionSlotLagging is true while a subscription's slot on its Tusk
	// publisher holds back more WAL than spec.slotLagThreshold, or the
	// publisher lost WAL it needs.
	ConditionSlotLagging = "SlotLagging"
)

// Reasons of the declarative SQL objects' conditions; each change of
// Applied is also an Event with its reason.
const (
	// ReasonApplied: the catalogs match the spec.
	ReasonApplied = "Applied"
	// ReasonWaitingForPrimary: the cluster has no writable primary now
	// (creating, failing or switching over, fenced); Tusk retries.
	ReasonWaitingForPrimary = "WaitingForPrimary"
	// ReasonApplyRefused: the instance manager refused the spec as it
	// stands (a dependency missing, a drop that would lose objects...);
	// the message says why. Tusk retries, as the world may change.
	ReasonApplyRefused = "ApplyRefused"
	// ReasonApplyBusy: another session on the primary held the lock of
	// the applies for longer than an apply waits (the message names it);
	// Tusk tries again.
	ReasonApplyBusy = "ApplyBusy"
	// ReasonApplyFailed: applying failed for another reason.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonNameConflict: an older object of the same kind already manages
	// this name in the cluster.
	ReasonNameConflict = "NameConflict"
	// ReasonSourceInvalid: a Secret or cluster the spec names cannot be
	// used (missing, or without the keys it needs).
	ReasonSourceInvalid = "SourceInvalid"
	// ReasonSlotWithinLimit and ReasonSlotLagging are a subscription's
	// SlotLagging reasons; ReasonSlotUnknown when the publisher is not a
	// Tusk cluster, or did not answer.
	ReasonSlotWithinLimit = "SlotWithinLimit"
	ReasonSlotLagging     = "SlotLagging"
	ReasonSlotUnknown     = "SlotUnknown"
	// ReasonSQLChanged is the Event reason for an apply that changed
	// something; its message lists the changes.
	ReasonSQLChanged = "Changed"
)
