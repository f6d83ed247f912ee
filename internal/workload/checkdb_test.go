package workload

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCheckGivesUpOnAServerThatNeverAnswers: a server that accepts the
// connection and then says nothing (a frozen primary) fails the check at
// the read timeout, so a caller can try again instead of waiting forever.
func TestCheckGivesUpOnAServerThatNeverAnswers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() }) // held open, never answered
		}
	}()
	ledger := filepath.Join(t.TempDir(), "ledger")
	if err := os.WriteFile(ledger, []byte(`{"k":"begin","r":"run","t":"2026-11-24T00:00:00Z","table":"t","clients":1}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dsn := "postgres://tusk@" + ln.Addr().String() + "/app?sslmode=disable"

	// The outer context only stops a test that would otherwise hang.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = CheckDatabase(ctx, dsn, "t", ledger, 200*time.Millisecond, CheckOptions{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the read timeout's deadline error, got %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the check waited for the outer context, not its read timeout: %v", err)
	}
}
