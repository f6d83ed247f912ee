package controller

import (
	"errors"
	"fmt"
)

// Condition types of a PostgresCluster. Ready is derived from the others.
const (
	// ConditionReady is true when the object does what its spec asks.
	ConditionReady = "Ready"
	// ConditionProgressing is true while Tusk is changing the cluster:
	// creating, scaling, rolling out, switching over.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is true while part of the cluster is not working.
	ConditionDegraded = "Degraded"
)

// Reasons of the conditions Tusk sets.
const (
	ReasonClusterNotFound      = "ClusterNotFound"
	ReasonBackupNotConfigured  = "BackupNotConfigured"
	ReasonBackupAlreadyRunning = "BackupAlreadyRunning"
	ReasonWaitingForInstance   = "WaitingForInstance"
	ReasonBackupStarted        = "BackupStarted"
	ReasonBackupRunning        = "BackupRunning"
	ReasonBackupCompleted      = "BackupCompleted"
	ReasonBackupFailed         = "BackupFailed"
	ReasonSecretInvalid        = "SecretInvalid"
	ReasonBackupSecretInvalid  = "BackupSecretInvalid"
	ReasonArchiveFailing       = "ArchiveFailing"
	ReasonCASecretInvalid      = "CASecretInvalid"
	ReasonClusterReady         = "ClusterReady"
	ReasonCreating             = "Creating"
	ReasonAdoptingVolumes      = "AdoptingVolumes"
	ReasonPrimaryNotReady      = "PrimaryNotReady"
	ReasonInstancesNotReady    = "InstancesNotReady"
	ReasonScaling              = "Scaling"
	ReasonRollingOut           = "RollingOut"
	ReasonRolloutHalted        = "RolloutHalted"
	ReasonSwitchingOver        = "SwitchingOver"
	ReasonUpToDate             = "UpToDate"
	ReasonAllInstancesReady    = "AllInstancesReady"
	ReasonSynchronousDegraded  = "SynchronousDegraded"
	ReasonVolumeResizeFailed   = "VolumeResizeFailed"
	ReasonSwitchoverRefused    = "SwitchoverRefused"
	ReasonFailingOver          = "FailingOver"
	ReasonFailedOver           = "FailedOver"
	ReasonFailoverBlocked      = "FailoverBlocked"
	ReasonDemoting             = "DemotingFormerPrimary"
	ReasonFenced               = "Fenced"
	ReasonUnfenced             = "Unfenced"
	ReasonFenceInvalid         = "FenceAnnotationInvalid"
	ReasonRewinding            = "RewindingReplica"
	ReasonInvalidParameters    = "InvalidParameters"
	ReasonObjectNotOwned       = "ObjectNotOwned"
	ReasonCAExpiring           = "CAExpiring"
)

// specError is a problem only the user can fix (a missing Secret, an
// unsupported bootstrap method): reported in conditions and Events, not
// retried fast.
type specError struct {
	reason, message string
}

func (e *specError) Error() string { return e.message }

func userError(reason, format string, args ...any) error {
	return &specError{reason: reason, message: fmt.Sprintf(format, args...)}
}

func asSpecError(err error) (*specError, bool) {
	var se *specError
	ok := errors.As(err, &se)
	return se, ok
}
