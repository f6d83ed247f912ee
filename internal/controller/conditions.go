package controller

// Condition types shared by Tusk's kinds.
const (
	// ConditionReady is true when the object does what its spec asks.
	ConditionReady = "Ready"
)

// Reasons of the conditions Tusk sets.
const (
	// ReasonLifecycleNotImplemented: this build records clusters but does
	// not create instances yet, so readiness cannot be known.
	ReasonLifecycleNotImplemented = "LifecycleNotImplemented"
	// ReasonBackupNotImplemented: this build records backups but does not
	// take them yet.
	ReasonBackupNotImplemented = "BackupNotImplemented"
)
