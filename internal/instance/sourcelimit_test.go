package instance

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"tusk.dev/tusk/internal/instanceapi"
)

// limitsFixture serves the manager's API in plain HTTP on loopback with
// small limits.
func limitsFixture(t *testing.T, limits HTTPLimits) string {
	t.Helper()
	dir := t.TempDir()
	su := filepath.Join(dir, "superuser")
	if err := os.WriteFile(su, []byte("pw"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := New(Options{
		Name: "pg-1", DataDir: filepath.Join(dir, "pgdata"), SocketDir: dir, RunDir: filepath.Join(dir, "run"),
		Port: 5432, Role: instanceapi.RolePrimary, Secrets: SecretFiles{Superuser: su}, HTTPLimits: limits,
	}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := m.serveHTTP(l)
	t.Cleanup(func() { _ = server.Close() })
	return l.Addr().String()
}

// dialFrom opens a TCP connection to addr from the loopback address from.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedWithin says whether the server closes c (a read sees EOF) within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF)
}

// healthz asks for /healthz over c and says whether it was answered 200.
func healthz(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET "+instanceapi.PathHealthz+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// TestOneSourceCannotTakeTheManagersPort: a pod that opens connections to
// the manager's port without end gets MaxConnectionsPerSource of them,
// the next closed at once, and another address (the kubelet's, the
// operator's) is still answered.
func TestOneSourceCannotTakeTheManagersPort(t *testing.T) {
	addr := limitsFixture(t, HTTPLimits{MaxConnectionsPerSource: 4})
	for range 4 {
		dialFrom(t, "127.0.0.1", addr)
	}
	if extra := dialFrom(t, "127.0.0.1", addr); !closedWithin(extra, 2*time.Second) {
		t.Error("a fifth connection from one address was not closed at once")
	}
	if !healthz(t, dialFrom(t, "127.0.0.2", addr)) {
		t.Error("another address was not answered while one held its limit")
	}
}

// TestIdleConnectionsAreClosed: a kept-alive connection that sends
// nothing more is closed after IdleTimeout.
func TestIdleConnectionsAreClosed(t *testing.T) {
	addr := limitsFixture(t, HTTPLimits{IdleTimeout: 300 * time.Millisecond})
	c := dialFrom(t, "127.0.0.1", addr)
	if !healthz(t, c) {
		t.Fatal("/healthz was not answered")
	}
	if !closedWithin(c, 3*time.Second) {
		t.Error("an idle kept-alive connection was still open after 3 s; IdleTimeout is 300 ms")
	}
}

// TestConnectionsAreBounded: past MaxConnections, a connection waits to be
// served until one closes; the manager never holds more.
func TestConnectionsAreBounded(t *testing.T) {
	addr := limitsFixture(t, HTTPLimits{MaxConnections: 4, MaxConnectionsPerSource: 2})
	var held []net.Conn
	for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
		held = append(held, dialFrom(t, src, addr), dialFrom(t, src, addr))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	waiting := dialFrom(t, "127.0.0.4", addr)
	served := make(chan bool, 1)
	go func() { served <- healthz(t, waiting) }()
	select {
	case <-served:
		t.Fatal("a fifth connection was served while four were open; MaxConnections is 4")
	case <-ctx.Done():
	}
	_ = held[0].Close()
	if !<-served {
		t.Error("the waiting connection was not served once one closed")
	}
}
