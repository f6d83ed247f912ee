package poolermanager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"tusk.dev/tusk/internal/poolerapi"
)

// Errors a pause or resume request is answered with.
var (
	// errInvalidPause is a request whose bounds make no sense (400).
	errInvalidPause = errors.New("invalid pause request")
	// errBusy is a pause while another is under way or holds (409): one
	// pause at a time, and a second never extends the first, so that
	// ResumeAfter stays the bound the first request set.
	errBusy = errors.New("PgBouncer is already paused")
	// errResumedWhileWaiting is a pause a resume ended before it took
	// hold (409): the operator gave up on it.
	errResumedWhileWaiting = errors.New("the pause was ended by a resume before it took hold")
)

// pauser pauses and resumes PgBouncer, one pause at a time.
type pauser struct {
	admin   *adminConsole
	metrics *metrics
	log     logr.Logger

	mu      sync.Mutex
	pausing bool // a PAUSE is waiting for its transactions
	// abandon is closed by a resume that comes while pausing.
	abandon chan struct{}
	since   time.Time // when the pause took hold; zero when not paused
	timer   *time.Timer
	// pauses counts the pauses that took hold, so that a ResumeAfter
	// timer that fired as its pause ended leaves the next one alone.
	pauses int
}

func newPauser(admin *adminConsole, m *metrics, log logr.Logger) *pauser {
	return &pauser{admin: admin, metrics: m, log: log}
}

func (p *pauser) state() (bool, *time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.since.IsZero() {
		return false, nil
	}
	since := p.since
	return true, &since
}

func validatePause(req poolerapi.PauseRequest) error {
	if req.Wait <= 0 {
		return fmt.Errorf("%w: wait must be positive (how long the pause may wait for running transactions), got %s", errInvalidPause, req.Wait)
	}
	if req.ResumeAfter <= req.Wait {
		return fmt.Errorf("%w: resumeAfter (%s) must be longer than wait (%s): it bounds the whole pause, wait included",
			errInvalidPause, req.ResumeAfter, req.Wait)
	}
	return nil
}

// begin claims the one pause.
func (p *pauser) begin() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.pausing:
		return fmt.Errorf("%w: another pause is waiting for its transactions to end", errBusy)
	case !p.since.IsZero():
		return fmt.Errorf("%w since %s: resume it first (a second pause does not extend the first)",
			errBusy, p.since.UTC().Format(time.RFC3339Nano))
	}
	p.pausing = true
	p.abandon = make(chan struct{})
	return nil
}

// Pause sends PAUSE and waits at most req.Wait for it to take hold. Past
// that, it resumes PgBouncer from a second session and closes the first
// (whose PAUSE would never answer), and says TimedOut. A pause that took
// hold ends at req.ResumeAfter, counted from now, unless resumed before.
func (p *pauser) Pause(ctx context.Context, req poolerapi.PauseRequest) (poolerapi.PauseResult, error) {
	if err := validatePause(req); err != nil {
		return poolerapi.PauseResult{}, err
	}
	if err := p.begin(); err != nil {
		return poolerapi.PauseResult{}, err
	}
	start := time.Now()
	p.mu.Lock()
	abandon := p.abandon
	p.mu.Unlock()
	timedOut, err := p.pauseWithin(ctx, req.Wait, abandon)
	waited := time.Since(start)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pausing = false
	switch {
	case errors.Is(err, errResumedWhileWaiting):
		p.metrics.pauseEnded("abandoned", waited)
		return poolerapi.PauseResult{Waited: waited}, err
	case err != nil:
		p.metrics.pauseEnded("failed", waited)
		return poolerapi.PauseResult{Waited: waited}, err
	case timedOut:
		p.metrics.pauseEnded("timed_out", waited)
		p.log.Info("The pause did not take hold in time: PgBouncer resumed", "wait", req.Wait)
		return poolerapi.PauseResult{TimedOut: true, Waited: waited}, nil
	}
	p.since = time.Now()
	p.pauses++
	p.metrics.pauseEnded("paused", waited)
	this := p.pauses
	p.timer = time.AfterFunc(req.ResumeAfter-waited, func() { p.resumeOnItsOwn(this) })
	p.log.Info("PgBouncer paused", "waited", waited, "resumeAfter", req.ResumeAfter)
	return poolerapi.PauseResult{Paused: true, Waited: waited}, nil
}

// pauseWithin sends PAUSE on a session of its own and waits for it at
// most wait, or until abandon is closed; then, RESUME from another
// session, and the first is closed. The request's ctx bounds only
// connecting: once PAUSE is sent, only wait or a resume ends it, so that
// a client that hangs up leaves no pause pending for long.
func (p *pauser) pauseWithin(ctx context.Context, wait time.Duration, abandon <-chan struct{}) (timedOut bool, err error) {
	connectCtx, cancel := context.WithTimeout(ctx, min(wait, adminTimeout))
	conn, err := p.admin.connect(connectCtx)
	cancel()
	if err != nil {
		return false, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	done := make(chan error, 1)
	pauseCtx := context.WithoutCancel(ctx) // only wait ends the PAUSE
	go func() {
		_, err := run(pauseCtx, conn, "PAUSE")
		done <- err
	}()
	var abandoned bool
	select {
	case err := <-done:
		return false, err
	case <-time.After(wait):
	case <-abandon:
		abandoned = true
	}
	resumeErr := p.resume(context.Background())
	// Closing the socket ends the PAUSE still waiting on it.
	_ = conn.Conn().Close()
	if err := <-done; err != nil {
		p.log.V(1).Info("The PAUSE left waiting ended with its session", "error", err.Error())
	}
	switch {
	case resumeErr != nil:
		return true, fmt.Errorf("the pause did not take hold within %s and PgBouncer could not be resumed: %w", wait, resumeErr)
	case abandoned:
		return false, errResumedWhileWaiting
	}
	return true, nil
}

// resume sends RESUME; PgBouncer's refusal because it is not paused is no
// failure.
func (p *pauser) resume(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	_, err := p.admin.query(ctx, "RESUME")
	if err != nil && strings.Contains(err.Error(), "not paused") {
		return nil
	}
	return err
}

// Resume ends the pause, if any.
func (p *pauser) Resume(ctx context.Context) (poolerapi.ResumeResult, error) {
	return p.end(ctx, "request", 0)
}

// end ends the pause (only pause number only, when not zero).
func (p *pauser) end(ctx context.Context, by string, only int) (poolerapi.ResumeResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pausing && only == 0 {
		// The pause waiting for its transactions is abandoned: it
		// resumes PgBouncer itself, and never takes hold.
		p.abandonPending()
		return poolerapi.ResumeResult{}, nil
	}
	if p.since.IsZero() || (only != 0 && only != p.pauses) {
		return poolerapi.ResumeResult{}, nil
	}
	if err := p.resume(ctx); err != nil {
		return poolerapi.ResumeResult{}, fmt.Errorf("while resuming PgBouncer: %w", err)
	}
	lasted := time.Since(p.since)
	p.since = time.Time{}
	p.timer.Stop()
	p.metrics.resumed(by, lasted)
	p.log.Info("PgBouncer resumed", "by", by, "pausedFor", lasted)
	return poolerapi.ResumeResult{WasPaused: true, PausedFor: lasted}, nil
}

// abandonPending ends the wait of the pending pause, once.
func (p *pauser) abandonPending() {
	select {
	case <-p.abandon:
	default:
		close(p.abandon)
	}
}

// resumeOnItsOwn ends a pause nobody resumed within its ResumeAfter.
// It tries again every second until PgBouncer resumes, or is gone (a
// restarted PgBouncer is not paused, and forget ends the tries).
func (p *pauser) resumeOnItsOwn(pause int) {
	if _, err := p.end(context.Background(), "deadline", pause); err != nil {
		p.log.Error(err, "The pause outlasted its resumeAfter, and PgBouncer could not be resumed; trying again in 1 s")
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.pauses == pause && !p.since.IsZero() {
			p.timer = time.AfterFunc(time.Second, func() { p.resumeOnItsOwn(pause) })
		}
	}
}

// resumeForShutdown ends a pause before PgBouncer's safe shutdown, which
// waits for the transactions a pause holds.
func (p *pauser) resumeForShutdown(ctx context.Context) {
	if _, err := p.end(ctx, "shutdown", 0); err != nil {
		p.log.Error(err, "Could not resume PgBouncer before shutting it down")
	}
}

// forget drops the pause of a PgBouncer that is gone.
func (p *pauser) forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.timer != nil {
		p.timer.Stop()
	}
	p.since = time.Time{}
}
