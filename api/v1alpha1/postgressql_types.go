package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Declarative SQL objects: a role, a database with its extensions and
// schemas, a publication and a subscription, each a Kubernetes object
// next to the PostgresCluster it belongs to. The primary's instance
// manager applies them over its local socket; the operator runs no SQL.

// Ensure says whether a PostgreSQL object should exist.
// +kubebuilder:validation:Enum=present;absent
type Ensure string

// The values of Ensure.
const (
	EnsurePresent Ensure = "present"
	EnsureAbsent  Ensure = "absent"
)

// SQLObjectStatus is what Tusk observed of one declarative SQL object.
type SQLObjectStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions are Applied (the primary's catalogs match the spec, as of
	// the last apply) and Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Exists says whether the object exists in PostgreSQL, as of the last
	// apply.
	// +optional
	Exists bool `json:"exists,omitempty"`

	// LastAppliedAt is when the last apply that changed something ran.
	// +optional
	LastAppliedAt *metav1.Time `json:"lastAppliedAt,omitempty"`

	// LastChanges say what that apply changed.
	// +optional
	LastChanges []string `json:"lastChanges,omitempty"`
}

// PostgresRoleSpec is one PostgreSQL role of a cluster. Roles are
// cluster-wide in PostgreSQL; the object lives in the cluster's
// namespace. Deleting the object leaves the role as it is: set ensure to
// absent to drop it.
// +kubebuilder:validation:XValidation:rule="self.cluster == oldSelf.cluster",message="spec.cluster cannot change: a role belongs to one cluster"
// +kubebuilder:validation:XValidation:rule="self.name == oldSelf.name",message="spec.name cannot change: renaming would drop one role and create another; create a new PostgresRole instead"
// +kubebuilder:validation:XValidation:rule="!has(self.reassignOwnedTo) || self.reassignOwnedTo != self.name",message="spec.reassignOwnedTo must name another role"
// +kubebuilder:validation:XValidation:rule="!has(self.inRoles) || !(self.name in self.inRoles)",message="spec.inRoles cannot name the role itself"
type PostgresRoleSpec struct {
	// Cluster is the PostgresCluster in this namespace the role is in.
	Cluster corev1.LocalObjectReference `json:"cluster"`

	// Name is the role's name in PostgreSQL. Tusk's own roles (postgres,
	// tusk_replication, tusk_monitor, tusk_probe, tusk_cert_login), every
	// name starting with tusk_ or tusk- (Tusk's, such as the operator's
	// certificate name tusk-operator) and PostgreSQL's (pg_*) cannot be
	// managed.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_$-]*$`
	// +kubebuilder:validation:XValidation:rule="self != 'postgres' && !self.startsWith('tusk_') && !self.startsWith('tusk-')",message="postgres and the names starting with tusk_ or tusk- are Tusk's own (tusk_replication, tusk_monitor, tusk_probe, tusk_cert_login, the operator's tusk-operator) and cannot be managed"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('pg_')",message="role names starting with pg_ are PostgreSQL's own"
	Name string `json:"name"`

	// Ensure is present (the default) or absent (drop the role).
	// +kubebuilder:default=present
	// +optional
	Ensure Ensure `json:"ensure,omitempty"`

	// Login lets the role log in.
	// +optional
	Login bool `json:"login,omitempty"`
	// Superuser makes the role a superuser.
	// +optional
	Superuser bool `json:"superuser,omitempty"`
	// CreateDB lets the role create databases.
	// +optional
	CreateDB bool `json:"createdb,omitempty"`
	// CreateRole lets the role create roles.
	// +optional
	CreateRole bool `json:"createrole,omitempty"`
	// Replication lets the role open replication connections (a logical
	// subscription's publisher role needs it).
	// +optional
	Replication bool `json:"replication,omitempty"`
	// BypassRLS makes the role bypass row-level security.
	// +optional
	BypassRLS bool `json:"bypassrls,omitempty"`
	// Inherit makes the role use the privileges of the roles it is a
	// member of; true when unset.
	// +optional
	Inherit *bool `json:"inherit,omitempty"`

	// ConnectionLimit is how many sessions the role may open at once; -1
	// (the default) is no limit.
	// +kubebuilder:validation:Minimum=-1
	// +optional
	ConnectionLimit *int32 `json:"connectionLimit,omitempty"`

	// ValidUntil is when the role's password stops working; never when
	// unset.
	// +optional
	ValidUntil *metav1.Time `json:"validUntil,omitempty"`

	// InRoles are the roles this role is a member of, exactly: a
	// membership not listed is revoked.
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +optional
	InRoles []string `json:"inRoles,omitempty"`

	// Parameters are the role's own settings (ALTER ROLE ... SET),
	// exactly: a setting not listed is reset.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Parameters map[string]string `json:"parameters,omitempty"`

	// PasswordSecret is a Secret in this namespace whose key "password" is
	// the role's password. Tusk stores only its SCRAM-SHA-256 verifier,
	// computed by the instance manager; changing the Secret changes the
	// password, with no restart. Unset leaves the password as it is.
	// +optional
	PasswordSecret *corev1.LocalObjectReference `json:"passwordSecret,omitempty"`

	// ClientCertificate gives the role a client certificate (its CN the
	// role's name) from the cluster's client CA, in the Secret
	// <object name>-client-tls (tls.crt, tls.key, and ca.crt to verify the
	// server), renewed before it ends. Over the network the role then logs
	// in with it and no longer with a password.
	// +optional
	ClientCertificate bool `json:"clientCertificate,omitempty"`

	// ReassignOwnedTo is the role that takes over what this role owns when
	// it is dropped (ensure: absent). Without it, dropping a role that
	// owns anything is refused, with what it owns.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	ReassignOwnedTo string `json:"reassignOwnedTo,omitempty"`
}

// PostgresRole is a PostgreSQL role of a PostgresCluster, applied by the
// cluster's primary.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pgrole,categories=tusk
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster.name`
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.spec.name`
// +kubebuilder:printcolumn:name="Ensure",type=string,JSONPath=`.spec.ensure`
// +kubebuilder:printcolumn:name="Applied",type=string,JSONPath=`.status.conditions[?(@.type=="Applied")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PostgresRole struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the role wanted.
	Spec PostgresRoleSpec `json:"spec"`

	// Status is the role as last applied.
	// +optional
	Status SQLObjectStatus `json:"status,omitempty"`
}

// PostgresRoleList is a list of PostgresRoles.
//
// +kubebuilder:object:root=true
type PostgresRoleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PostgresRole `json:"items"`
}

// DatabaseReclaimPolicy says what happens to a database when its
// PostgresDatabase is deleted.
// +kubebuilder:validation:Enum=retain;delete
type DatabaseReclaimPolicy string

// The values of DatabaseReclaimPolicy.
const (
	DatabaseReclaimRetain DatabaseReclaimPolicy = "retain"
	DatabaseReclaimDelete DatabaseReclaimPolicy = "delete"
)

// PostgresDatabaseSpec is one database of a cluster, with the extensions
// and schemas Tusk manages in it.
// +kubebuilder:validation:XValidation:rule="self.cluster == oldSelf.cluster",message="spec.cluster cannot change: a database belongs to one cluster"
// +kubebuilder:validation:XValidation:rule="self.name == oldSelf.name",message="spec.name cannot change: create a new PostgresDatabase instead"
// +kubebuilder:validation:XValidation:rule="has(self.encoding) == has(oldSelf.encoding) && (!has(self.encoding) || self.encoding == oldSelf.encoding)",message="spec.encoding applies at creation only and cannot change"
// +kubebuilder:validation:XValidation:rule="has(self.locale) == has(oldSelf.locale) && (!has(self.locale) || self.locale == oldSelf.locale)",message="spec.locale applies at creation only and cannot change"
// +kubebuilder:validation:XValidation:rule="has(self.template) == has(oldSelf.template) && (!has(self.template) || self.template == oldSelf.template)",message="spec.template applies at creation only and cannot change"
type PostgresDatabaseSpec struct {
	// Cluster is the PostgresCluster in this namespace the database is in.
	Cluster corev1.LocalObjectReference `json:"cluster"`

	// Name is the database's name in PostgreSQL; not postgres, template0
	// or template1.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_$-]*$`
	// +kubebuilder:validation:XValidation:rule="!(self in ['postgres', 'template0', 'template1'])",message="postgres, template0 and template1 are PostgreSQL's own databases and cannot be managed"
	Name string `json:"name"`

	// Owner is the role that owns the database; it must exist (a
	// PostgresRole, or the cluster's bootstrap owner).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Owner string `json:"owner"`

	// Ensure is present (the default) or absent (drop the database).
	// +kubebuilder:default=present
	// +optional
	Ensure Ensure `json:"ensure,omitempty"`

	// Encoding is the database's character set, at creation (UTF8 when
	// unset, as the cluster was initialised).
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Encoding string `json:"encoding,omitempty"`

	// Locale is the database's collation and character classification,
	// at creation (the template's when unset).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Locale string `json:"locale,omitempty"`

	// Template is the database copied at creation (template1 when unset).
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Template string `json:"template,omitempty"`

	// ConnectionLimit is how many sessions the database takes at once; -1
	// (the default) is no limit.
	// +kubebuilder:validation:Minimum=-1
	// +optional
	ConnectionLimit *int32 `json:"connectionLimit,omitempty"`

	// ReclaimPolicy is retain (the default: deleting the object leaves the
	// database) or delete (deleting the object drops the database).
	// +kubebuilder:default=retain
	// +optional
	ReclaimPolicy DatabaseReclaimPolicy `json:"reclaimPolicy,omitempty"`

	// ForceDrop ends the database's sessions when it is dropped. Without
	// it, a drop is refused while anyone is connected.
	// +optional
	ForceDrop bool `json:"forceDrop,omitempty"`

	// Extensions are the extensions Tusk manages in the database; others
	// are left alone.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Extensions []ExtensionSpec `json:"extensions,omitempty"`

	// Schemas are the schemas Tusk manages in the database; others are
	// left alone.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Schemas []SchemaSpec `json:"schemas,omitempty"`
}

// ExtensionSpec is one extension of a database. The image must have the
// extension's files; if not, the database's Applied condition says so.
type ExtensionSpec struct {
	// Name is the extension's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Ensure is present (the default) or absent (drop the extension).
	// +kubebuilder:default=present
	// +optional
	Ensure Ensure `json:"ensure,omitempty"`
	// Version is the extension's version; the default version at creation
	// when unset, and left as it is afterwards.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Version string `json:"version,omitempty"`
	// Schema is the schema the extension's objects are in; not a pg_
	// schema or information_schema, PostgreSQL's own.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('pg_') && self != 'information_schema'",message="an extension cannot go to a pg_ schema or information_schema: they are PostgreSQL's own"
	// +optional
	Schema string `json:"schema,omitempty"`
}

// SchemaSpec is one schema of a database.
type SchemaSpec struct {
	// Name is the schema's name; not public or a pg_ schema.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self != 'public' && !self.startsWith('pg_')",message="public and pg_ schemas cannot be managed"
	Name string `json:"name"`
	// Ensure is present (the default) or absent (drop the schema; refused
	// while it holds objects).
	// +kubebuilder:default=present
	// +optional
	Ensure Ensure `json:"ensure,omitempty"`
	// Owner is the schema's owner; the database's owner when unset.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Owner string `json:"owner,omitempty"`
}

// PostgresDatabase is a database of a PostgresCluster, applied by the
// cluster's primary.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pgdb,categories=tusk
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster.name`
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.name`
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=`.spec.owner`
// +kubebuilder:printcolumn:name="Applied",type=string,JSONPath=`.status.conditions[?(@.type=="Applied")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PostgresDatabase struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the database wanted.
	Spec PostgresDatabaseSpec `json:"spec"`

	// Status is the database as last applied.
	// +optional
	Status SQLObjectStatus `json:"status,omitempty"`
}

// PostgresDatabaseList is a list of PostgresDatabases.
//
// +kubebuilder:object:root=true
type PostgresDatabaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PostgresDatabase `json:"items"`
}

// PostgresPublicationSpec is one publication of a cluster's database.
// Deleting the object drops the publication (it holds no data).
// +kubebuilder:validation:XValidation:rule="self.cluster == oldSelf.cluster && self.name == oldSelf.name && self.database == oldSelf.database",message="spec.cluster, spec.name and spec.database cannot change: create a new PostgresPublication instead"
// +kubebuilder:validation:XValidation:rule="(has(self.allTables) && self.allTables) != (has(self.tables) && size(self.tables) > 0)",message="set either allTables or a list of tables, not both"
type PostgresPublicationSpec struct {
	// Cluster is the PostgresCluster in this namespace that publishes.
	Cluster corev1.LocalObjectReference `json:"cluster"`
	// Name is the publication's name in PostgreSQL.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_$-]*$`
	Name string `json:"name"`
	// Database is the database whose tables are published.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Database string `json:"database"`
	// AllTables publishes every table of the database, present and future.
	// +optional
	AllTables bool `json:"allTables,omitempty"`
	// Tables are the published tables, each "schema.table" or "table" (in
	// public), exactly.
	// +listType=set
	// +kubebuilder:validation:MaxItems=1024
	// +optional
	Tables []string `json:"tables,omitempty"`
}

// PostgresPublication is a logical replication publication of a
// PostgresCluster, applied by the cluster's primary.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pgpub,categories=tusk
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster.name`
// +kubebuilder:printcolumn:name="Publication",type=string,JSONPath=`.spec.name`
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.database`
// +kubebuilder:printcolumn:name="Applied",type=string,JSONPath=`.status.conditions[?(@.type=="Applied")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PostgresPublication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the publication wanted.
	Spec PostgresPublicationSpec `json:"spec"`

	// Status is the publication as last applied.
	// +optional
	Status SQLObjectStatus `json:"status,omitempty"`
}

// PostgresPublicationList is a list of PostgresPublications.
//
// +kubebuilder:object:root=true
type PostgresPublicationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PostgresPublication `json:"items"`
}

// SubscriptionSource is the publisher a subscription replicates from:
// another Tusk cluster in this namespace, or any PostgreSQL through a
// connection string.
// +kubebuilder:validation:XValidation:rule="has(self.cluster) != has(self.connectionSecret)",message="set either source.cluster or source.connectionSecret"
// +kubebuilder:validation:XValidation:rule="!has(self.cluster) || has(self.roleSecret)",message="source.cluster needs source.roleSecret: the publisher's role (with LOGIN and REPLICATION) that the subscription logs in as"
type SubscriptionSource struct {
	// Cluster is a PostgresCluster in this namespace. The subscription
	// connects to its read-write Service with verify-full TLS against
	// its CA.
	// +optional
	Cluster *corev1.LocalObjectReference `json:"cluster,omitempty"`
	// Database is the publisher's database; the subscriber's database
	// name when unset.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Database string `json:"database,omitempty"`
	// RoleSecret is a Secret with keys "username" and "password": the
	// publisher's role the subscription logs in as.
	// +optional
	RoleSecret *corev1.LocalObjectReference `json:"roleSecret,omitempty"`
	// ConnectionSecret is a key of a Secret holding a libpq connection
	// string to an external publisher, password included.
	// +optional
	ConnectionSecret *corev1.SecretKeySelector `json:"connectionSecret,omitempty"`
}

// PostgresSubscriptionSpec is one subscription of a cluster's database.
// Deleting the object drops the subscription and its slot on the
// publisher.
// +kubebuilder:validation:XValidation:rule="self.cluster == oldSelf.cluster && self.name == oldSelf.name && self.database == oldSelf.database",message="spec.cluster, spec.name and spec.database cannot change: create a new PostgresSubscription instead"
type PostgresSubscriptionSpec struct {
	// Cluster is the PostgresCluster in this namespace that subscribes.
	Cluster corev1.LocalObjectReference `json:"cluster"`
	// Name is the subscription's name in PostgreSQL, and its slot's name
	// on the publisher.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	Name string `json:"name"`
	// Database is the subscriber's database the rows are written to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Database string `json:"database"`
	// Publications are the publisher's publications subscribed to.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Publications []string `json:"publications"`
	// Source is the publisher.
	Source SubscriptionSource `json:"source"`
	// Enabled runs the subscription; true when unset.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// SlotLagThreshold is how much WAL the subscription's slot on a Tusk
	// publisher may hold back before the subscription's SlotLagging
	// condition turns true (default 1Gi), well before it fills pg_wal.
	// +optional
	SlotLagThreshold *resource.Quantity `json:"slotLagThreshold,omitempty"`
}

// PostgresSubscription is a logical replication subscription of a
// PostgresCluster, applied by the cluster's primary.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pgsub,categories=tusk
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster.name`
// +kubebuilder:printcolumn:name="Subscription",type=string,JSONPath=`.spec.name`
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.database`
// +kubebuilder:printcolumn:name="Applied",type=string,JSONPath=`.status.conditions[?(@.type=="Applied")].status`
// +kubebuilder:printcolumn:name="Slot lag",type=string,JSONPath=`.status.conditions[?(@.type=="SlotLagging")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PostgresSubscription struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the subscription wanted.
	Spec PostgresSubscriptionSpec `json:"spec"`

	// Status is the subscription as last applied.
	// +optional
	Status SQLObjectStatus `json:"status,omitempty"`
}

// PostgresSubscriptionList is a list of PostgresSubscriptions.
//
// +kubebuilder:object:root=true
type PostgresSubscriptionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PostgresSubscription `json:"items"`
}
