package pgconf

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// ReplicationAuth is how the replication role authenticates.
type ReplicationAuth string

// The replication authentication methods Tusk supports.
const (
	// ReplicationAuthSCRAM is a password checked with SCRAM-SHA-256 (the default).
	ReplicationAuthSCRAM ReplicationAuth = "scram-sha-256"
	// ReplicationAuthCert is a TLS client certificate whose CN is the role
	// name; it needs TLS, and ssl_ca_file in postgresql.conf.
	ReplicationAuthCert ReplicationAuth = "cert"
)

// Superuser is the superuser role the instance manager connects as.
const Superuser = "postgres"

// HBAConfig is everything pg_hba.conf is rendered from.
type HBAConfig struct {
	// ReplicationUser is the role replicas and pg_basebackup connect as.
	ReplicationUser string
	// TLS says the server has ssl on; remote connections then must use it.
	TLS bool
	// ReplicationAuth is how ReplicationUser authenticates; empty means
	// ReplicationAuthSCRAM.
	ReplicationAuth ReplicationAuth
	// SuperuserRemoteAccess lets the superuser log in over the network
	// with its password. Off, it reaches postgres over the Unix socket in
	// the pod only: a database superuser can read any file the server
	// can, the pod's service-account token, object-store keys and server
	// key among them.
	SuperuserRemoteAccess bool
	// ExtraRules are pg_hba.conf lines from the user, placed after Tusk's
	// own access and before the rule for applications, so they can grant
	// or reject more specifically. trust is refused.
	ExtraRules []string
	// Monitor, when set, is the role the instance manager observes
	// postgres as: it logs in over the Unix socket by peer authentication
	// from the manager's own OS user only (PgIdent), and never over the
	// network.
	Monitor *MonitorLogin
	// CertificateLogins are roles that log in over TLS with a client
	// certificate (its CN the role's name) and nothing else, each to its
	// one database: the SLI probe's. They need TLS, and ssl_ca_file.
	CertificateLogins []CertificateLogin
	// CertificateGroup, when set, is the group whose members log in over
	// TLS with a client certificate (its CN the member's name) and no
	// password, to any database, and are refused over the network
	// otherwise. It needs TLS, and ssl_ca_file.
	CertificateGroup string
}

// CertificateLogin is a role that logs in with a client certificate only,
// to one database.
type CertificateLogin struct {
	Role, Database string
}

// MonitorLogin is who may log in as the monitoring role: the database role
// and the one OS user whose local connections authenticate as it.
type MonitorLogin struct {
	Role       string
	SystemUser string
}

// monitorMap is the pg_ident.conf map of the monitoring role.
const monitorMap = "tusk_monitor"

// systemUserName is an OS user name that pg_ident.conf takes literally:
// no quotes, spaces, or a leading slash (a regular expression there).
var systemUserName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

func (l *MonitorLogin) validate() error {
	if l == nil {
		return nil
	}
	var errs []error
	if !isPlainRole(l.Role) {
		errs = append(errs, fmt.Errorf("monitoring role %q is not a plain role name", l.Role))
	}
	if !systemUserName.MatchString(l.SystemUser) {
		errs = append(errs, fmt.Errorf("OS user %q cannot be named in pg_ident.conf", l.SystemUser))
	}
	return errors.Join(errs...)
}

// PgIdent renders pg_ident.conf: the map that lets the instance manager's
// OS user, and no other, log in as the monitoring role (nil: no map, so no
// one).
func PgIdent(monitor *MonitorLogin) (string, error) {
	if err := monitor.validate(); err != nil {
		return "", fmt.Errorf("while rendering pg_ident.conf: %w", err)
	}
	var b strings.Builder
	b.WriteString("# pg_ident.conf\n")
	b.WriteString("# This file is managed by Tusk and will be overwritten: do not edit it.\n")
	if monitor != nil {
		b.WriteString("\n# The instance manager's OS user observes postgres as the monitoring role.\n")
		fmt.Fprintf(&b, "%-14s %-20s %s\n", monitorMap, monitor.SystemUser, monitor.Role)
	}
	return b.String(), nil
}

// roleName is a role name that needs no quoting in pg_hba.conf and is not
// one of its keywords' shapes (+group, @file, /regex); maxIdentifierLength
// bounds it.
var roleName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// isPlainRole says whether name can stand in pg_hba.conf's user column for
// that one role.
func isPlainRole(name string) bool {
	return len(name) <= maxIdentifierLength && roleName.MatchString(name) && !slices.Contains(hbaKeywords, name)
}

// hbaKeywords are user-column keywords that would match more than one role.
var hbaKeywords = []string{"all", "sameuser", "samerole", "samegroup"}

// hbaConnectionTypes are the record types a rule may start with. Anything
// else (include, include_dir, include_if_exists from PostgreSQL 16 on,
// or a typo) is refused.
var hbaConnectionTypes = []string{"local", "host", "hostssl", "hostnossl", "hostgssenc", "hostnogssenc"}

// PgHBA renders pg_hba.conf. PostgreSQL uses the first line that matches a
// connection, so the order is the policy:
//
//  0. the monitoring role (Monitor), by peer authentication over the Unix
//     socket: the instance manager's own OS user, without a password;
//  1. local (Unix socket) connections, with a password: the socket lives
//     inside the pod, so only the instance manager and kubectl exec reach it;
//     the superuser's replication connections too, for the base backups
//     the instance manager takes of its own instance (pg_basebackup);
//  2. replication for ReplicationUser, over TLS when TLS is on, and its
//     sessions to the postgres database, pg_rewind's;
//  3. CertificateLogins, each to its database with a client certificate,
//     and refused otherwise; the monitoring role refused over the network,
//     and the superuser too unless SuperuserRemoteAccess;
//  4. the members of CertificateGroup, to any database with a client
//     certificate, and refused otherwise: after the refusals of 3, so no
//     membership lets a role 3 refuses in, and before anything that would
//     take a password from a member;
//  5. the user's ExtraRules;
//  6. every role to every database, with a password, over TLS when TLS is on;
//  7. explicit reject lines, so a refused connection says so in the log.
//
// No line ever uses trust: every connection authenticates.
func PgHBA(in HBAConfig) (string, error) {
	auth, err := in.validate()
	if err != nil {
		return "", fmt.Errorf("while rendering pg_hba.conf: %w", err)
	}
	remote := "host"
	if in.TLS {
		remote = "hostssl"
	}
	var b strings.Builder
	b.WriteString("# pg_hba.conf\n")
	b.WriteString("# This file is managed by Tusk and will be overwritten: do not edit it.\n")
	b.WriteString("# PostgreSQL uses the first line that matches. No line uses trust.\n")
	if in.Monitor != nil {
		b.WriteString("\n# The instance manager observes postgres as the monitoring role, without a password.\n")
		hbaLine(&b, "local", "all", in.Monitor.Role, "", "peer map="+monitorMap)
	}
	b.WriteString("\n# The instance manager and kubectl exec, over the Unix socket in the pod.\n")
	hbaLine(&b, "local", "all", "all", "", string(ReplicationAuthSCRAM))
	hbaLine(&b, "local", "replication", Superuser, "", string(ReplicationAuthSCRAM))
	b.WriteString("\n# Streaming replicas and pg_basebackup.\n")
	hbaLine(&b, remote, "replication", in.ReplicationUser, "all", string(auth))
	b.WriteString("\n# pg_rewind of a former primary, as the replication role.\n")
	hbaLine(&b, remote, "postgres", in.ReplicationUser, "all", string(auth))
	certificatesAndRefusals(&b, in, remote)
	if len(in.ExtraRules) > 0 {
		b.WriteString("\n# Extra rules from the cluster's spec.\n")
		for _, r := range in.ExtraRules {
			b.WriteString(strings.TrimSpace(r) + "\n")
		}
	}
	b.WriteString("\n# Applications: every role, with a password.\n")
	hbaLine(&b, remote, "all", "all", "all", string(ReplicationAuthSCRAM))
	b.WriteString("\n# Anything else is refused.\n")
	hbaLine(&b, "host", "all", "all", "all", "reject")
	hbaLine(&b, "host", "replication", "all", "all", "reject")
	hbaLine(&b, "local", "replication", "all", "", "reject")
	return b.String(), nil
}

// certificatesAndRefusals writes steps 3 and 4 of PgHBA: the certificate
// logins, the network refusals of Tusk's own roles, and the certificate
// login group.
func certificatesAndRefusals(b *strings.Builder, in HBAConfig, remote string) {
	if len(in.CertificateLogins) > 0 {
		b.WriteString("\n# Roles that log in with a client certificate only, each to its database.\n")
		for _, l := range in.CertificateLogins {
			hbaLine(b, remote, l.Database, l.Role, "all", "cert")
			hbaLine(b, "host", "all", l.Role, "all", "reject")
		}
	}
	if in.Monitor != nil {
		b.WriteString("\n# The monitoring role logs in over the Unix socket only.\n")
		hbaLine(b, "host", "all", in.Monitor.Role, "all", "reject")
	}
	if !in.SuperuserRemoteAccess {
		b.WriteString("\n# The superuser logs in over the Unix socket only.\n")
		hbaLine(b, "host", "all", Superuser, "all", "reject")
	}
	if in.CertificateGroup != "" {
		b.WriteString("\n# Members of the certificate login group log in with a client certificate only.\n")
		hbaLine(b, remote, "all", "+"+in.CertificateGroup, "all", "cert")
		hbaLine(b, "host", "all", "+"+in.CertificateGroup, "all", "reject")
	}
}

// hbaLine writes one record in aligned columns.
func hbaLine(b *strings.Builder, typ, database, user, address, method string) {
	fmt.Fprintf(b, "%-8s %-12s %-20s %-6s %s\n", typ, database, user, address, method)
}

// validate checks the input and returns the replication method to use.
func (in HBAConfig) validate() (ReplicationAuth, error) {
	auth := in.ReplicationAuth
	if auth == "" {
		auth = ReplicationAuthSCRAM
	}
	var errs []error
	if !isPlainRole(in.ReplicationUser) {
		errs = append(errs, fmt.Errorf("replication user %q is not a plain role name", in.ReplicationUser))
	}
	if err := in.Monitor.validate(); err != nil {
		errs = append(errs, err)
	}
	for _, l := range in.CertificateLogins {
		if !isPlainRole(l.Role) || !isPlainRole(l.Database) {
			errs = append(errs, fmt.Errorf("certificate login %q to %q: not plain role and database names", l.Role, l.Database))
		}
		if !in.TLS {
			errs = append(errs, fmt.Errorf("certificate login %q needs TLS", l.Role))
		}
	}
	if g := in.CertificateGroup; g != "" {
		if !isPlainRole(g) {
			errs = append(errs, fmt.Errorf("certificate login group %q is not a plain role name", g))
		}
		if !in.TLS {
			errs = append(errs, fmt.Errorf("certificate login group %q needs TLS", g))
		}
	}
	switch auth {
	case ReplicationAuthSCRAM:
	case ReplicationAuthCert:
		if !in.TLS {
			errs = append(errs, errors.New("replication with client certificates needs TLS"))
		}
	default:
		errs = append(errs, fmt.Errorf("replication authentication %q is neither %q nor %q", auth, ReplicationAuthSCRAM, ReplicationAuthCert))
	}
	for i, r := range in.ExtraRules {
		if err := checkRule(r); err != nil {
			errs = append(errs, fmt.Errorf("extra rule %d: %w", i+1, err))
		}
	}
	return auth, errors.Join(errs...)
}

// checkRule refuses a user rule that could weaken or escape the file:
// trust; a line break or NUL (a second, unreviewed rule); a trailing
// backslash (PostgreSQL 14+ would join Tusk's next line onto it); a first
// word that is not a connection type (include directives, comments, typos);
// and @file references, which read role or database lists from files.
func checkRule(rule string) error {
	if i := strings.IndexAny(rule, "\n\r\x00"); i >= 0 {
		return fmt.Errorf("%q contains %q: a rule is one line", rule, rule[i])
	}
	fields := strings.Fields(rule)
	switch {
	case len(fields) == 0:
		return errors.New("the rule is empty")
	case !slices.Contains(hbaConnectionTypes, fields[0]):
		return fmt.Errorf("%q does not start with a connection type (%s)", rule, strings.Join(hbaConnectionTypes, ", "))
	case strings.HasSuffix(strings.TrimSpace(rule), `\`):
		return fmt.Errorf("%q ends with a backslash, which would continue it onto the next line", rule)
	}
	for _, f := range fields {
		if strings.EqualFold(f, "trust") {
			return fmt.Errorf("%q uses trust: every connection must authenticate", rule)
		}
		if strings.HasPrefix(f, "@") {
			return fmt.Errorf("%q reads a file with %s: list the roles or databases instead", rule, f)
		}
	}
	return checkRuleMethod(rule)
}

// allowedRuleMethods are the authentication methods a user's rule may
// use: none sends a password in clear or as a replayable hash (password,
// md5, ldap, radius, pam), none trusts what the client or the pod says of
// itself (ident, peer: any process in the pod is the OS user postgres).
var allowedRuleMethods = []string{"scram-sha-256", "cert", "reject", "gss"}

// checkRuleMethod refuses a rule whose method is not among
// allowedRuleMethods.
func checkRuleMethod(rule string) error {
	tokens := hbaTokens(rule)
	at := 4 // type, database, user, address, method
	if tokens[0] == "local" {
		at = 3 // no address
	} else if len(tokens) > 4 && !strings.Contains(tokens[3], "/") && isIPAddress(tokens[3]) {
		at = 5 // an address and a separate mask
	}
	if len(tokens) <= at {
		return fmt.Errorf("%q has no authentication method", rule)
	}
	if !slices.Contains(allowedRuleMethods, tokens[at]) { // PostgreSQL reads methods case-sensitively
		return fmt.Errorf("%q authenticates with %s: a rule may use %s only", rule, tokens[at], strings.Join(allowedRuleMethods, ", "))
	}
	return nil
}

// hbaTokens splits a pg_hba.conf line into its fields, a double-quoted
// field ("Mixed Case") being one.
func hbaTokens(line string) []string {
	var tokens []string
	var b strings.Builder
	quoted := false
	for _, r := range line {
		switch {
		case r == '"':
			quoted = !quoted
			b.WriteRune(r)
		case !quoted && (r == ' ' || r == '\t'):
			if b.Len() > 0 {
				tokens = append(tokens, b.String())
				b.Reset()
			}
		default:
			b.WriteRune(r)
		}
	}
	if b.Len() > 0 {
		tokens = append(tokens, b.String())
	}
	return tokens
}

func isIPAddress(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}
