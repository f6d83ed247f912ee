package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PostgresBackupSpec says which cluster to back up. It cannot change: a
// different backup is a new PostgresBackup.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a PostgresBackup's spec cannot change; create a new PostgresBackup instead"
type PostgresBackupSpec struct {
	// Cluster is the PostgresCluster in this namespace to back up.
	Cluster corev1.LocalObjectReference `json:"cluster"`

	// Target overrides the cluster's spec.backup.target for this backup.
	// +optional
	Target BackupTarget `json:"target,omitempty"`
}

// BackupPhase is where a backup is in its life.
// +kubebuilder:validation:Enum=Pending;Running;Completed;Failed
type BackupPhase string

// The phases of a backup.
const (
	BackupPhasePending   BackupPhase = "Pending"
	BackupPhaseRunning   BackupPhase = "Running"
	BackupPhaseCompleted BackupPhase = "Completed"
	BackupPhaseFailed    BackupPhase = "Failed"
)

// PostgresBackupStatus is what Tusk observed of one base backup.
type PostgresBackupStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is Pending, Running, Completed or Failed.
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`

	// Conditions are the backup's standard conditions.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Instance is the instance the backup was taken from.
	// +optional
	Instance string `json:"instance,omitempty"`

	// StartedAt is when the backup began.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`

	// CompletedAt is when the backup finished, successfully or not.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`

	// BeginLSN is the WAL location the backup starts from; restoring it
	// needs the WAL from here on.
	// +optional
	BeginLSN string `json:"beginLSN,omitempty"`

	// EndLSN is the WAL location at which the backup is consistent; it can
	// be restored to any point after this.
	// +optional
	EndLSN string `json:"endLSN,omitempty"`

	// Timeline is the PostgreSQL timeline the backup was taken on.
	// +optional
	Timeline int32 `json:"timeline,omitempty"`

	// SizeBytes is the compressed size of the backup in the object store.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`

	// Location is the object store URL of the backup.
	// +optional
	Location string `json:"location,omitempty"`

	// ObjectStore is the cluster's object store as it was when the backup
	// was taken: where the backup and the WAL it needs live, and the Secrets
	// that reach them. A recovery from this backup reads it, so it works
	// after the source cluster is changed or deleted.
	// +optional
	ObjectStore *ObjectStoreSpec `json:"objectStore,omitempty"`

	// Error says why the backup failed.
	// +optional
	Error string `json:"error,omitempty"`
}

// PostgresBackup is one base backup of a PostgresCluster, taken on demand or
// by the cluster's backup schedule.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pgb,categories=tusk
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Begin LSN",type=string,JSONPath=`.status.beginLSN`,priority=1
// +kubebuilder:printcolumn:name="End LSN",type=string,JSONPath=`.status.endLSN`,priority=1
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.sizeBytes`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PostgresBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the backup asked for.
	Spec PostgresBackupSpec `json:"spec"`

	// Status is the backup as taken.
	// +optional
	Status PostgresBackupStatus `json:"status,omitempty"`
}

// PostgresBackupList is a list of PostgresBackups.
//
// +kubebuilder:object:root=true
type PostgresBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PostgresBackup `json:"items"`
}
