package supervisor

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// TestReaperCollectsOrphansButNotOurChildren runs the reaper in this test
// process, made a child subreaper so orphans come to it as they would to
// PID 1 in a container.
func TestReaperCollectsOrphansButNotOurChildren(t *testing.T) {
	if err := BecomeSubreaper(); err != nil {
		t.Fatalf("becoming a subreaper: %v", err)
	}
	r := NewReaper(logr.Discard())
	stop := make(chan struct{})
	defer close(stop)
	go r.Run(stop)

	// The shell exits at once, orphaning its background sleep, which is
	// re-parented to this process and exits a moment later.
	orphaner := exec.Command("sh", "-c", "sleep 0.2 & exit 0")
	if err := r.Start(orphaner); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(orphaner); err != nil {
		t.Fatalf("our own child's exit status was lost: %v", err)
	}
	// A child of ours that exits with a status keeps it, even while the
	// reaper is reaping orphans around it.
	failing := exec.Command("sh", "-c", "sleep 0.3; exit 3")
	if err := r.Start(failing); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := r.Wait(failing); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Wait() = %v, want exit status 3", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.Reaped() == 0 || len(zombieChildren(os.Getpid())) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("reaped %d orphans; zombies left: %v", r.Reaped(), zombieChildren(os.Getpid()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
