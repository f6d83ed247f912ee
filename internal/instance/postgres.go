package instance

import (
	"cmp"
	"context"
	"fmt"
	"syscall"
	"time"

	"tusk.dev/tusk/internal/instance/lifecycle"
	"tusk.dev/tusk/internal/instance/supervisor"
	"tusk.dev/tusk/internal/instanceapi"
)

// startPostgres renders the configuration for the current state and starts
// postgres. It does not wait for connections: crash recovery can take long,
// and the run loop must keep serving operations and status meanwhile.
func (m *Manager) startPostgres(ctx context.Context) error {
	st := m.snapshot()
	if err := st.life.MayStart(); err != nil {
		return err
	}
	if err := m.writePassfile(); err != nil {
		return err
	}
	if err := m.writeConfig(st); err != nil {
		return err
	}
	m.resetWALWatcher()
	pm, err := supervisor.StartPostmaster(m.opts.BinDir, m.opts.DataDir, nil, m.reaper, m.postgresOutput(), m.log)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.postgres = pm
	m.recordLocked(lifecycle.Started)
	m.state.startedAt = time.Now()
	m.mu.Unlock()
	m.log.Info("Started postgres", "pid", pm.Pid(), "role", st.role)
	go m.markRunningWhenAccepting(ctx, pm)
	return nil
}

func (m *Manager) markRunningWhenAccepting(ctx context.Context, pm *supervisor.Postmaster) {
	if err := m.waitUntilAccepting(ctx, pm.Done()); err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.postgres == pm && m.applyLocked(lifecycle.Accepting) == nil {
		m.state.lastError = ""
	}
}

// waitRunning blocks until the current postgres accepts connections.
func (m *Manager) waitRunning(ctx context.Context) error {
	m.mu.Lock()
	pm := m.postgres
	m.mu.Unlock()
	if pm == nil {
		return fmt.Errorf("postgres is not running")
	}
	return m.waitUntilAccepting(ctx, pm.Done())
}

// waitStartedAndRunning waits until the supervisor has started postgres
// and it accepts connections: work launched before the first start
// (after an upgrade or an import) waits for it here.
func (m *Manager) waitStartedAndRunning(ctx context.Context) error {
	for {
		if err := m.waitRunning(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stopPostgres stops postgres starting with mode. It forgets the postmaster
// first, so the run loop does not take the exit for a crash.
func (m *Manager) stopPostgres(mode supervisor.ShutdownMode) error {
	return m.stopPostgresWithin(mode, m.opts.Timeouts)
}

// stopPostgresWithin is stopPostgres with other timeouts.
func (m *Manager) stopPostgresWithin(mode supervisor.ShutdownMode, timeouts supervisor.Timeouts) error {
	m.mu.Lock()
	pm := m.postgres
	m.postgres = nil
	m.mu.Unlock()
	if pm == nil {
		return nil
	}
	// With postgres no longer running, no new monitoring session opens;
	// the open ones must not hold up a smart shutdown.
	m.statusSession.close()
	m.metricsSession.close()
	err := pm.Stop(mode, timeouts)
	m.record(lifecycle.Stopped)
	return err
}

// reload makes postgres re-read its configuration, and waits until it has:
// a new session's pg_conf_load_time() moves past the one before the reload.
// The wait is bounded (ReloadTimeout): past it, the error says postgres did
// not load the configuration, which is on disk and applies at its next
// start.
func (m *Manager) reload(ctx context.Context) (instanceapi.ConfigResult, error) {
	var res instanceapi.ConfigResult
	if !m.running() {
		return res, nil // the new files apply at the next start
	}
	bound := cmp.Or(m.opts.ReloadTimeout, DefaultReloadTimeout)
	waitCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	if err := m.reloadAndWait(waitCtx); err != nil {
		if waitCtx.Err() != nil && ctx.Err() == nil {
			return res, fmt.Errorf("postgres did not load its new configuration within %s of SIGHUP (an image whose postgres ignores SIGHUP, "+
				"or a hung postmaster); the configuration is written and applies when postgres restarts: %w", bound, err)
		}
		return res, err
	}
	res.Reloaded = true
	return res, m.readSettingsState(ctx, &res)
}

// reloadAndWait sends SIGHUP and waits until pg_conf_load_time() moves.
func (m *Manager) reloadAndWait(ctx context.Context) error {
	before, err := m.confLoadTime(ctx)
	if err != nil {
		return err
	}
	if err := m.signalReload(); err != nil {
		return err
	}
	for {
		loaded, err := m.confLoadTime(ctx)
		if err != nil {
			return err
		}
		if loaded.After(before) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// signalReload asks a running postgres to re-read its configuration,
// without waiting for it.
func (m *Manager) signalReload() error {
	m.mu.Lock()
	pm := m.postgres
	m.mu.Unlock()
	if pm == nil {
		return nil
	}
	if err := syscall.Kill(pm.Pid(), syscall.SIGHUP); err != nil {
		return fmt.Errorf("while asking postgres to reload: %w", err)
	}
	return nil
}

func (m *Manager) confLoadTime(ctx context.Context) (time.Time, error) {
	conn, err := m.connect(ctx)
	if err != nil {
		return time.Time{}, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var t time.Time
	err = conn.QueryRow(ctx, "SELECT pg_conf_load_time()").Scan(&t)
	return t, err
}

func (m *Manager) readSettingsState(ctx context.Context, res *instanceapi.ConfigResult) error {
	conn, err := m.connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var st instanceapi.Status
	if err := querySettingsStatus(ctx, conn, &st); err != nil {
		return err
	}
	res.PendingRestart, res.Errors = st.PendingRestart, st.ConfigErrors
	return nil
}

// ForwardSignal passes a signal (such as SIGHUP) on to the postmaster.
func (m *Manager) ForwardSignal(sig syscall.Signal) {
	m.mu.Lock()
	pm := m.postgres
	m.mu.Unlock()
	if pm != nil {
		_ = syscall.Kill(pm.Pid(), sig)
	}
}
