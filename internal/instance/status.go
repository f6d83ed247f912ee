package instance

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
)

// Status reports the instance: the manager's own state, and what
// PostgreSQL says when it accepts connections, asked now (the operator's
// /status: its decisions need the present).
func (m *Manager) Status(ctx context.Context) instanceapi.Status {
	status := m.managerStatus()
	if status.Phase == instanceapi.PhaseRunning {
		m.addPostgresStatus(ctx, &status)
	}
	return status
}

// managerStatus is the manager's own part of the status: no session.
func (m *Manager) managerStatus() instanceapi.Status {
	st := m.snapshot()
	status := instanceapi.Status{
		Instance:         m.opts.Name,
		Phase:            st.life.Phase(),
		Role:             instanceapi.RoleUnknown,
		Fenced:           st.life.FencedByHand(),
		FencedBy:         st.life.FencedBy(),
		Terminating:      st.life.Terminating(),
		Restarts:         st.restarts,
		CrashStreak:      st.currentCrashStreak(time.Now()),
		LastError:        st.lastError,
		DataDirBytes:     m.dataDirSize(),
		Recovery:         st.recovery,
		DataDir:          st.dataDir,
		StoppedForRejoin: st.stoppedForRejoin,
		Upgrade:          st.upgrade,
		Import:           st.logicalImport,
	}
	if st.role == instanceapi.RoleReplica {
		status.Diverged = m.postmasterDiverged()
		up := st.upstream
		status.Upstream = &up
	}
	if !st.lastPasswordRotation.IsZero() {
		at := st.lastPasswordRotation.UTC()
		status.LastPasswordRotation = &at
	}
	return status
}

// addPostgresStatus adds what postgres says, on the status session, to
// status.
func (m *Manager) addPostgresStatus(ctx context.Context, status *instanceapi.Status) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err := m.statusSession.observe(ctx, m, func(ctx context.Context, conn *pgx.Conn) error {
		observed := *status
		if err := m.queryPostgresStatus(ctx, conn, &observed); err != nil {
			return err
		}
		*status = observed
		return nil
	})
	if err != nil {
		// status is the manager's part alone: role unknown, not ready.
		status.LastError = "while asking postgres: " + err.Error()
	}
}

// queryPostgresStatus fills what postgres says into status: its role and
// positions, and the archiver's state on a primary that archives.
func (m *Manager) queryPostgresStatus(ctx context.Context, conn *pgx.Conn, status *instanceapi.Status) error {
	if err := queryStatus(ctx, conn, status); err != nil {
		return err
	}
	m.opts.LogFields.SetTimeline(status.Timeline)
	if m.opts.WALArchive == nil || status.Role != instanceapi.RolePrimary {
		return nil
	}
	archive, err := queryArchiveStatus(ctx, conn)
	if err != nil {
		status.LastError = err.Error()
		return nil
	}
	if archive.Failing {
		archive.Reason = m.walWatcher.lastFailure()
	}
	status.Archive = archive
	return nil
}

// postmasterDiverged is what the running postmaster said about diverging
// from its upstream's timeline ("" when nothing, or when none runs).
func (m *Manager) postmasterDiverged() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.postgres == nil {
		return ""
	}
	return m.postgres.Diverged()
}

// dirSizer measures the data directory at most once per interval: walking
// a large directory on every status request would cost more than it tells.
type dirSizer struct {
	mu       sync.Mutex
	measured time.Time
	bytes    int64
}

const dirSizeInterval = 30 * time.Second

func (m *Manager) dataDirSize() int64 {
	d := &m.sizer
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Since(d.measured) < dirSizeInterval {
		return d.bytes
	}
	d.bytes, d.measured = dirSize(m.opts.DataDir), time.Now()
	return d.bytes
}

// currentCrashStreak is the crash streak as of now: a postgres that has run
// for crashLoopStableRun since its last start has ended the streak.
func (st state) currentCrashStreak(now time.Time) int {
	if st.life.Phase() == instanceapi.PhaseRunning && now.Sub(st.startedAt) >= crashLoopStableRun {
		return 0
	}
	return st.crashStreak
}
