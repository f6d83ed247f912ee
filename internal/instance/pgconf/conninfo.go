package pgconf

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// ConnInfo is how a replica reaches its primary. Empty optional fields are
// left out, so libpq applies its own defaults (or the PG* environment).
type ConnInfo struct {
	// Host is the primary's address, normally the cluster's -rw Service.
	Host string
	// HostAddr, when set, is an IP address of the primary to try first:
	// libpq connects to it while still checking the certificate against
	// Host, and tries Host by name next if it fails or is not the primary.
	HostAddr string
	// Port is the primary's port; 0 leaves it out.
	Port int
	// User is the replication role.
	User string
	// DBName is the database of a connection that is not a replication
	// one (pg_rewind's); empty for primary_conninfo.
	DBName string
	// ApplicationName is the replica's name as the primary sees it in
	// pg_stat_replication; it must match the names listed in
	// synchronous_standby_names for the replica to count as synchronous.
	ApplicationName string
	// PassFile is a .pgpass file with the replication password. Passwords
	// never go into primary_conninfo: any user can read it with SHOW.
	PassFile string
	// SSLMode, SSLCert, SSLKey and SSLRootCert are libpq's TLS settings
	// (verify-full with a CA in production).
	SSLMode     string
	SSLCert     string
	SSLKey      string
	SSLRootCert string
	// TargetSessionAttrs, such as "primary", makes libpq refuse a server
	// of another kind (PostgreSQL 14 and later report in_hot_standby, so
	// this works on replication connections too).
	TargetSessionAttrs string
	// ConnectTimeout bounds each connection attempt; 0 means
	// DefaultConnectTimeout. libpq counts whole seconds, at least 2.
	ConnectTimeout time.Duration
}

// DefaultConnectTimeout is short because a replica that cannot reach the
// primary should notice (and report) quickly; the WAL receiver retries.
const DefaultConnectTimeout = 5 * time.Second

// Keepalive settings for fast failure detection: a primary whose node
// died without closing connections is noticed in about 5+2*3 = 11 s of
// silence, and unacknowledged data is given up on after 10 s, instead of
// the kernel defaults (two hours of idle, then minutes of retransmits).
const (
	keepalivesIdle     = 5
	keepalivesInterval = 2
	keepalivesCount    = 3
	tcpUserTimeoutMS   = 10000
)

// PrimaryConnInfo renders c as a libpq keyword/value connection string for
// primary_conninfo, in a fixed order (so equal input gives equal text and
// no needless reload). Values that libpq would otherwise split or
// unescape (empty, or containing white space, ' or \) are single-quoted
// with ' and \ backslash-escaped. The result is itself a value for
// postgresql.conf, where PostgresqlConf quotes it again.
func PrimaryConnInfo(c ConnInfo) string {
	host, hostaddr := c.Host, ""
	if c.HostAddr != "" {
		// An empty item of a hostaddr list means: look the host up.
		host, hostaddr = c.Host+","+c.Host, c.HostAddr+","
	}
	kv := []struct{ k, v string }{
		{"host", host},
		{"hostaddr", hostaddr},
		{"port", portString(c.Port)},
		{"user", c.User},
		{"dbname", c.DBName},
		{"application_name", c.ApplicationName},
		{"passfile", c.PassFile},
		{"sslmode", c.SSLMode},
		{"sslcert", c.SSLCert},
		{"sslkey", c.SSLKey},
		{"sslrootcert", c.SSLRootCert},
		{"target_session_attrs", c.TargetSessionAttrs},
		{"connect_timeout", strconv.Itoa(timeoutSeconds(c.ConnectTimeout))},
		{"keepalives", "1"},
		{"keepalives_idle", strconv.Itoa(keepalivesIdle)},
		{"keepalives_interval", strconv.Itoa(keepalivesInterval)},
		{"keepalives_count", strconv.Itoa(keepalivesCount)},
		{"tcp_user_timeout", strconv.Itoa(tcpUserTimeoutMS)},
	}
	parts := make([]string, 0, len(kv))
	for _, p := range kv {
		if p.v != "" {
			parts = append(parts, p.k+"="+quoteConnValue(p.v))
		}
	}
	return strings.Join(parts, " ")
}

// portString leaves out an unset port.
func portString(port int) string {
	if port == 0 {
		return ""
	}
	return strconv.Itoa(port)
}

// timeoutSeconds rounds up to whole seconds, at least 2: libpq treats 1
// as 2 and 0 as "wait forever", which a replica must never do.
func timeoutSeconds(d time.Duration) int {
	if d <= 0 {
		d = DefaultConnectTimeout
	}
	s := math.Ceil(d.Seconds())
	return int(max(s, 2))
}

// quoteConnValue quotes a value the way libpq's conninfo parser reads it.
func quoteConnValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n\r\v\f'\\") {
		return v
	}
	v = strings.ReplaceAll(v, `\`, `\\`)
	v = strings.ReplaceAll(v, `'`, `\'`)
	return "'" + v + "'"
}

// LocalConnString is a libpq connection string to the instance over its
// Unix socket, with the password from passFile: what the instance manager
// gives pg_basebackup for a base backup of its own instance.
func LocalConnString(socketDir string, port int, user, passFile, applicationName string) string {
	parts := []string{
		"host=" + quoteConnValue(socketDir), "port=" + strconv.Itoa(port), "user=" + quoteConnValue(user),
		"dbname=postgres", "passfile=" + quoteConnValue(passFile), "application_name=" + quoteConnValue(applicationName),
	}
	return strings.Join(parts, " ")
}
