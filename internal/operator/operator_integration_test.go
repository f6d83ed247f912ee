//go:build integration

package operator

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	coordinationv1 "k8s.io/api/coordination/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"tusk.dev/tusk/internal/controller"
	"tusk.dev/tusk/internal/testenv"
)

// freeAddr returns a loopback address nothing listens on right now; the
// manager binds it a moment later.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func httpStatus(ctx context.Context, c *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

func expectStatus(c *http.Client, url string, want int) func(context.Context) error {
	return func(ctx context.Context) error {
		got, err := httpStatus(ctx, c, url)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("GET %s: %d, want %d", url, got, want)
		}
		return nil
	}
}

// TestOperatorLifecycle runs the operator as `tusk operator` does: it takes
// the leader Lease, serves health and readiness, guards metrics behind
// authentication, and on shutdown stops cleanly and releases the Lease.
func TestOperatorLifecycle(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()

	probeAddr, metricsAddr := freeAddr(t), freeAddr(t)
	// The operator's log goes to the test's, so a failure shows what it did.
	ctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), testr.New(t)))
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, env.Config, Options{
			MetricsAddr: metricsAddr, SecureMetrics: true, ProbeAddr: probeAddr,
			LeaderElect: true, LeaderElectionNamespace: "default",
			GracefulShutdownTimeout: 10 * time.Second,
			Controllers:             controller.Config{InstanceManagerImage: "tusk/operator:test", OperatorNamespace: "default"},
		})
	}()
	defer cancel()

	plain := &http.Client{Timeout: 5 * time.Second}
	testenv.Eventually(t, time.Minute, expectStatus(plain, "http://"+probeAddr+"/healthz", http.StatusOK))
	testenv.Eventually(t, time.Minute, expectStatus(plain, "http://"+probeAddr+"/readyz", http.StatusOK))

	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: "default", Name: LeaderElectionID}
	testenv.Eventually(t, time.Minute, func(ctx context.Context) error {
		if err := env.Client.Get(ctx, key, lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return fmt.Errorf("lease %s has no holder", key)
		}
		return nil
	})

	// Metrics are served over TLS, and an anonymous caller is turned away.
	// The serving certificate is self-signed; this test checks who may
	// read, not whom the client trusts.
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	testenv.Eventually(t, time.Minute, expectStatus(insecure, "https://"+metricsAddr+"/metrics", http.StatusUnauthorized))

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("operator stopped with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("operator did not stop within a minute of SIGTERM")
	}
	if err := env.Client.Get(context.Background(), key, lease); err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("lease still held by %q after shutdown; a standby would wait for it to expire", *h)
	}
}

// TestEveryControllerGetsTheWorkersAndTheBound: the operator's workers and
// its bound on a pass are the manager's defaults, which every controller
// takes (the clusters', the SQL objects', the schedules', the backups')
// since none sets its own.
func TestEveryControllerGetsTheWorkersAndTheBound(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	mgr, err := newManager(t.Context(), env.Config, Options{MetricsAddr: "0", ProbeAddr: "0", MaxConcurrentReconciles: 8, ReconcileTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got := mgr.GetControllerOptions()
	if got.MaxConcurrentReconciles != 8 || got.ReconciliationTimeout != 10*time.Minute {
		t.Errorf("the controllers' defaults are %d workers and a %s bound, want 8 and 10m", got.MaxConcurrentReconciles, got.ReconciliationTimeout)
	}
}
