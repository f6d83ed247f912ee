//go:build integration

package controller

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/scheme"
	"tusk.dev/tusk/internal/testenv"
)

// operatorWorkers is the operator's --max-concurrent-reconciles default.
const operatorWorkers = 8

// hungPodIP is the address of the hung instance manager: a loopback
// address of its own, as the managers' port (8000) is fixed.
const hungPodIP = "127.34.7.1"

// TestStuckClusterDoesNotDelayOtherBackups: a cluster whose instance
// manager takes requests and never answers, with many backups asked of
// it, holds one of the backup reconciler's workers, not all: a backup of
// another cluster is decided at once. With one worker (before), it
// waited behind every pass over the stuck cluster's backups.
func TestStuckClusterDoesNotDelayOtherBackups(t *testing.T) {
	ns := workersNamespace
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	stuck := newBackupCluster(ns)
	stuck.Name = "stuck"
	create(t, stuck)
	caData, _ := startHungManager(t, hungPodIP+":8000", instanceServerName(stuck))
	// The keys Secret as the cluster's reconciler makes it.
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: keysSecretName(ns, stuck.Name), Namespace: operatorNamespace,
		Labels: map[string]string{LabelCluster: stuck.Name, LabelClusterNamespace: ns, LabelClusterUID: string(stuck.UID)}},
		Data: caData})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stuck-1", Namespace: ns, Labels: clusterLabels(stuck)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres"}}}}
	create(t, pod)
	pod.Status.PodIP, pod.Status.PodIPs = hungPodIP, []corev1.PodIP{{IP: hungPodIP}}
	if err := env.Client.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	plain := newCluster(ns)
	plain.Name = "plain" // without spec.backup
	create(t, plain)

	defer startBackupReconciler(t, ns)()
	// Once a first backup is decided, the reconciler runs and its cache
	// is synced: what follows is queued as events, not as the initial
	// list (which the queue puts last).
	backupWhen(t, createBackup(t, ns, "first", plain.Name), backupIn(tuskv1alpha1.BackupPhaseFailed, tuskv1alpha1.ReasonBackupNotConfigured))
	for i := range 2 * operatorWorkers {
		create(t, newBackup(ns, fmt.Sprintf("stuck-%d", i), stuck.Name))
	}
	time.Sleep(time.Second) // the stuck cluster's passes wait on its manager
	start := time.Now()
	backupWhen(t, createBackup(t, ns, "other", plain.Name), backupIn(tuskv1alpha1.BackupPhaseFailed, tuskv1alpha1.ReasonBackupNotConfigured))
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the other cluster's backup was decided after %s, behind the stuck cluster's; want within 3s", took.Round(100*time.Millisecond))
	}
	// The stuck cluster's passes did wait on its manager, one at a time.
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		var list tuskv1alpha1.PostgresBackupList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for i := range list.Items {
			if b := &list.Items[i]; b.Spec.Cluster.Name == stuck.Name && backupIn(tuskv1alpha1.BackupPhasePending, tuskv1alpha1.ReasonWaitingForInstance)(b) == nil {
				return nil
			}
		}
		return errors.New("no backup of the stuck cluster waits for an instance")
	})
}

// startBackupReconciler runs a backup reconciler alone, as an operator
// watching ns with its default workers; stop stops it and waits.
func startBackupReconciler(t *testing.T, ns string) (stop func()) {
	t.Helper()
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  s,
		Cache:   CacheOptions([]string{ns}, operatorNamespace),
		Metrics: metricsserver.Options{BindAddress: "0"},
		// The suite's manager has a controller of the same name.
		Controller: config.Controller{SkipNameValidation: ptr.To(true), MaxConcurrentReconciles: operatorWorkers},
	})
	if err != nil {
		t.Fatal(err)
	}
	keys := keyStore{secrets: secretReader{cached: mgr.GetClient(), api: mgr.GetAPIReader()}, namespace: operatorNamespace}
	if err := (&BackupReconciler{Client: mgr.GetClient(), keys: keys}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	}
}

func createBackup(t *testing.T, ns, name, cluster string) *tuskv1alpha1.PostgresBackup {
	t.Helper()
	b := newBackup(ns, name, cluster)
	create(t, b)
	return b
}
