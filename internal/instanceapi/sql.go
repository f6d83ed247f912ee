package instanceapi

// Declarative SQL objects: the operator sends the primary's instance
// manager the desired state of one role, database, publication or
// subscription (PUT, body: the request type below); the manager compares
// it with the catalogs over its local socket, issues only the statements
// that close the difference, and replies with an ApplyResult. The same
// request sent twice issues no statement the second time.
//
// Replies other than 200 carry {"error": "..."}:
//   - 409 Conflict: this instance is not a writable primary (a replica, a
//     fenced or stopping primary, one stepping down); the operator waits
//     for the primary and sends it there.
//   - 422 Unprocessable Entity: the request is refused as it stands (a
//     reserved role, a role that owns objects and no reassignment, a
//     database with connections and no force, an extension whose files
//     the image lacks, a dependency missing such as an owner role). The
//     error says why, for a condition; nothing was changed.
//   - 423 Locked: another session held the lock of the applies for
//     longer than the apply waits (a few seconds); the error names it.
//     Nothing was changed; the operator tries again.
//   - 503 Service Unavailable: postgres is not accepting connections yet.
//   - 400 Bad Request: the body does not decode.
const (
	PathSQLRoles         = "/v1/sql/roles"
	PathSQLDatabases     = "/v1/sql/databases"
	PathSQLPublications  = "/v1/sql/publications"
	PathSQLSubscriptions = "/v1/sql/subscriptions"
)

// Ensure says whether an object should exist.
type Ensure string

// The values of Ensure; empty means EnsurePresent.
const (
	EnsurePresent Ensure = "present"
	EnsureAbsent  Ensure = "absent"
)

// ApplyResult is what applying one object did.
type ApplyResult struct {
	// Statements counts the SQL statements that changed something; 0 when
	// the catalogs already matched the request.
	Statements int `json:"statements"`
	// Changes say what changed, one short human sentence each ("created
	// role app", "set connection limit to 10"); never a secret.
	Changes []string `json:"changes,omitempty"`
	// Exists says whether the object exists after the apply.
	Exists bool `json:"exists"`
}

// ReservedRoles are the roles Tusk creates and uses itself; no managed
// object may create, change or drop them. Names starting with "pg_" are
// PostgreSQL's and refused too.
var ReservedRoles = []string{"postgres", "tusk_replication", "tusk_monitor", ProbeRole, CertificateLoginRole,
	"tusk_pooler_auth", // pooler.AuthRole, the poolers' lookup role
}

// ServerFileRoles are PostgreSQL's predefined roles whose members reach
// the server's files or programs as a superuser does: the pod's keys and
// service-account token among them.
var ServerFileRoles = []string{"pg_read_server_files", "pg_write_server_files", "pg_execute_server_program"}

// CreateRoleGrantsAnyRole says whether CREATEROLE, on PostgreSQL major,
// lets a role grant itself membership in any role but a superuser
// (pg_execute_server_program among them), making it as good as superuser:
// below 16, which limits it to the roles it administers.
func CreateRoleGrantsAnyRole(major int) bool { return major < 16 }

// CertificateLoginRole is the group whose members log in over TLS with a
// client certificate from the cluster's client CA (its CN the member's
// name) and no password: pg_hba.conf names it (+tusk_cert_login), so no
// rule changes per role. The primary's manager creates it (NOLOGIN) and
// grants it to a role whose request asks for CertificateLogin.
const CertificateLoginRole = "tusk_cert_login"

// RoleRequest is the desired state of one role (PostgresRole).
type RoleRequest struct {
	Name   string `json:"name"`
	Ensure Ensure `json:"ensure,omitempty"`

	Login       bool `json:"login,omitempty"`
	Superuser   bool `json:"superuser,omitempty"`
	CreateDB    bool `json:"createdb,omitempty"`
	CreateRole  bool `json:"createrole,omitempty"`
	Replication bool `json:"replication,omitempty"`
	BypassRLS   bool `json:"bypassrls,omitempty"`
	// Inherit is INHERIT; nil means PostgreSQL's default (true).
	Inherit *bool `json:"inherit,omitempty"`
	// ConnectionLimit is CONNECTION LIMIT; nil means -1 (no limit).
	ConnectionLimit *int32 `json:"connectionLimit,omitempty"`
	// ValidUntil is VALID UNTIL in RFC 3339; empty means 'infinity'.
	ValidUntil string `json:"validUntil,omitempty"`
	// InRoles are the roles this role is a member of, exactly: memberships
	// not listed are revoked (those granted by a superuser to a managed
	// role; PostgreSQL's predefined roles too).
	InRoles []string `json:"inRoles,omitempty"`
	// Parameters are ALTER ROLE ... SET settings, exactly: settings not
	// listed are reset.
	Parameters map[string]string `json:"parameters,omitempty"`
	// Password, when set, is the role's password; the manager stores a
	// SCRAM-SHA-256 verifier it computes, and only when the stored one
	// does not already verify this password. Nil leaves the password as
	// it is; never logged.
	Password *string `json:"password,omitempty"`
	// CertificateLogin makes the role a member of CertificateLoginRole
	// (and only then): over the network it then logs in with its client
	// certificate, not a password. It is not one of InRoles.
	CertificateLogin bool `json:"certificateLogin,omitempty"`
	// ReassignOwnedTo, for an absent role that owns objects, is the role
	// that takes them over (REASSIGN OWNED in every database, then DROP
	// OWNED for its privileges) before the drop. Empty refuses the drop
	// of a role that owns anything, with what it owns.
	ReassignOwnedTo string `json:"reassignOwnedTo,omitempty"`
}

// DatabaseRequest is the desired state of one database (PostgresDatabase)
// with its extensions and schemas.
type DatabaseRequest struct {
	Name   string `json:"name"`
	Ensure Ensure `json:"ensure,omitempty"`
	Owner  string `json:"owner,omitempty"`
	// Encoding, Locale and Template apply at creation only.
	Encoding string `json:"encoding,omitempty"`
	Locale   string `json:"locale,omitempty"`
	Template string `json:"template,omitempty"`
	// ConnectionLimit is CONNECTION LIMIT; nil means -1 (no limit).
	ConnectionLimit *int32 `json:"connectionLimit,omitempty"`
	// ForceDrop, for an absent database, ends its sessions (DROP DATABASE
	// ... WITH (FORCE)); without it a database with sessions is refused.
	ForceDrop bool `json:"forceDrop,omitempty"`
	// Extensions and Schemas are managed ones: one not listed is left
	// alone; one listed absent is dropped.
	Extensions []ExtensionRequest `json:"extensions,omitempty"`
	Schemas    []SchemaRequest    `json:"schemas,omitempty"`
	// AllowUntrustedExtensions lets an extension PostgreSQL does not mark
	// trusted be created or updated (the cluster's
	// spec.allowUntrustedExtensions); refused otherwise.
	AllowUntrustedExtensions bool `json:"allowUntrustedExtensions,omitempty"`
}

// ExtensionRequest is one extension of a database.
type ExtensionRequest struct {
	Name   string `json:"name"`
	Ensure Ensure `json:"ensure,omitempty"`
	// Version is the extension's version; empty takes the default version
	// at creation and leaves it afterwards.
	Version string `json:"version,omitempty"`
	// Schema is where the extension's objects go; empty leaves it to
	// PostgreSQL at creation and afterwards.
	Schema string `json:"schema,omitempty"`
}

// SchemaRequest is one schema of a database.
type SchemaRequest struct {
	Name   string `json:"name"`
	Ensure Ensure `json:"ensure,omitempty"`
	// Owner is the schema's owner; empty is the database's owner.
	Owner string `json:"owner,omitempty"`
}

// PublicationRequest is the desired state of one publication.
type PublicationRequest struct {
	Name     string `json:"name"`
	Database string `json:"database"`
	Ensure   Ensure `json:"ensure,omitempty"`
	// AllTables publishes every table, present and future (FOR ALL
	// TABLES); otherwise Tables, each "schema.table" or "table" (in
	// public), exactly.
	AllTables bool     `json:"allTables,omitempty"`
	Tables    []string `json:"tables,omitempty"`
}

// SubscriptionRequest is the desired state of one subscription.
type SubscriptionRequest struct {
	Name     string `json:"name"`
	Database string `json:"database"`
	Ensure   Ensure `json:"ensure,omitempty"`
	// Publications are the publisher's publications subscribed to.
	Publications []string `json:"publications,omitempty"`
	// ConnInfo is the libpq connection string to the publisher, password
	// included; it is kept in the catalog (pg_subscription) as PostgreSQL
	// does, and never logged. CAPEM, when set, is written to a file of the
	// manager's whose path ConnInfo's sslrootcert names as the
	// placeholder "$CA" (verify-full against the publisher's CA).
	ConnInfo string `json:"connInfo"`
	CAPEM    string `json:"caPEM,omitempty"`
	// Enabled is the subscription's ENABLE/DISABLE; nil means enabled.
	Enabled *bool `json:"enabled,omitempty"`
}

// PathSQLSlots reports the primary's replication slots (GET): a publication's
// subscribers' slots and how far behind they are. See SlotsStatus.
const PathSQLSlots = "/v1/sql/slots"

// Slot is one logical replication slot on a primary.
type Slot struct {
	Name     string `json:"name"`
	Database string `json:"database"`
	Active   bool   `json:"active"`
	// RetainedBytes is the WAL the slot holds back (from its restart_lsn
	// to the current WAL position).
	RetainedBytes int64 `json:"retainedBytes"`
	// WALStatus is pg_replication_slots.wal_status (reserved, extended,
	// unreserved, lost).
	WALStatus string `json:"walStatus"`
}

// SlotsStatus is a primary's logical replication slots.
type SlotsStatus struct {
	Slots []Slot `json:"slots"`
	// MaxSlotWALKeepBytes is max_slot_wal_keep_size in bytes; -1 when
	// unlimited.
	MaxSlotWALKeepBytes int64 `json:"maxSlotWalKeepBytes"`
}
