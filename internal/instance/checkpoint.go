package instance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
)

// Checkpoint runs CHECKPOINT on the primary. A switchover asks for it
// before the step-down: the fast shutdown that follows writes every dirty
// buffer in its shutdown checkpoint while refusing all writes, so the
// fewer there are left, the shorter the write gap (what a DBA does by
// hand before a planned switchover). It does not take the manager's
// operation lock: a CHECKPOINT can take seconds, and a fence or a
// promotion must not wait for it.
func (m *Manager) Checkpoint(ctx context.Context) (instanceapi.CheckpointResult, error) {
	if st := m.snapshot(); st.role != instanceapi.RolePrimary {
		return instanceapi.CheckpointResult{}, errors.New("this instance is not the primary")
	}
	conn, err := m.connect(ctx)
	if err != nil {
		return instanceapi.CheckpointResult{}, fmt.Errorf("while connecting to checkpoint: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	started := time.Now()
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return instanceapi.CheckpointResult{}, fmt.Errorf("while checkpointing: %w", err)
	}
	took := time.Since(started)
	m.log.Info("Checkpointed", "took", took.String())
	return instanceapi.CheckpointResult{TookMilliseconds: took.Milliseconds()}, nil
}
