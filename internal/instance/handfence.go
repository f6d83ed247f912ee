package instance

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"tusk.dev/tusk/internal/instance/lifecycle"
	"tusk.dev/tusk/internal/instance/supervisor"
)

// fenceMessage is lastError for a fenced instance: the hand fence first,
// as it is what a human must lift, then leaseReason when not empty.
func (s state) fenceMessage(leaseReason string) string {
	if !s.life.FencedByHand() {
		return leaseReason
	}
	if leaseReason == "" {
		return lifecycle.ErrFencedByHand.Error()
	}
	return lifecycle.ErrFencedByHand.Error() + "; also " + leaseReason
}

// handFenceFile, in the run directory, marks a hand fence. The run
// directory is an emptyDir: the mark survives a container restart, so a
// restarted manager keeps postgres stopped, but not the pod's recreation,
// after which the operator fences the instance again.
const handFenceFile = "fenced-by-hand"

func (m *Manager) handFenceMark() string { return filepath.Join(m.opts.RunDir, handFenceFile) }

// Fence stops postgres by hand (POST /v1/fence) and keeps it stopped,
// through crashes, restart timers, Lease renewals and container restarts,
// until Unfence. The shutdown is fast: sessions end at once, and the pod
// and its data stay for inspection. A primary keeps renewing its Lease
// meanwhile (see renewLease). Fencing a fenced instance changes nothing.
func (m *Manager) Fence(ctx context.Context) error {
	_, err := m.do(ctx, "fence", func(context.Context) (any, error) {
		m.record(lifecycle.FencedByHand) // first: nothing may start it from here on
		m.log.Info("Fencing this instance by hand")
		marked := writeFileAtomic(m.handFenceMark(), []byte("fenced by hand at "+time.Now().UTC().Format(time.RFC3339)+"\n"))
		if marked != nil {
			marked = fmt.Errorf("while marking the hand fence for a restart: %w", marked)
		}
		err := m.stopPostgres(supervisor.Fast)
		m.mu.Lock()
		defer m.mu.Unlock()
		m.state.lastError = m.state.fenceMessage(leaseFenceReason(m.state))
		return nil, errors.Join(err, marked)
	})
	return err
}

// fencedByHandAtStart honours a hand fence marked before this start: the
// instance stays fenced, and the data directory is left as it is (not
// bootstrapped nor rewound) until Unfence.
func (m *Manager) fencedByHandAtStart(ctx context.Context) bool {
	if _, err := os.Stat(m.handFenceMark()); err != nil {
		return false
	}
	m.log.Info("Fenced by hand before this start: postgres stays stopped and the data directory as it is until unfenced")
	m.unprepared = true
	role := m.opts.Role
	if isDataDir(m.opts.DataDir) {
		role = m.startRole(ctx)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state.role = role
	m.recordLocked(lifecycle.FencedByHand) // postgres not started: Fenced
	m.state.lastError = m.state.fenceMessage("")
	return true
}

// leaseFenceReason is what lastError says of a Lease fence.
func leaseFenceReason(s state) string {
	if !s.life.LeaseFenced() {
		return ""
	}
	return lifecycle.ErrLeaseFenced.Error()
}

// Unfence lifts a hand fence (POST /v1/unfence) and starts postgres. It
// does not lift a Lease fence: a primary starts only once it holds the
// Lease, or the answer is an error and it stays fenced until it does. A
// former primary whose rejoin could not be done yet starts once the run
// loop has done it. Unfencing an instance not fenced by hand changes
// nothing.
func (m *Manager) Unfence(ctx context.Context) error {
	_, err := m.do(ctx, "unfence", func(ctx context.Context) (any, error) { return nil, m.unfence(ctx) })
	return err
}

func (m *Manager) unfence(ctx context.Context) error {
	if !m.snapshot().life.FencedByHand() {
		return nil
	}
	m.log.Info("Lifting the hand fence")
	if m.unprepared {
		// Fenced since before this start: the data directory was left
		// as it was. A failure leaves it fenced.
		if err := m.prepareDataDir(ctx); err != nil {
			m.record(lifecycle.Stopped) // still fenced by hand: Fenced
			return fmt.Errorf("the instance stays fenced: %w", err)
		}
		m.unprepared = false
	}
	if err := os.Remove(m.handFenceMark()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the instance stays fenced: while removing the hand fence's mark: %w", err)
	}
	m.record(lifecycle.Unfenced)
	if _, pending := m.snapshot().life.PendingRejoin(); pending {
		// The data directory was a former primary's and could not rejoin
		// yet (its primary does not answer): started now it would be a
		// second writable primary. The run loop tries the rejoin again
		// and starts postgres once it is done.
		m.log.Info("The hand fence is lifted; postgres starts once the data directory has rejoined its primary")
		return nil
	}
	if m.running() {
		return nil
	}
	if !m.mayStart(ctx) {
		return fmt.Errorf("the hand fence is lifted, but postgres stays stopped: %s", m.snapshot().lastError)
	}
	return m.startPostgres(ctx)
}
