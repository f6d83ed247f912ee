package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/pki"
)

// hungInstanceManager starts an HTTPS server with the certificates of a
// cluster's instance managers that takes every request, the operator's
// client certificate checked, and never answers: a frozen manager, or one
// waiting forever on a postgres that ignores SIGHUP. It returns the
// client the operator builds for that cluster, and the pod it calls.
func hungInstanceManager(t *testing.T) (*instanceClient, *corev1.Pod) {
	t.Helper()
	const serverName = "hung-rw.default.svc"
	caData, addr := startHungManager(t, "127.0.0.1:0", serverName)
	ic, err := newInstanceClient(caData, serverName)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	if ic.port, err = strconv.Atoi(port); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hung-1"}, Status: corev1.PodStatus{PodIP: host}}
	return ic, pod
}

// startHungManager serves, at addr, HTTPS with a server certificate for
// serverName from a new CA, requiring a client certificate from it, and
// never answers a request. It returns the CA Secret's data the operator
// would have (the CA and the operator's certificate), and the address.
func startHungManager(t *testing.T, addr, serverName string) (caData map[string][]byte, listening string) {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA("hung-ca", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	server, err := pki.IssueServer(ca, serverName, []string{serverName}, nil, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	operator, err := pki.IssueClient(ca, instanceapi.DefaultAPIClientCN, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	serverCert, err := tls.X509KeyPair(server.CertPEM, server.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first: the handlers return, Close does not wait on them
	return map[string][]byte{keyCACert: ca.CertPEM, keyOperatorCert: operator.CertPEM, keyOperatorKey: operator.KeyPEM}, l.Addr().String()
}

// TestHungInstanceManagerDoesNotHoldAPass: every call the operator makes
// to an instance manager that takes the request and never answers ends
// by its deadline, with an error that says so, even when the caller's
// context has none; the pass, and the worker running it, go on to other
// clusters. The deadlines are scaled down three hundredfold to keep the test
// short; TestEveryCallHasAFiniteDeadline checks the real ones.
func TestHungInstanceManagerDoesNotHoldAPass(t *testing.T) {
	ic, pod := hungInstanceManager(t)
	ic.timeout = func(path string) time.Duration { return callTimeout(path) / 300 }
	m := &member{name: pod.Name, pod: pod}
	r := &ClusterReconciler{}
	callers := map[string]struct {
		path string
		call func(context.Context) error
	}{
		"config push": {instanceapi.PathConfig, func(ctx context.Context) error {
			return r.pushConfig(ctx, m, instanceapi.Config{Parameters: map[string]string{"work_mem": "8MB"}}, "h", ic)
		}},
		"promote": {instanceapi.PathPromote, func(ctx context.Context) error { return r.promote(ctx, m, ic) }},
	}
	for _, p := range []struct{ method, path string }{
		{http.MethodPost, instanceapi.PathDemote}, {http.MethodPost, instanceapi.PathFollow}, {http.MethodPost, instanceapi.PathReconnect},
		{http.MethodPost, instanceapi.PathStepDown}, {http.MethodPost, instanceapi.PathRestart},
		{http.MethodPost, instanceapi.PathFence}, {http.MethodPost, instanceapi.PathUnfence}, {http.MethodPost, instanceapi.PathCheckpoint},
		{http.MethodPost, instanceapi.PathImportCutover}, {http.MethodPost, instanceapi.PathImportAbandon},
		{http.MethodPost, instanceapi.PathEndSessions}, {http.MethodPost, instanceapi.PathUpgradePrecheck},
		{http.MethodPut, instanceapi.PathSQLRoles}, {http.MethodGet, instanceapi.PathSQLSlots}, {http.MethodPost, instanceapi.PathBackups},
		{http.MethodPost, instanceapi.PathWALSwitch}, {http.MethodGet, instanceapi.PathStatus},
	} {
		callers[p.method+" "+p.path] = struct {
			path string
			call func(context.Context) error
		}{p.path, func(ctx context.Context) error { return ic.call(ctx, pod, p.method, p.path, nil, nil) }}
	}
	for name, c := range callers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bound := ic.timeout(c.path)
			start := time.Now()
			err := c.call(context.Background())
			if took := time.Since(start); took > bound+2*time.Second {
				t.Errorf("the call to a hung manager took %s, want at most its deadline %s", took.Round(time.Millisecond), bound)
			}
			if err == nil || !strings.Contains(err.Error(), "did not answer within "+bound.String()) {
				t.Errorf("the call to a hung manager returned %v, want an error saying it did not answer within %s", err, bound)
			}
		})
	}
}

// TestEveryCallHasAFiniteDeadline: no path the operator calls goes
// without a deadline, the longest is a few minutes, and a configuration
// push outlasts the manager's own bound on the reload it waits for.
func TestEveryCallHasAFiniteDeadline(t *testing.T) {
	const managerReloadTimeout = 20 * time.Second // the instance manager's DefaultReloadTimeout
	for _, path := range []string{
		instanceapi.PathStatus, instanceapi.PathPromote, instanceapi.PathDemote, instanceapi.PathStepDown, instanceapi.PathFollow,
		instanceapi.PathReconnect, instanceapi.PathRestart, instanceapi.PathConfig, instanceapi.PathFence, instanceapi.PathUnfence,
		instanceapi.PathBackups, instanceapi.PathBackups + "/b-1", instanceapi.PathWALSwitch, instanceapi.PathCheckpoint,
		instanceapi.PathImportCutover, instanceapi.PathEndSessions, instanceapi.PathImportAbandon, instanceapi.PathUpgradePrecheck,
		instanceapi.PathSQLRoles, instanceapi.PathSQLDatabases, instanceapi.PathSQLPublications, instanceapi.PathSQLSubscriptions,
		instanceapi.PathSQLSlots,
	} {
		if d := callTimeout(path); d <= 0 || d > longCommandTimeout {
			t.Errorf("%s has deadline %s, want one in (0, %s]", path, d, longCommandTimeout)
		}
	}
	if callTimeout(instanceapi.PathConfig) <= managerReloadTimeout {
		t.Errorf("a configuration push has deadline %s, not more than the manager's reload bound %s", callTimeout(instanceapi.PathConfig), managerReloadTimeout)
	}
	if callTimeout(instanceapi.PathStatus) != statusTimeout {
		t.Errorf("/status has deadline %s, want statusTimeout %s", callTimeout(instanceapi.PathStatus), statusTimeout)
	}
}
