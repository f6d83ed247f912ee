package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PoolerType says which instances a pooler sends its clients to.
// +kubebuilder:validation:Enum=rw;ro
type PoolerType string

const (
	// PoolerTypeRW sends clients to the primary (the cluster's -rw
	// Service), and is paused across a switchover.
	PoolerTypeRW PoolerType = "rw"
	// PoolerTypeRO sends clients to the replicas (the -ro Service).
	PoolerTypeRO PoolerType = "ro"
)

// PoolMode says when PgBouncer gives a server connection back to the pool.
// +kubebuilder:validation:Enum=transaction;session
type PoolMode string

const (
	// PoolModeTransaction shares server connections between transactions:
	// many clients on few server connections, and a switchover waits for
	// transactions in flight only. Session state (SET, advisory locks,
	// session-level prepared statements without PgBouncer's tracking)
	// does not survive between transactions.
	PoolModeTransaction PoolMode = "transaction"
	// PoolModeSession keeps one server connection per client session.
	PoolModeSession PoolMode = "session"
)

// PgBouncerParameterValue is the value of a PgBouncer setting.
// +kubebuilder:validation:MaxLength=1024
// +kubebuilder:validation:XValidation:rule="!self.matches('[\\x00-\\x1f\\x7f]')",message="PgBouncer parameter values cannot contain line breaks or control characters: pgbouncer.ini has one setting per line, so a line break would start a setting nobody asked for"
type PgBouncerParameterValue string

// PoolerPoolSpec sizes PgBouncer's pools (one per database and user).
// A field left unset keeps PgBouncer's default.
// +kubebuilder:validation:XValidation:rule="!has(self.minSize) || !has(self.defaultSize) || self.minSize <= self.defaultSize",message="pool.minSize cannot be larger than pool.defaultSize"
type PoolerPoolSpec struct {
	// DefaultSize is how many server connections a pool may open
	// (default_pool_size; PgBouncer's default is 20).
	// +kubebuilder:validation:Minimum=1
	// +optional
	DefaultSize *int32 `json:"defaultSize,omitempty"`

	// MinSize is how many server connections a pool keeps open when idle
	// (min_pool_size).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MinSize *int32 `json:"minSize,omitempty"`

	// ReserveSize is how many more connections a pool may open when a
	// client has waited too long (reserve_pool_size).
	// +kubebuilder:validation:Minimum=0
	// +optional
	ReserveSize *int32 `json:"reserveSize,omitempty"`

	// MaxClientConnections is how many clients one pooler instance
	// accepts (max_client_conn; PgBouncer's default is 100).
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxClientConnections *int32 `json:"maxClientConnections,omitempty"`

	// MaxDatabaseConnections bounds the server connections of one
	// database across its pools (max_db_connections).
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxDatabaseConnections *int32 `json:"maxDatabaseConnections,omitempty"`
}

// PoolerClientTLS is what the pooler asks of its clients. It always
// offers TLS, with a certificate the cluster's CA signs.
type PoolerClientTLS struct {
	// Required refuses clients that do not use TLS.
	// +optional
	Required bool `json:"required,omitempty"`
}

// PostgresPoolerSpec is a PgBouncer pooler in front of a cluster.
type PostgresPoolerSpec struct {
	// Cluster is the PostgresCluster in this namespace the pooler serves.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.cluster cannot change: create a new PostgresPooler for another cluster"
	Cluster corev1.LocalObjectReference `json:"cluster"`

	// Type is rw (the primary) or ro (the replicas).
	// +kubebuilder:default=rw
	// +optional
	Type PoolerType `json:"type,omitempty"`

	// Instances is how many PgBouncer pods run, spread across nodes.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	// +optional
	Instances int32 `json:"instances,omitempty"`

	// PoolMode is transaction (the default) or session.
	// +kubebuilder:default=transaction
	// +optional
	PoolMode PoolMode `json:"poolMode,omitempty"`

	// Pool sizes PgBouncer's pools.
	// +optional
	Pool PoolerPoolSpec `json:"pool,omitempty"`

	// ClientTLS is what the pooler asks of its clients.
	// +optional
	ClientTLS PoolerClientTLS `json:"clientTLS,omitempty"`

	// Parameters are other PgBouncer settings (pgbouncer.ini's
	// [pgbouncer] section), such as server_idle_timeout or
	// ignore_startup_parameters. Tusk sets where PgBouncer listens, how
	// clients and servers authenticate, TLS and the pool sizes, and
	// refuses those here.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z][a-z0-9_]*$'))",message="PgBouncer parameter names are lowercase letters, digits and '_', such as server_idle_timeout"
	// +kubebuilder:validation:XValidation:rule="['admin_users', 'auth_dbname', 'auth_file', 'auth_hba_file', 'auth_ident_file', 'auth_query', 'auth_type', 'auth_user', 'client_tls_ca_file', 'client_tls_cert_file', 'client_tls_key_file', 'client_tls_sslmode', 'conffile', 'default_pool_size', 'listen_addr', 'listen_port', 'logfile', 'max_client_conn', 'max_db_connections', 'min_pool_size', 'peer_id', 'pidfile', 'pool_mode', 'reserve_pool_size', 'server_tls_ca_file', 'server_tls_cert_file', 'server_tls_key_file', 'server_tls_sslmode', 'so_reuseport', 'stats_users', 'unix_socket_dir', 'unix_socket_group', 'unix_socket_mode', 'user'].all(p, !(p in self))",messageExpression="'PgBouncer parameter ' + ['admin_users', 'auth_dbname', 'auth_file', 'auth_hba_file', 'auth_ident_file', 'auth_query', 'auth_type', 'auth_user', 'client_tls_ca_file', 'client_tls_cert_file', 'client_tls_key_file', 'client_tls_sslmode', 'conffile', 'default_pool_size', 'listen_addr', 'listen_port', 'logfile', 'max_client_conn', 'max_db_connections', 'min_pool_size', 'peer_id', 'pidfile', 'pool_mode', 'reserve_pool_size', 'server_tls_ca_file', 'server_tls_cert_file', 'server_tls_key_file', 'server_tls_sslmode', 'so_reuseport', 'stats_users', 'unix_socket_dir', 'unix_socket_group', 'unix_socket_mode', 'user'].filter(p, p in self)[0] + ' is set by Tusk and cannot be set here: Tusk sets where PgBouncer listens, how clients and servers authenticate, TLS on both sides and the pool sizes (spec.poolMode and spec.pool)'"
	// +optional
	Parameters map[string]PgBouncerParameterValue `json:"parameters,omitempty"`

	// PauseTimeout bounds how long a switchover's pause of this pooler
	// waits for the transactions in flight to finish (type rw, pool mode
	// transaction): past it the pooler resumes and the switchover goes
	// on, its clients seeing what they would without a pause, rather than
	// hanging. A client's statement_timeout shorter than the pause fails
	// statements the pause holds.
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('60s')",message="spec.pauseTimeout is between 100ms and 60s, such as 5s"
	// +optional
	PauseTimeout *metav1.Duration `json:"pauseTimeout,omitempty"`

	// Resources are the CPU and memory requests and limits of the
	// PgBouncer container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// PostgresPoolerStatus is what Tusk observed of a pooler.
type PostgresPoolerStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Instances is how many PgBouncer pods exist.
	// +optional
	Instances int32 `json:"instances,omitempty"`

	// ReadyInstances is how many PgBouncer pods are ready.
	// +optional
	ReadyInstances int32 `json:"readyInstances,omitempty"`

	// Selector selects the pooler's pods (the scale subresource's, for
	// autoscalers).
	// +optional
	Selector string `json:"selector,omitempty"`

	// Conditions are the pooler's standard conditions.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PostgresPooler is a PgBouncer connection pooler in front of a
// PostgresCluster: a Service of the pooler's name, TLS on both sides,
// users authenticated against the cluster's own roles. Not reconciled
// yet: the API is the first part of issue 35 (docs/pooler.md).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.instances,statuspath=.status.readyInstances,selectorpath=.status.selector
// +kubebuilder:resource:shortName=pgpooler,categories=tusk
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster.name`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Instances",type=integer,JSONPath=`.spec.instances`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyInstances`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 50",message="a PostgresPooler name is at most 50 characters, so its Pods have room for their suffixes"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="a PostgresPooler name starts with a lowercase letter and has only lowercase letters, digits and '-' (no dots): it names the pooler's Service, which must be a DNS label"
type PostgresPooler struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired pooler.
	Spec PostgresPoolerSpec `json:"spec"`

	// Status is the observed pooler.
	// +optional
	Status PostgresPoolerStatus `json:"status,omitempty"`
}

// PostgresPoolerList is a list of PostgresPoolers.
//
// +kubebuilder:object:root=true
type PostgresPoolerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PostgresPooler `json:"items"`
}
