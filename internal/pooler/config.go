// Package pooler builds what a PgBouncer pooler of a Tusk cluster runs
// with: its configuration file and the SQL that lets it look up users'
// password verifiers through a low-privilege role. Pure functions of their
// input; the operator and the tests write the results where PgBouncer and
// PostgreSQL read them.
package pooler

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// PoolMode is when PgBouncer gives a server connection back to the pool.
type PoolMode string

const (
	// PoolModeTransaction shares server connections between transactions:
	// the mode that lets a pause wait for transactions, not sessions.
	PoolModeTransaction PoolMode = "transaction"
	// PoolModeSession keeps one server connection per client session.
	PoolModeSession PoolMode = "session"
)

// Config is one pooler's PgBouncer configuration, as the operator decides
// it. File paths are where the pod (or the test) puts them.
type Config struct {
	// ListenAddr and ListenPort are where clients connect.
	ListenAddr string
	ListenPort int
	// SocketDir holds PgBouncer's Unix socket: its admin console, reached
	// there by its own OS user (PAUSE, RESUME, RELOAD).
	SocketDir string
	// ServerHost and ServerPort are the PostgreSQL server every database
	// goes to; ServerHost must be a name or address in the server's
	// certificate (server TLS is verify-full).
	ServerHost string
	ServerPort int
	PoolMode   PoolMode
	Pools      PoolSizes
	// AuthRole is the role PgBouncer looks users up as (AuthFunctionSQL),
	// logging in with the client certificate ServerTLS names.
	AuthRole string
	// AuthDatabase holds the lookup function.
	AuthDatabase string
	ServerTLS    ServerTLS
	ClientTLS    ClientTLS
	// Parameters are the user's other PgBouncer settings; the ones Tusk
	// sets itself (ReservedParameters) are refused.
	Parameters map[string]string
	// Peers are the PgBouncer processes of the same pooler, the [peers]
	// section: a cancel request that reaches a process other than the one
	// holding the query is forwarded to the peer whose id its key holds.
	// Each process's own peer_id is not here (the file is the same for
	// every pod): PeerINI sets it.
	Peers []Peer
}

// Peer is one PgBouncer process of a pooler: its peer_id and where it
// listens.
type Peer struct {
	ID   int
	Host string
	Port int
}

// MaxPeerID is the largest peer_id PgBouncer accepts (the id is held in
// 14 bits of the cancel keys it hands out).
const MaxPeerID = 16383

// PoolSizes are PgBouncer's pool limits; zero leaves PgBouncer's default.
type PoolSizes struct {
	DefaultPoolSize  int
	MinPoolSize      int
	ReservePoolSize  int
	MaxClientConn    int
	MaxDBConnections int
}

// ServerTLS is how PgBouncer reaches PostgreSQL: always verify-full
// against the cluster's CA, presenting the auth role's client certificate
// (PostgreSQL checks it only where pg_hba.conf says cert: the auth role's
// logins; users' logins are checked with their SCRAM verifiers).
type ServerTLS struct {
	CAFile   string
	CertFile string
	KeyFile  string
}

// ClientTLS is what PgBouncer offers its clients: a server certificate the
// cluster's CA signed, and whether clients must use it.
type ClientTLS struct {
	CertFile string
	KeyFile  string
	// CAFile is client_tls_ca_file. PgBouncer loads a CA for its client
	// TLS even when it verifies no client certificate, and without one it
	// reads the system's bundle, which the pooler's image does not have
	// ("TLS setup failed: failed to load CA"): Tusk names the cluster's.
	CAFile string
	// Required refuses clients without TLS (client_tls_sslmode = require);
	// otherwise TLS is offered (prefer).
	Required bool
}

// ReservedParameters are the PgBouncer settings Tusk sets itself: where it
// listens and logs, how users authenticate, TLS on both sides, and what
// the PostgresPooler spec has fields for. api/v1alpha1's CEL rule refuses
// the same list (test/crd TestInvalidPoolersAreRejectedOnCreate creates a pooler with each).
var ReservedParameters = []string{
	"admin_users", "auth_dbname", "auth_file", "auth_hba_file", "auth_ident_file", "auth_query", "auth_type", "auth_user",
	"client_tls_ca_file", "client_tls_cert_file", "client_tls_key_file", "client_tls_sslmode",
	"conffile", "default_pool_size", "listen_addr", "listen_port", "logfile",
	"max_client_conn", "max_db_connections", "min_pool_size", "peer_id", "pidfile", "pool_mode", "reserve_pool_size",
	"server_tls_ca_file", "server_tls_cert_file", "server_tls_key_file", "server_tls_sslmode",
	"so_reuseport", "stats_users", "unix_socket_dir", "unix_socket_group", "unix_socket_mode", "user",
}

var parameterName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// hostPattern is what a server host may be: a DNS name or an IP address,
// nothing PgBouncer's connection string would need quoted.
var hostPattern = regexp.MustCompile(`^[A-Za-z0-9.:-]+$`)

// Validate says what is wrong with c, in words a user can act on.
func (c Config) Validate() error {
	var errs []error
	if c.PoolMode != PoolModeTransaction && c.PoolMode != PoolModeSession {
		errs = append(errs, fmt.Errorf("pool mode %q: want %q or %q", c.PoolMode, PoolModeTransaction, PoolModeSession))
	}
	if !hostPattern.MatchString(c.ServerHost) {
		errs = append(errs, fmt.Errorf("server host %q: want a DNS name or an IP address", c.ServerHost))
	}
	for name, port := range map[string]int{"listen port": c.ListenPort, "server port": c.ServerPort} {
		if port < 1 || port > 65535 {
			errs = append(errs, fmt.Errorf("%s %d: want 1 to 65535", name, port))
		}
	}
	if c.AuthRole == "" || c.AuthDatabase == "" {
		errs = append(errs, errors.New("the auth role and its database are required: PgBouncer looks users up through them"))
	}
	if c.ServerTLS.CAFile == "" || c.ServerTLS.CertFile == "" || c.ServerTLS.KeyFile == "" {
		errs = append(errs, errors.New("server TLS needs the cluster's CA and the auth role's client certificate and key"))
	}
	if c.ClientTLS.CertFile == "" || c.ClientTLS.KeyFile == "" || c.ClientTLS.CAFile == "" {
		errs = append(errs, errors.New("client TLS needs the pooler's server certificate and key, and a CA"))
	}
	return errors.Join(append(append(errs, validatePeers(c.Peers)...), ValidateParameters(c.Parameters))...)
}

func validatePeers(peers []Peer) []error {
	var errs []error
	seen := map[int]bool{}
	for _, p := range peers {
		if err := validatePeerID(p.ID); err != nil {
			errs = append(errs, err)
		}
		if seen[p.ID] {
			errs = append(errs, fmt.Errorf("peer %d is listed twice", p.ID))
		}
		seen[p.ID] = true
		if !hostPattern.MatchString(p.Host) || p.Port < 1 || p.Port > 65535 {
			errs = append(errs, fmt.Errorf("peer %d at %q port %d: want a DNS name or an IP address and a port", p.ID, p.Host, p.Port))
		}
	}
	return errs
}

func validatePeerID(id int) error {
	if id < 1 || id > MaxPeerID {
		return fmt.Errorf("peer id %d: want 1 to %d", id, MaxPeerID)
	}
	return nil
}

// ValidateParameters refuses the reserved parameters (naming them and
// why), names PgBouncer would not read as one setting, and values that
// would end the line they are written on.
func ValidateParameters(params map[string]string) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(params)) {
		switch {
		case slices.Contains(ReservedParameters, name):
			errs = append(errs, fmt.Errorf("PgBouncer parameter %q is set by Tusk (listening, authentication, TLS and the pool sizes are its own fields or Tusk's); remove it", name))
		case !parameterName.MatchString(name):
			errs = append(errs, fmt.Errorf("PgBouncer parameter %q: a name is lower-case letters, digits and underscores", name))
		case strings.ContainsFunc(params[name], isControl):
			errs = append(errs, fmt.Errorf("PgBouncer parameter %q: its value has a line break or control character", name))
		}
	}
	return errors.Join(errs...)
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// INI renders c as pgbouncer.ini, or says why it cannot. The [pgbouncer]
// section comes last, so that PeerINI's file can add to it (see there).
func INI(c Config) (string, error) {
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("while building the PgBouncer configuration: %w", err)
	}
	var b strings.Builder
	b.WriteString("; Written by Tusk: changes here are overwritten.\n")
	// Every database name goes to the one server; PgBouncer keeps a pool
	// per database and user.
	fmt.Fprintf(&b, "[databases]\n* = host=%s port=%d\n\n", c.ServerHost, c.ServerPort)
	if len(c.Peers) > 0 {
		b.WriteString("[peers]\n")
		for _, p := range c.Peers {
			fmt.Fprintf(&b, "%d = host=%s port=%d\n", p.ID, p.Host, p.Port)
		}
		b.WriteString("\n")
	}
	b.WriteString("[pgbouncer]\n")
	for _, kv := range c.settings() {
		fmt.Fprintf(&b, "%s = %s\n", kv[0], kv[1])
	}
	for _, name := range slices.Sorted(maps.Keys(c.Parameters)) {
		fmt.Fprintf(&b, "%s = %s\n", name, c.Parameters[name])
	}
	return b.String(), nil
}

// failoverDefaults are PgBouncer settings whose defaults make a pooler's
// clients wait long after a failover or a pod's stop, which a user's
// parameters may still change. PgBouncer opens one server connection at a time per
// pool: one left hanging on the lost primary's address (a cut network
// answers nothing) holds every new login for server_connect_timeout, and
// after a failed login it fails every new client at once ("server login
// has been failing") for server_login_retry. 2 s bounds a connection and
// login inside the cluster's network with a wide margin; 0.5 s retries
// cost one connection attempt per pod each half second while no primary
// answers. Measured on the local cluster with the defaults: clients
// through a pooler wrote again 5.3 s after direct clients when the
// primary's network was cut (docs/pooler.md).
var failoverDefaults = [][2]string{
	{"server_connect_timeout", "2"},
	{"server_login_retry", "0.5"},
	// A cancel request for a pod that has just stopped (its clients'
	// queries are gone with it) waits this long for its peer before
	// PgBouncer gives up, and the client sending it waits as long: 10 s
	// by default (measured in a pooler rolling update).
	{"cancel_wait_timeout", "2"},
}

// PeerINI is the configuration one PgBouncer process runs on: the file at
// include (INI's, shared by every process of the pooler) and this
// process's peer_id. PgBouncer reads %include in place and stays in the
// section the included file ended in, INI's [pgbouncer], so peer_id joins
// it; a RELOAD reads the included file afresh and peer_id stays (both
// tested against PgBouncer 1.24). The file must not name [pgbouncer]
// again: PgBouncer's parser sets every setting of a section to its
// default at each header of it, so a second [pgbouncer] would undo the
// included one (PgBouncer would listen on its default port, unix socket
// only). include must be an absolute path: PgBouncer opens it relative to
// its working directory.
func PeerINI(include string, peerID int) (string, error) {
	if err := validatePeerID(peerID); err != nil {
		return "", fmt.Errorf("while building PgBouncer's peer configuration: %w", err)
	}
	if !filepath.IsAbs(include) || strings.ContainsFunc(include, isControl) {
		return "", fmt.Errorf("while building PgBouncer's peer configuration: the included file %q is not an absolute path", include)
	}
	return fmt.Sprintf("; Written by tusk pooler: the pooler's configuration, which ends in its [pgbouncer] section,\n"+
		"; and this process's peer_id in that section (a [pgbouncer] header here would reset it).\n"+
		"%%include %s\npeer_id = %d\n", include, peerID), nil
}

// PeerIDFromPodName is the peer_id of the pod named name: its
// StatefulSet ordinal (the name's last dash-separated part) plus one, as
// the [peers] section the operator writes numbers them. An error when the
// name ends in no ordinal (not a StatefulSet's pod).
func PeerIDFromPodName(name string) (int, error) {
	i := strings.LastIndexByte(name, '-')
	ordinal, err := strconv.Atoi(name[i+1:])
	if i < 0 || err != nil || ordinal < 0 || ordinal >= MaxPeerID || strconv.Itoa(ordinal) != name[i+1:] {
		return 0, fmt.Errorf("the pod name %q does not end in a StatefulSet ordinal", name)
	}
	return ordinal + 1, nil
}

// settings are Tusk's own lines of the [pgbouncer] section, in order.
func (c Config) settings() [][2]string {
	s := [][2]string{
		{"listen_addr", c.ListenAddr},
		{"listen_port", strconv.Itoa(c.ListenPort)},
		{"unix_socket_dir", c.SocketDir},
		{"pool_mode", string(c.PoolMode)},
		// Users prove their password with SCRAM, which also lets PgBouncer
		// log in to PostgreSQL as them without ever holding the password.
		{"auth_type", "scram-sha-256"},
		{"auth_user", c.AuthRole},
		{"auth_dbname", c.AuthDatabase},
		{"auth_query", AuthQuery},
		{"server_tls_sslmode", "verify-full"},
		{"server_tls_ca_file", c.ServerTLS.CAFile},
		{"server_tls_cert_file", c.ServerTLS.CertFile},
		{"server_tls_key_file", c.ServerTLS.KeyFile},
		{"client_tls_sslmode", clientTLSMode(c.ClientTLS.Required)},
		{"client_tls_cert_file", c.ClientTLS.CertFile},
		{"client_tls_key_file", c.ClientTLS.KeyFile},
		{"client_tls_ca_file", c.ClientTLS.CAFile},
	}
	for _, d := range failoverDefaults {
		if _, set := c.Parameters[d[0]]; !set {
			s = append(s, d)
		}
	}
	for _, p := range []struct {
		name string
		v    int
	}{
		{"default_pool_size", c.Pools.DefaultPoolSize}, {"min_pool_size", c.Pools.MinPoolSize},
		{"reserve_pool_size", c.Pools.ReservePoolSize}, {"max_client_conn", c.Pools.MaxClientConn},
		{"max_db_connections", c.Pools.MaxDBConnections},
	} {
		if p.v > 0 {
			s = append(s, [2]string{p.name, strconv.Itoa(p.v)})
		}
	}
	return s
}

func clientTLSMode(required bool) string {
	if required {
		return "require"
	}
	return "prefer"
}
