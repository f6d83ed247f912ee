package supervisor

import (
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestKillTreeKillsEveryDescendant: the children of the root lead sessions
// of their own (setsid), as PostgreSQL's do, and one has a child of its
// own; killing the root's process group would miss them all. killTree
// leaves none of them alive, with the root stopped (SIGSTOP) first as a
// hung postmaster would be.
func TestKillTreeKillsEveryDescendant(t *testing.T) {
	root := exec.Command("sh", "-c", `setsid sleep 300 & setsid sh -c 'sleep 300 & wait' & wait`)
	root.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := root.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- root.Wait() }()
	var tree []int
	for deadline := time.Now().Add(time.Minute); len(tree) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the test's process tree did not start: %v", tree)
		}
		time.Sleep(10 * time.Millisecond) // waiting for the shells to fork
		tree = sleepersBelow(root.Process.Pid)
	}
	if err := syscall.Kill(root.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	if alive := killTree(root.Process.Pid); len(alive) > 0 {
		t.Fatalf("alive after killTree: %v", alive)
	}
	for _, pid := range tree {
		if state, _, ok := readStat(fmt.Sprintf("/proc/%d/stat", pid)); ok && state != "Z" {
			t.Errorf("process %d survived killTree in state %s", pid, state)
		}
	}
	if err := <-exited; err == nil || err.Error() != "signal: killed" {
		t.Errorf("the root exited with %v, want killed", err)
	}
}

// sleepersBelow lists the descendants of root: a session-leading sleep, a session-leading shell and its sleep
// once the tree has started.
func sleepersBelow(root int) []int {
	return descendants(root, parentPids())
}
