//go:build integration

package controller

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"tusk.dev/tusk/internal/scheme"
	"tusk.dev/tusk/internal/testenv"
)

var env *testenv.Env

// operatorNamespace is the operator's namespace in these tests, where the
// clusters' keys are kept.
const operatorNamespace = "tusk-system"

// restartNamespace is a namespace the suite's manager does not watch: TestScheduleAcrossARestart runs operators of its own there, one
// after the other.
var restartNamespace = fmt.Sprintf("ctrl-restart-%d", time.Now().UnixNano()%1e6)

// upgradeNamespace is another: TestKeysMoveFromAnEarlierTusk runs an
// operator of its own there, stops it, and starts it again.
var upgradeNamespace = fmt.Sprintf("ctrl-upgrade-%d", time.Now().UnixNano()%1e6)

// workersNamespace is another: TestStuckClusterDoesNotDelayOtherBackups
// runs a backup reconciler of its own there, with the operator's workers.
var workersNamespace = fmt.Sprintf("ctrl-workers-%d", time.Now().UnixNano()%1e6)

// TestMain runs the reconcilers in a manager against a real API server for
// the whole package, as the operator does.
func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	s, err := scheme.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cache := CacheOptions(nil, operatorNamespace)
	cache.DefaultFieldSelector = fields.AndSelectors(fields.OneTermNotEqualSelector("metadata.namespace", restartNamespace),
		fields.OneTermNotEqualSelector("metadata.namespace", workersNamespace), fields.OneTermNotEqualSelector("metadata.namespace", upgradeNamespace))
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  s,
		Cache:   cache,
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err == nil {
		cfg := testConfig
		cfg.Clock = backupClock
		err = SetupWithManager(mgr, cfg, nil)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		return 1
	}
	return code
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ctrl-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
