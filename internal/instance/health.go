package instance

import (
	"context"
	"errors"
	"fmt"
)

// errNotAnswering: the primary's postgres did not answer a trivial query in
// time, so it does not renew its Lease.
var errNotAnswering = errors.New("postgres did not answer")

// checkAnswers runs SELECT 1 in a new session over the unix socket, as the
// manager's other queries connect, and says why not when postgres did not
// answer within half the renewal period. A new session each time proves
// the postmaster still accepts connections too, not only that one backend
// lives. The query runs in a goroutine of its own: whatever blocks it, the
// run loop waits no longer than the bound, and the goroutine ends when its
// context does.
func (m *Manager) checkAnswers(ctx context.Context) error {
	bound := m.opts.Lease.RenewEvery / 2
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	answered := make(chan error, 1)
	go func() { answered <- m.selectOne(ctx) }()
	select {
	case err := <-answered:
		if err != nil {
			return fmt.Errorf("%w within %s: %w", errNotAnswering, bound, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w within %s", errNotAnswering, bound)
	}
}

func (m *Manager) selectOne(ctx context.Context) error {
	conn, err := m.connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}
