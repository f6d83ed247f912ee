package instance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"tusk.dev/tusk/internal/instance/pgconf"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/pooler"
)

// secrets are the passwords the manager uses, read at start and again when
// their files change.
type secrets struct {
	superuserPassword   string
	replicationPassword string
	appPassword         string
	// previousSuperuserPassword is the one before the last change, still
	// valid on a replica until the primary's change is replayed.
	previousSuperuserPassword string
}

func readSecrets(files SecretFiles) (secrets, error) {
	var s secrets
	var errs []error
	read := func(path, what string, into *string) {
		if path == "" {
			return
		}
		data, err := os.ReadFile(path) //nolint:gosec // a mounted Secret named on the command line
		if err != nil {
			errs = append(errs, fmt.Errorf("while reading the %s password: %w", what, err))
			return
		}
		*into = instanceapi.Password(data)
		if *into == "" {
			errs = append(errs, fmt.Errorf("the %s password file %s is empty", what, path))
		}
	}
	read(files.Superuser, "superuser", &s.superuserPassword)
	read(files.Replication, "replication", &s.replicationPassword)
	read(files.App, "application owner", &s.appPassword)
	if s.superuserPassword == "" && files.Superuser == "" {
		errs = append(errs, errors.New("the superuser password file is required: the manager logs in with it"))
	}
	return s, errors.Join(errs...)
}

// currentSecrets returns the passwords in use.
func (m *Manager) currentSecrets() secrets {
	m.secretsMu.Lock()
	defer m.secretsMu.Unlock()
	return m.secrets
}

func (m *Manager) passfilePath() string { return filepath.Join(m.opts.RunDir, "pgpass") }

// writePassfile writes the libpq password file that replication and
// pg_rewind connections use, so no password appears on a command line or in
// primary_conninfo.
func (m *Manager) writePassfile() error {
	line := func(user, password string) string {
		return "*:*:*:" + pgpassEscape(user) + ":" + pgpassEscape(password) + "\n"
	}
	s := m.currentSecrets()
	content := line(superuser, s.superuserPassword)
	if s.replicationPassword != "" {
		content = line(replicationUser, s.replicationPassword) + content
	}
	return writeFileAtomic(m.passfilePath(), []byte(content))
}

func pgpassEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(s)
}

// replicationConnInfo is how a replica reaches its upstream: over TLS
// verifying the upstream's certificate when the cluster has one, and with
// the replication client certificate when replicas authenticate with it.
func (m *Manager) replicationConnInfo(up instanceapi.Upstream) pgconf.ConnInfo {
	ci := pgconf.ConnInfo{
		Host:            up.Host,
		HostAddr:        up.HostAddr,
		Port:            up.Port,
		User:            replicationUser,
		ApplicationName: m.opts.Name,
		PassFile:        m.passfilePath(),
		SSLMode:         "prefer",
	}
	if m.serverCerts != nil {
		ci.SSLMode, ci.SSLRootCert, ci.SSLCert = "verify-full", m.serverCerts.caPath(), m.serverCerts.noClientCertPath()
	}
	if c := m.replicationCerts; c != nil {
		ci.SSLCert, ci.SSLKey, ci.SSLRootCert = c.certPath(), c.keyPath(), c.caPath()
	}
	if m.opts.UpstreamPrimaryOnly && m.opts.MajorVersion >= 14 {
		ci.TargetSessionAttrs = "primary"
	}
	return ci
}

// rewindConnInfo is how pg_rewind reads the new primary: as the
// replication role (which may read the data directory's files and nothing
// more: grantRewindRights), authenticated as replicas are, over TLS
// verifying the primary's certificate when the cluster has one. The
// superuser never logs in over the network (pg_hba.conf refuses it).
func (m *Manager) rewindConnInfo(up instanceapi.Upstream) string {
	ci := m.replicationConnInfo(up)
	ci.DBName, ci.ApplicationName = rewindDatabase, m.opts.Name+"-rewind"
	return pgconf.PrimaryConnInfo(ci)
}

// rewindDatabase is the database pg_rewind's session opens.
const rewindDatabase = "postgres"

// sslEnv passes ci's TLS settings to a libpq program (pg_basebackup) in
// its environment.
func sslEnv(ci pgconf.ConnInfo) []string {
	var env []string
	for _, kv := range [][2]string{
		{"PGSSLMODE", ci.SSLMode}, {"PGSSLCERT", ci.SSLCert}, {"PGSSLKEY", ci.SSLKey}, {"PGSSLROOTCERT", ci.SSLRootCert},
	} {
		if kv[1] != "" {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	return env
}

// serverTLS is PostgreSQL's TLS configuration: the manager's private
// copies of the mounted files, or nil for ssl off.
func (m *Manager) serverTLS() (*pgconf.TLSFiles, pgconf.ReplicationAuth) {
	if m.serverCerts == nil {
		return nil, pgconf.ReplicationAuthSCRAM
	}
	files := &pgconf.TLSFiles{CertFile: m.serverCerts.certPath(), KeyFile: m.serverCerts.keyPath(), CAFile: m.serverCerts.caPath()}
	if m.replicationCerts != nil {
		return files, pgconf.ReplicationAuthCert
	}
	return files, pgconf.ReplicationAuthSCRAM
}

// writeConfig renders postgresql.conf and pg_hba.conf for st into the data
// directory, and the standby.signal a replica starts with. It also empties
// postgresql.auto.conf: ALTER SYSTEM would otherwise override the settings
// Tusk owns and the user's spec.
func (m *Manager) writeConfig(st state) error {
	return m.writeConfigIn(m.opts.DataDir, st)
}

// writeConfigIn is writeConfig for the data directory dir (a bootstrap
// builds one beside the final path).
func (m *Manager) writeConfigIn(dir string, st state) error {
	conf := pgconf.ServerConfig{
		MajorVersion:            m.opts.MajorVersion,
		Port:                    m.opts.Port,
		ListenAddresses:         m.opts.ListenAddresses,
		SocketDir:               m.opts.SocketDir,
		ClusterName:             m.opts.ClusterName,
		UserParameters:          st.config.Parameters,
		SynchronousStandbyNames: st.config.SynchronousStandbyNames,
		JSONLog:                 m.jsonLogFiles(),
		Logging:                 serverLogging(st.config.Logging),
	}
	if st.role == instanceapi.RoleReplica {
		conf.PrimaryConnInfo = pgconf.PrimaryConnInfo(m.replicationConnInfo(st.upstream))
	}
	if err := m.configureArchiving(&conf, dir); err != nil {
		return err
	}
	var replicationAuth pgconf.ReplicationAuth
	conf.TLS, replicationAuth = m.serverTLS()
	rendered, err := pgconf.PostgresqlConf(conf)
	if err != nil {
		return fmt.Errorf("while rendering postgresql.conf: %w", err)
	}
	for _, p := range rendered.Ignored {
		m.log.Info("Ignoring a parameter", "parameter", p.Name, "reason", p.Reason)
	}
	hba, err := pgconf.PgHBA(pgconf.HBAConfig{ReplicationUser: replicationUser, TLS: conf.TLS != nil, ReplicationAuth: replicationAuth,
		SuperuserRemoteAccess: st.config.SuperuserRemoteAccess, Monitor: m.monitorLogin, CertificateLogins: certificateLogins(replicationAuth),
		CertificateGroup: certificateGroup(replicationAuth)})
	if err != nil {
		return fmt.Errorf("while rendering pg_hba.conf: %w", err)
	}
	ident, err := pgconf.PgIdent(m.monitorLogin)
	if err != nil {
		return err
	}
	files := map[string]string{
		"postgresql.conf":      rendered.Text,
		"pg_hba.conf":          hba,
		"pg_ident.conf":        ident,
		"postgresql.auto.conf": "# Managed by Tusk: ALTER SYSTEM is not used; set spec.postgresql.parameters instead.\n",
	}
	for name, content := range files {
		if err := writeFileAtomic(filepath.Join(dir, name), []byte(content)); err != nil {
			return err
		}
	}
	return writeStandbySignal(dir, st.role == instanceapi.RoleReplica)
}

// serverLogging is the configuration's Logging as pgconf renders it.
func serverLogging(l *instanceapi.Logging) *pgconf.Logging {
	if l == nil {
		return nil
	}
	millis := func(ms *int64) *time.Duration {
		if ms == nil {
			return nil
		}
		d := time.Duration(*ms) * time.Millisecond
		return &d
	}
	return &pgconf.Logging{SlowStatementThreshold: millis(l.SlowStatementThresholdMillis), LockWaits: l.LockWaits,
		LockWaitThreshold: millis(l.LockWaitThresholdMillis)}
}

// writeStandbySignal creates or removes standby.signal, which makes
// postgres start as a replica.
func writeStandbySignal(dir string, replica bool) error {
	path := filepath.Join(dir, "standby.signal")
	if replica {
		return writeFileAtomic(path, nil)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("while removing standby.signal: %w", err)
	}
	return nil
}

// writeFileAtomic replaces path with content readable by the manager's
// user only (mode 0600: configuration, passwords, keys), so a crash never
// leaves a half-written file behind.
func writeFileAtomic(path string, content []byte) error {
	tmp := path + ".tusk-tmp"
	if err := os.WriteFile(tmp, content, 0o600); err != nil { //nolint:gosec // G703: paths under the manager's own directories
		return fmt.Errorf("while writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("while replacing %s: %w", path, err)
	}
	return nil
}

// isDataDir says whether dir holds a PostgreSQL cluster: a data directory
// Tusk must never wipe.
func isDataDir(dir string) bool {
	for _, f := range []string{"PG_VERSION", filepath.Join("global", "pg_control")} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

// isStandbyDataDir says whether the data directory starts as a replica.
func isStandbyDataDir(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "standby.signal"))
	return err == nil
}

// emptyOrMissing says whether dir can be replaced without losing anything.
func emptyOrMissing(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return len(entries) == 0, nil
}

func portArg(port int) string { return strconv.Itoa(port) }

// certificateLogins are the roles that log in with a client certificate:
// the SLI probe's and the poolers' auth role (to the database holding its
// lookup function, the manager's), when the server checks client
// certificates against the cluster's client CA (only the operator holds
// its key).
func certificateLogins(auth pgconf.ReplicationAuth) []pgconf.CertificateLogin {
	if auth != pgconf.ReplicationAuthCert {
		return nil
	}
	return []pgconf.CertificateLogin{
		{Role: instanceapi.ProbeRole, Database: instanceapi.ProbeDatabase},
		{Role: pooler.AuthRole, Database: poolerAuthDatabase},
	}
}

// poolerAuthDatabase holds the poolers' lookup function: the database the
// manager connects to (ensurePoolerAuthRole), the poolers' auth_dbname.
const poolerAuthDatabase = "postgres"

// certificateGroup is the group whose members log in with a client
// certificate, under the same condition as certificateLogins; "" when the
// server checks no client certificates.
func certificateGroup(auth pgconf.ReplicationAuth) string {
	if auth != pgconf.ReplicationAuthCert {
		return ""
	}
	return instanceapi.CertificateLoginRole
}
