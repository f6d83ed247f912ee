package instance

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
)

// CheckSecrets looks at the mounted certificate and password files now,
// rather than at the next poll, and applies what changed. The manager runs
// it on SIGHUP too.
func (m *Manager) CheckSecrets(ctx context.Context) error {
	_, err := m.do(ctx, "check secrets", func(ctx context.Context) (any, error) {
		return nil, m.checkSecrets(ctx)
	})
	return err
}

// checkSecrets applies changes to the mounted Secrets: the kubelet updates
// their files in place when the Secret changes. New certificates are copied
// and postgres re-reads them on reload; the HTTP API serves a new one from
// the next connection on. Changed passwords are applied (syncPasswords).
func (m *Manager) checkSecrets(ctx context.Context) error {
	errs := []error{m.syncPasswords(ctx), m.ensurePrimaryRights(ctx)}
	reload, err := m.syncCertificates()
	errs = append(errs, err)
	if reload {
		errs = append(errs, m.reloadTLS(ctx))
	}
	return errors.Join(errs...)
}

// reloadTLS makes postgres load new certificate files. A postgres that
// does not accept connections yet (recovering, starting) gets a SIGHUP
// without waiting for it to act; a stopped one reads them at start.
func (m *Manager) reloadTLS(ctx context.Context) error {
	m.log.Info("Reloading postgres for the new certificate")
	if m.snapshot().life.Phase() != instanceapi.PhaseRunning {
		m.ForwardSignal(syscall.SIGHUP)
		return nil
	}
	res, err := m.reload(ctx)
	if err != nil {
		return fmt.Errorf("while reloading postgres for the new certificate: %w", err)
	}
	if len(res.Errors) > 0 {
		return fmt.Errorf("postgres refused settings on reload: %v", res.Errors)
	}
	return nil
}

// ensurePrimaryRights gives the replication role pg_rewind's rights and
// the monitoring role its login once per run of a primary: clusters made
// by managers before them lack them.
func (m *Manager) ensurePrimaryRights(ctx context.Context) error {
	s := m.snapshot()
	if m.primaryRightsGranted || s.role != instanceapi.RolePrimary || s.life.Phase() != instanceapi.PhaseRunning {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := m.connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if err := m.grantRoleRights(ctx, conn); err != nil {
		return err
	}
	m.primaryRightsGranted = true
	return nil
}
