package instance

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// sourceLimited is a listener that closes, as soon as it is accepted, a
// connection from an address that already holds max of them.
type sourceLimited struct {
	net.Listener
	max int
	log logr.Logger

	mu         sync.Mutex
	open       map[netip.Addr]int
	lastLogged time.Time
}

func limitPerSource(l net.Listener, maxPerSource int, log logr.Logger) net.Listener {
	return &sourceLimited{Listener: l, max: maxPerSource, log: log, open: map[netip.Addr]int{}}
}

func (l *sourceLimited) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceAddr(c)
		if l.take(src) {
			return &sourceConn{Conn: c, release: func() { l.release(src) }}, nil
		}
		_ = c.Close()
	}
}

// take counts a connection from src, or says it is one too many.
func (l *sourceLimited) take(src netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[src] >= l.max {
		if now := time.Now(); now.Sub(l.lastLogged) > time.Minute {
			l.lastLogged = now
			l.log.Info("Closing connections over the limit of one address", "address", src.String(), "limit", l.max)
		}
		return false
	}
	l.open[src]++
	return true
}

func (l *sourceLimited) release(src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[src]--; l.open[src] <= 0 {
		delete(l.open, src)
	}
}

// sourceAddr is the connection's remote address (the zero Addr, one
// source for all, when it has none).
func sourceAddr(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// sourceConn gives its count back once, when closed.
type sourceConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *sourceConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
