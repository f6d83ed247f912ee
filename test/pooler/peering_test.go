//go:build integration

package pooler

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"tusk.dev/tusk/internal/pooler"
	"tusk.dev/tusk/internal/testenv"
)

// The first message codes a PostgreSQL connection can open with.
const (
	codeCancelRequest = 80877102
	codeSSLRequest    = 80877103
)

// TestCancelReachesThePeerHoldingTheQuery is what a pooler's Service does
// to a cancel request: it opens a new connection, which may land on
// another pod than the one running the query. Two PgBouncers run as
// peers (peer ids 1 and 2, [peers] naming each other) in front of one
// server; a client runs a long query through the first and sends its
// cancel request to the second. Without peering the second does not know
// the key and the query runs on.
func TestCancelReachesThePeerHoldingTheQuery(t *testing.T) {
	p := newClusterPKI(t)
	s := startServer(t, p, "a")
	s.prepare(t, "")
	for name, peering := range map[string]bool{"peers": true, "no peering": false} {
		t.Run(name, func(t *testing.T) {
			dir1, dir2 := workDir(t), workDir(t)
			c1, c2 := poolerConfig(t, p, dir1, "127.0.0.1", s.port), poolerConfig(t, p, dir2, "127.0.0.1", s.port)
			// The second PgBouncer reaches the first through a relay that
			// records how each connection opens.
			relay := startRelay(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(c1.ListenPort)))
			id1, id2 := 0, 0
			if peering {
				id1, id2 = 1, 2
				self2 := pooler.Peer{ID: 2, Host: "127.0.0.1", Port: c2.ListenPort}
				c1.Peers = []pooler.Peer{{ID: 1, Host: "127.0.0.1", Port: c1.ListenPort}, self2}
				c2.Peers = []pooler.Peer{{ID: 1, Host: "127.0.0.1", Port: relay.port}, self2}
			}
			b1 := startPeer(t, dir1, c1, id1)
			startPeer(t, dir2, c2, id2)
			conn, cancelTo := connectRedirectingCancels(t, b1)
			query := runSleep(conn)
			waitForActiveSleep(t, s)

			start := time.Now()
			cancelTo(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(c2.ListenPort)))
			if peering {
				expectCanceled(t, query, 5*time.Second)
				t.Logf("cancelled through the peer %v after the request; the peer's connection opened with %v",
					time.Since(start).Round(time.Millisecond), relay.openings())
				if got := relay.openings(); len(got) == 0 || got[0] != codeCancelRequest {
					t.Errorf("the forwarded cancel opened with %v, want a plain CancelRequest (%d)", got, codeCancelRequest)
				}
				return
			}
			select {
			case err := <-query:
				t.Fatalf("without peering the query ended %v after a cancel sent to the other PgBouncer: %v", time.Since(start), err)
			case <-time.After(3 * time.Second):
			}
			if got := relay.openings(); len(got) != 0 {
				t.Errorf("without peering the other PgBouncer still connected to the first: %v", got)
			}
			// The same request sent where the query runs cancels it.
			cancelTo(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(c1.ListenPort)))
			expectCanceled(t, query, 5*time.Second)
		})
	}
}

// connectRedirectingCancels connects a client to b; cancelTo sends the
// client's cancel request, as pgx sends it (over TLS, since the client
// connection uses TLS), to another address: where a Service could send it.
func connectRedirectingCancels(t *testing.T, b *bouncer) (*pgx.Conn, func(*testing.T, string)) {
	t.Helper()
	cfg, err := pgx.ParseConfig(b.clientDSN(appUser, appPassword, "verify-full"))
	if err != nil {
		t.Fatal(err)
	}
	var redirect atomic.Pointer[string]
	var d net.Dialer
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if to := redirect.Load(); to != nil {
			addr = *to
		}
		return d.DialContext(ctx, network, addr)
	}
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("connecting through the pooler: %v\n%s", err, b.output())
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn, func(t *testing.T, addr string) {
		t.Helper()
		redirect.Store(&addr)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := conn.PgConn().CancelRequest(ctx); err != nil {
			t.Fatalf("sending the cancel request to %s: %v", addr, err)
		}
	}
}

// runSleep starts a minute's query on conn; its error arrives when it ends.
func runSleep(conn *pgx.Conn) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(context.Background(), "SELECT pg_sleep(60)")
		done <- err
	}()
	return done
}

// waitForActiveSleep waits until s runs the query runSleep sent.
func waitForActiveSleep(t *testing.T, s *server) {
	t.Helper()
	admin := s.superuser(t, "postgres")
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = 'SELECT pg_sleep(60)'").
			Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return errors.New("the query is not running yet")
		}
		return nil
	})
}

// expectCanceled waits at most within for query to end with
// query_canceled (57014).
func expectCanceled(t *testing.T, query <-chan error, within time.Duration) {
	t.Helper()
	select {
	case err := <-query:
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
			t.Fatalf("the query ended with %v, want SQLSTATE 57014 (query_canceled)", err)
		}
	case <-time.After(within):
		t.Fatalf("the query still runs %v after the cancel request", within)
	}
}

// relay forwards TCP connections to target, recording the code each
// opens with (its first message's second 4 bytes: an SSLRequest's or a
// CancelRequest's code).
type relay struct {
	port  int
	mu    sync.Mutex
	codes []uint32
}

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	r := &relay{port: l.Addr().(*net.TCPAddr).Port}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go r.forward(c, target)
		}
	}()
	return r
}

func (r *relay) forward(c net.Conn, target string) {
	defer func() { _ = c.Close() }()
	head := make([]byte, 8)
	if _, err := io.ReadFull(c, head); err != nil {
		return
	}
	r.mu.Lock()
	r.codes = append(r.codes, binary.BigEndian.Uint32(head[4:]))
	r.mu.Unlock()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer func() { _ = up.Close() }()
	if _, err := up.Write(head); err != nil {
		return
	}
	// Either side closing closes both, as a direct connection would.
	go func() {
		_, _ = io.Copy(c, up)
		_ = c.Close()
	}()
	_, _ = io.Copy(up, c)
}

func (r *relay) openings() []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint32(nil), r.codes...)
}

// TestManagerRunsPgBouncerWithThePodsPeerID: `tusk pooler` in the pod
// pool-1 runs PgBouncer with peer_id 2 and the [peers] section of the
// configuration it was given; a RELOAD (as SIGHUP does) reads that
// configuration again, a repointed server included, and peer_id stays.
func TestManagerRunsPgBouncerWithThePodsPeerID(t *testing.T) {
	t.Parallel()
	p, a, b := startServers(t)
	dir := workDir(t)
	c := poolerConfig(t, p, dir, "127.0.0.1", a.port)
	c.Peers = []pooler.Peer{{ID: 1, Host: "pool-0.pool-peers.db.svc", Port: 5432}, {ID: 2, Host: "127.0.0.1", Port: c.ListenPort}}
	m := startManaged(t, p, dir, c, "--pod-name=pool-1")
	checkPeering := func(when string) {
		t.Helper()
		cfg := map[string]string{}
		for _, line := range strings.Split(m.admin(t, dir, "SHOW CONFIG"), "\n") {
			if f := strings.Split(line, "|"); len(f) > 1 {
				cfg[f[0]] = f[1]
			}
		}
		if cfg["peer_id"] != "2" || cfg["listen_port"] != strconv.Itoa(c.ListenPort) {
			t.Errorf("%s: peer_id %q, listen_port %q; want 2 and %d", when, cfg["peer_id"], cfg["listen_port"], c.ListenPort)
		}
		if peers := strings.Fields(m.admin(t, dir, "SHOW PEERS")); len(peers) != 2 ||
			!strings.HasPrefix(peers[0], "1|pool-0.pool-peers.db.svc|5432|") {
			t.Errorf("%s: SHOW PEERS %q, want the two of the configuration", when, peers)
		}
	}
	checkPeering("at start")
	conn := m.connect(t)
	if name, err := clusterName(context.Background(), conn); err != nil || name != "a" {
		t.Fatalf("before the reload: %q, %v; want a", name, err)
	}

	c.ServerPort = b.port
	ini, err := pooler.INI(c)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "pgbouncer.ini", []byte(ini))
	m.admin(t, dir, "RELOAD")
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		name, err := clusterName(ctx, conn)
		if err != nil {
			t.Fatalf("the client across the reload: %v", err)
		}
		if name != "b" {
			return fmt.Errorf("still on %s", name)
		}
		return nil
	})
	checkPeering("after RELOAD")
}
