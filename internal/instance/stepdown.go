package instance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"tusk.dev/tusk/internal/instance/supervisor"
	"tusk.dev/tusk/internal/instanceapi"
)

// opStepDown names the step-down operation: the one a terminating manager
// still runs (a handover).
const opStepDown = "step-down"

// StepDown is the first half of a switchover: the primary shuts down
// cleanly, which makes PostgreSQL send every WAL record (the shutdown
// checkpoint included) to the connected standbys and wait until they have
// flushed it, then starts again as a replica of up. No pg_rewind is needed:
// the new primary's history will fork after the shutdown checkpoint. The
// result names that checkpoint, so the operator can check the standby it
// promotes has it.
func (m *Manager) StepDown(ctx context.Context, up instanceapi.Upstream) (instanceapi.StepDownResult, error) {
	v, err := m.do(ctx, opStepDown, func(ctx context.Context) (any, error) {
		if st := m.snapshot(); st.role != instanceapi.RolePrimary {
			return instanceapi.StepDownResult{}, errors.New("this instance is not the primary")
		}
		if !m.running() {
			// A fenced primary has no clean shutdown to hand over.
			return instanceapi.StepDownResult{}, errors.New("postgres is not running")
		}
		if err := m.stopPostgres(supervisor.Fast); err != nil {
			return instanceapi.StepDownResult{}, err
		}
		res, err := m.shutdownCheckpoint(ctx)
		if err != nil {
			// Not a clean shutdown: come back as the primary it was, so
			// nothing is lost, and let the operator decide.
			return instanceapi.StepDownResult{}, errors.Join(err, m.startPostgres(ctx))
		}
		m.mu.Lock()
		m.state.role = instanceapi.RoleReplica
		m.state.upstream = up
		m.mu.Unlock()
		m.log.Info("Stepped down; following the new primary", "shutdownCheckpoint", res.ShutdownCheckpointLSN, "upstream", up.Host)
		if m.lease != nil {
			// The new primary need not wait for the Lease to expire.
			if err := m.lease.release(ctx); err != nil {
				m.log.Error(err, "Releasing the primary Lease after stepping down")
			}
		}
		if m.snapshot().life.Terminating() {
			// A handover: the pod is going, postgres stays stopped.
			return res, nil
		}
		return res, m.startPostgres(ctx)
	})
	res, _ := v.(instanceapi.StepDownResult)
	return res, err
}

// shutdownCheckpoint reads pg_controldata and returns the location of the
// shutdown checkpoint, or an error when the cluster was not shut down
// cleanly.
func (m *Manager) shutdownCheckpoint(ctx context.Context) (instanceapi.StepDownResult, error) {
	// Started through the reaper: as PID 1 it reaps every child it was
	// not told about, and Go's own wait would then fail.
	cmd := exec.CommandContext(ctx, filepath.Join(m.opts.BinDir, "pg_controldata"), "-D", m.opts.DataDir) //nolint:gosec // PostgreSQL's own program
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out strings.Builder
	cmd.Stdout = &out
	if err := m.reaper.Start(cmd); err != nil {
		return instanceapi.StepDownResult{}, fmt.Errorf("while starting pg_controldata: %w", err)
	}
	if err := m.reaper.Wait(cmd); err != nil {
		return instanceapi.StepDownResult{}, fmt.Errorf("while running pg_controldata: %w", err)
	}
	fields := controlDataFields(out.String())
	if state := fields["Database cluster state"]; state != instanceapi.StateShutDown {
		return instanceapi.StepDownResult{}, fmt.Errorf("postgres did not shut down cleanly (cluster state %q)", state)
	}
	lsn := fields["Latest checkpoint location"]
	if lsn == "" {
		return instanceapi.StepDownResult{}, errors.New("pg_controldata shows no checkpoint location")
	}
	return instanceapi.StepDownResult{ShutdownCheckpointLSN: lsn}, nil
}

// controlDataFields parses pg_controldata's "Name:   value" lines.
func controlDataFields(out string) map[string]string {
	fields := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if ok {
			fields[strings.TrimSpace(name)] = strings.TrimSpace(value)
		}
	}
	return fields
}
