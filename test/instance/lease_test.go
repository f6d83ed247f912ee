//go:build integration

package instance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcoordination "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

// Short Lease timings, so the tests see fencing and expiry in seconds.
const (
	testLeaseDuration   = 4 * time.Second
	testLeaseRenewEvery = 500 * time.Millisecond
)

// apiServer is one envtest API server the Lease tests share; each test
// uses a Lease of its own.
var apiServer struct {
	once sync.Once
	env  *testenv.Env
	err  error
}

func sharedAPIServer(t *testing.T) *testenv.Env {
	t.Helper()
	apiServer.once.Do(func() {
		ctrllog.SetLogger(logr.Discard()) // envtest's client logs through it
		apiServer.env, apiServer.err = testenv.Start()
	})
	if apiServer.err != nil {
		t.Fatal(apiServer.err)
	}
	return apiServer.env
}

// stopAPIServer stops the shared API server, if a test started it.
func stopAPIServer() {
	if apiServer.env != nil {
		_ = apiServer.env.Stop()
	}
}

// testLease is one Lease on the shared API server. Its methods take the
// calling test, which may be a subtest.
type testLease struct {
	env    *testenv.Env
	name   string
	leases typedcoordination.LeaseInterface
}

func newTestLease(t *testing.T, name string) *testLease {
	t.Helper()
	env := sharedAPIServer(t)
	return &testLease{env: env, name: name, leases: kubernetes.NewForConfigOrDie(env.Config).CoordinationV1().Leases("default")}
}

// args are the instance manager's flags for this Lease, reached at addr
// (the API server's own address, or a proxy's).
func (l *testLease) args(t *testing.T, addr string) []string {
	return l.argsLasting(t, addr, testLeaseDuration)
}

// argsLasting are args for a Lease of another duration.
func (l *testLease) argsLasting(t *testing.T, addr string, duration time.Duration) []string {
	return []string{
		"--lease-name", l.name, "--lease-namespace", "default", "--kubeconfig", writeKubeconfig(t, l.env.Config, addr),
		"--lease-duration", duration.String(), "--lease-renew-every", testLeaseRenewEvery.String(), "--lease-fence-margin", "1500ms",
	}
}

// addr is the API server's address, without a proxy.
func (l *testLease) addr(t *testing.T) string {
	u, err := url.Parse(l.env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func (l *testLease) get(t *testing.T) *coordinationv1.Lease {
	t.Helper()
	lease, err := l.leases.Get(context.Background(), l.name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the Lease: %v", err)
	}
	if lease.Spec.RenewTime == nil {
		t.Fatalf("the Lease %s was never renewed", l.name)
	}
	return lease
}

func (l *testLease) holder(t *testing.T) string { return ptr.Deref(l.get(t).Spec.HolderIdentity, "") }

func (l *testLease) renewTime(t *testing.T) time.Time { return l.get(t).Spec.RenewTime.Time }

func (l *testLease) waitHolder(t *testing.T, want string) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		lease, err := l.leases.Get(ctx, l.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := ptr.Deref(lease.Spec.HolderIdentity, ""); got != want {
			return errors.New("holder " + got)
		}
		return nil
	})
}

// TestPrimaryLease: a primary holds the cluster's Lease; cut off from the
// API server it fences itself (a session opened before commits nothing
// after) before the Lease could expire, and comes back once it renews; a
// Lease another instance holds keeps it fenced until that Lease expires.
func TestPrimaryLease(t *testing.T) {
	lease := newTestLease(t, "pg-primary")
	proxy := newTCPProxy(t, lease.addr(t))
	leaseArgs := lease.args(t, proxy.addr)
	primary := startNode(t, "lease-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: leaseArgs})
	primary.waitReady(instanceapi.RolePrimary)
	lease.waitHolder(t, "lease-1")
	primary.exec("CREATE TABLE ticks (at timestamptz NOT NULL DEFAULT clock_timestamp())")

	t.Run("cut off from the API server, it fences before the Lease expires", func(t *testing.T) {
		stopWriting := writeUntilRefused(t, primary)
		renewed := lease.renewTime(t)
		proxy.cut()
		primary.waitFor("fenced", isFenced)
		last := stopWriting()
		if !last.After(renewed) {
			t.Fatalf("the session committed nothing after the last renewal (%s); last commit %s", renewed, last)
		}
		if !last.Before(renewed.Add(testLeaseDuration)) {
			t.Errorf("a commit at %s was acknowledged after the Lease (renewed %s, %s) could expire", last, renewed, testLeaseDuration)
		}
		t.Logf("last commit %s after the last renewal; the Lease holds %s", last.Sub(renewed), testLeaseDuration)
		proxy.restore()
		primary.waitReady(instanceapi.RolePrimary)
	})

	t.Run("a Lease another instance holds keeps it fenced until it expires", func(t *testing.T) {
		stop := holdLease(t, lease, "intruder")
		primary.waitFor("fenced by the intruder's Lease", isFenced)
		stop()
		primary.waitReady(instanceapi.RolePrimary)
		lease.waitHolder(t, "lease-1")
	})

	t.Run("a switchover hands the Lease over without waiting for it to expire", func(t *testing.T) {
		replica := startNode(t, "lease-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port, extraArgs: leaseArgs})
		replica.waitReady(instanceapi.RoleReplica)
		up := instanceapi.FollowRequest{Upstream: instanceapi.Upstream{Host: "127.0.0.1", Port: replica.port}}
		primary.command(http.MethodPost, instanceapi.PathStepDown, up, nil)
		lease.waitHolder(t, "") // released
		replica.command(http.MethodPost, instanceapi.PathPromote, nil, nil)
		lease.waitHolder(t, "lease-2")
		replica.waitReady(instanceapi.RolePrimary)
		primary.waitReady(instanceapi.RoleReplica)
	})
}

func isFenced(st instanceapi.Status) error {
	if st.Phase != instanceapi.PhaseFenced || st.Ready {
		return errors.New("phase " + string(st.Phase))
	}
	return nil
}

// writeUntilRefused commits a row every 20 ms on one session opened now,
// until the server refuses; stop returns the time of the last commit.
func writeUntilRefused(t *testing.T, n *node) (stop func() time.Time) {
	t.Helper()
	conn, err := n.tryConnect(context.Background(), "postgres", superuserPassword, "app")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var last time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = conn.Close(context.Background()) }()
		for {
			if _, err := conn.Exec(context.Background(), "INSERT INTO ticks DEFAULT VALUES"); err != nil {
				return
			}
			mu.Lock()
			last = time.Now()
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return func() time.Time {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// holdLease takes the Lease as identity and renews it until stop.
func holdLease(t *testing.T, l *testLease, identity string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	take := func() error {
		lease, err := l.leases.Get(ctx, l.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To(identity), RenewTime: &now, AcquireTime: &now,
			LeaseDurationSeconds: ptr.To(int32(testLeaseDuration / time.Second))}
		_, err = l.leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err
	}
	testenv.Eventually(t, waitTimeout, func(context.Context) error { return take() })
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(300 * time.Millisecond):
				_ = take()
			}
		}
	}()
	return func() { cancel(); <-done }
}

// writeKubeconfig writes a kubeconfig for cfg's credentials that reaches the
// API server at addr, readable by the instance's user.
func writeKubeconfig(t *testing.T, cfg *rest.Config, addr string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: "https://" + addr, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(workDir(t), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	chown(t, path)
	return path
}

// tcpProxy forwards a loopback port to the API server; cut closes it and
// every connection through it, as a network partition would.
type tcpProxy struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{t: t, target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
}

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *tcpProxy) restore() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("listening again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// leasedPair starts a primary that holds lease through a proxy (cut it to
// take the primary off the API server) with table t holding ids, and a
// replica of it, caught up, that reads the Lease directly.
func leasedPair(t *testing.T, lease *testLease, prefix string, ids ...int) (primary, replica *node, proxy *tcpProxy) {
	t.Helper()
	proxy = newTCPProxy(t, lease.addr(t))
	primary = startNode(t, prefix+"-1", nodeOptions{role: instanceapi.RolePrimary, extraArgs: lease.args(t, proxy.addr)})
	primary.waitReady(instanceapi.RolePrimary)
	lease.waitHolder(t, prefix+"-1")
	primary.exec("CREATE TABLE t (id int PRIMARY KEY)")
	for _, id := range ids {
		primary.exec(fmt.Sprintf("INSERT INTO t VALUES (%d)", id))
	}
	replica = startNode(t, prefix+"-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port, extraArgs: lease.args(t, lease.addr(t))})
	replica.waitReady(instanceapi.RoleReplica)
	replica.waitIDs(ids...)
	return primary, replica, proxy
}
