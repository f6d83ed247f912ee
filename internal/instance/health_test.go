package instance

import (
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestCheckAnswersGivesUpOnASilentServer: a server that accepts the
// connection and never answers, as a stopped postmaster's socket does,
// fails the check instead of blocking it.
func TestCheckAnswersGivesUpOnASilentServer(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, ".s.PGSQL.5432"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			defer func() { _ = conn.Close() }() // silent until the test ends
		}
	}()
	m := &Manager{opts: Options{SocketDir: dir, Port: 5432, Lease: LeaseOptions{RenewEvery: 200 * time.Millisecond}}}
	err = m.checkAnswers(t.Context())
	if !errors.Is(err, errNotAnswering) {
		t.Fatalf("checkAnswers = %v, want %v", err, errNotAnswering)
	}
}
