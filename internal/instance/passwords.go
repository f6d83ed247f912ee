package instance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"tusk.dev/tusk/internal/instance/sqlobjects"
	"tusk.dev/tusk/internal/instanceapi"
)

// passwordChange is a role whose password file changed.
type passwordChange struct {
	role     string
	password string
}

// changedPasswords lists the roles whose passwords differ between old and
// next. The replication role has no password to change when replicas
// authenticate with a client certificate.
func changedPasswords(old, next secrets, owner string, replicationByPassword bool) []passwordChange {
	var changes []passwordChange
	add := func(role, was, is string) {
		if role != "" && is != "" && is != was {
			changes = append(changes, passwordChange{role: role, password: is})
		}
	}
	add(superuser, old.superuserPassword, next.superuserPassword)
	if replicationByPassword {
		add(replicationUser, old.replicationPassword, next.replicationPassword)
	}
	add(owner, old.appPassword, next.appPassword)
	return changes
}

// syncPasswords applies changed password files. The primary changes the
// roles (replicas get the change through WAL) and then its passfile; a
// replica only rewrites its passfile, for its next connection to the
// primary. A primary that cannot apply a change keeps the old passwords
// and tries again at the next check.
func (m *Manager) syncPasswords(ctx context.Context) error {
	next, err := readSecrets(m.opts.Secrets)
	if err != nil {
		return err // an emptied file, as while the kubelet swaps it: keep the old
	}
	current := m.currentSecrets()
	changes := changedPasswords(current, next, m.opts.InitDB.Owner, m.replicationCerts == nil)
	if len(changes) == 0 {
		return nil
	}
	if m.snapshot().role == instanceapi.RolePrimary {
		if err := m.alterPasswords(ctx, changes); err != nil {
			return err
		}
	} else {
		m.log.Info("Rewriting the passfile for changed passwords; the primary changes the roles", "changed", len(changes))
	}
	next.previousSuperuserPassword = current.superuserPassword
	m.secretsMu.Lock()
	m.secrets = next
	m.secretsMu.Unlock()
	if err := m.writePassfile(); err != nil {
		return err
	}
	m.mu.Lock()
	m.state.lastPasswordRotation = time.Now()
	m.mu.Unlock()
	return nil
}

// alterPasswords sets the new passwords as SCRAM verifiers computed here,
// so no password reaches the server or its logs. The session is opened
// with the old superuser password and stays valid after it changes.
func (m *Manager) alterPasswords(ctx context.Context, changes []passwordChange) error {
	conn, err := m.connect(ctx)
	if err != nil {
		return fmt.Errorf("while connecting to change passwords: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if err := sqlobjects.QuietRoleStatements(ctx, conn); err != nil {
		return err
	}
	for _, c := range changes {
		m.log.Info("Rotating the "+c.role+" password", "role", c.role)
		verifier, err := sqlobjects.ScramVerifier(c.password)
		if err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER ROLE %s PASSWORD %s", ident(c.role), literal(verifier))); err != nil {
			return fmt.Errorf("while rotating the %s password: %w", c.role, err)
		}
	}
	return nil
}

// connect opens a superuser session to the postgres database over the
// unix socket. On a replica whose password file changed before the primary
// applied the change, only the previous password works until the change
// is replayed, so that one is tried too.
func (m *Manager) connect(ctx context.Context) (*pgx.Conn, error) {
	s := m.currentSecrets()
	conn, err := m.connectWith(ctx, s.superuserPassword)
	if err == nil || s.previousSuperuserPassword == "" || !isAuthFailure(err) {
		return conn, err
	}
	return m.connectWith(ctx, s.previousSuperuserPassword)
}

func (m *Manager) connectWith(ctx context.Context, password string) (*pgx.Conn, error) {
	cfg, err := m.localConfig(superuser, password)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// connectDatabase is connect (the superuser over the Unix socket) to
// another database than postgres.
func (m *Manager) connectDatabase(ctx context.Context, database string) (*pgx.Conn, error) {
	s := m.currentSecrets()
	open := func(password string) (*pgx.Conn, error) {
		cfg, err := m.localConfig(superuser, password)
		if err != nil {
			return nil, err
		}
		cfg.Database = database
		return pgx.ConnectConfig(ctx, cfg)
	}
	conn, err := open(s.superuserPassword)
	if err == nil || s.previousSuperuserPassword == "" || !isAuthFailure(err) {
		return conn, err
	}
	return open(s.previousSuperuserPassword)
}

// localConfig is a session of the manager's as role, over the Unix socket.
func (m *Manager) localConfig(role, password string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cfg.Host = m.opts.SocketDir
	cfg.Port = uint16(m.opts.Port) //nolint:gosec // a port number, validated at start-up
	cfg.User = role
	cfg.Password = password
	cfg.Database = "postgres"
	cfg.ConnectTimeout = 3 * time.Second
	cfg.RuntimeParams["application_name"] = "tusk-instance-manager"
	pinSearchPath(cfg)
	return cfg, nil
}

// isAuthFailure says whether err is PostgreSQL refusing a password.
func isAuthFailure(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == "28P01" // invalid_password
}

// pinSearchPath makes every name the manager's SQL does not qualify
// resolve in pg_catalog only: the manager runs as a superuser, and a
// function or operator a database user created in a schema on the default
// search_path (public, "$user") must never run in its place.
func pinSearchPath(cfg *pgx.ConnConfig) {
	cfg.RuntimeParams["search_path"] = "pg_catalog"
}
