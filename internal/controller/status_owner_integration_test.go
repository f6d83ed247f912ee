//go:build integration

package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/scheme"
)

// statusWrittenByClusterReconcilerOnly fails the test unless the cluster's
// status was written, and only by the ClusterReconciler's writeStatus.
func statusWrittenByClusterReconcilerOnly(t *testing.T, key client.ObjectKey) {
	t.Helper()
	c := &tuskv1alpha1.PostgresCluster{}
	if err := env.Client.Get(context.Background(), key, c); err != nil {
		t.Fatal(err)
	}
	if err := statusWriters(c, StatusOwner); err != nil {
		t.Error(err)
	}
}

// reportSystemIdentifier stands in for the primary's report of the
// database system identifier (testSystemID), which the ClusterReconciler copies into
// status.systemIdentifier and keeps while no primary answers: no instance
// manager runs under envtest, and retention waits for the identifier. It
// writes as the status owner, whose field it is.
func reportSystemIdentifier(t *testing.T, key client.ObjectKey) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &tuskv1alpha1.PostgresCluster{}
		if err := env.Client.Get(context.Background(), key, c); err != nil {
			return err
		}
		c.Status.SystemIdentifier = testSystemID
		return env.Client.Status().Update(context.Background(), c, client.FieldOwner(StatusOwner))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// statusWriters says who but owner wrote obj's status, if anyone did: the
// API server names the field manager of every write of the status
// subresource in managedFields, and any writer but the owner's one write
// path (another reconciler, or the owner writing otherwise) has another
// name. Nobody writing it is an error too.
func statusWriters(obj client.Object, owner string) error {
	owned := false
	for _, f := range obj.GetManagedFields() {
		if f.Subresource != "status" {
			continue
		}
		if f.Manager != owner {
			return fmt.Errorf("the status of %s was written by %q (%s), want %q only", obj.GetName(), f.Manager, f.Operation, owner)
		}
		owned = true
	}
	if !owned {
		return fmt.Errorf("the status of %s was written by nobody: managedFields %+v", obj.GetName(), obj.GetManagedFields())
	}
	return nil
}

// startOperator runs Tusk's reconcilers in a manager of their own, as an
// operator watching ns only, going by clock; stop stops it and waits.
func startOperator(t *testing.T, ns string, clock *clocktesting.FakePassiveClock) (stop func()) {
	t.Helper()
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  s,
		Cache:   CacheOptions([]string{ns}, operatorNamespace),
		Metrics: metricsserver.Options{BindAddress: "0"},
		// The suite's manager has controllers of the same names.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig
	cfg.Clock = clock
	if err := SetupWithManager(mgr, cfg, []string{ns}); err != nil {
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

// TestScheduleAcrossRestarts: operators restarted on the same API server
// (new reconcilers, caches and memory) take no run of an every-minute
// schedule twice, not even one whose PostgresBackup was deleted since
// (status keeps it), and after ten minutes down take one catch-up backup;
// what the schedule and retention did reaches status through the
// ClusterReconciler alone. Each operator's first pass is known by
// retention's outcome: the store's address changes while none runs, and
// retention runs after the schedule in the same pass.
func TestScheduleAcrossRestarts(t *testing.T) {
	ns := restartNamespace
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
		Data:       map[string][]byte{"ACCESS_KEY_ID": []byte("id"), "SECRET_ACCESS_KEY": []byte("secret")},
	})
	clock := clocktesting.NewFakePassiveClock(time.Now())
	stop := startOperator(t, ns, clock)
	cluster := newBackupCluster(ns)
	cluster.Spec.Backup.ObjectStore.CASecret = nil
	cluster.Spec.Backup.ObjectStore.Endpoint = "http://127.0.0.1:1" // nothing listens: retention fails
	cluster.Spec.Backup.Schedule = "* * * * *"
	cluster.Spec.Backup.Retention = "7d"
	create(t, cluster)
	key := client.ObjectKeyFromObject(cluster)
	reportSystemIdentifier(t, key)
	first := cluster.CreationTimestamp.UTC().Truncate(time.Minute).Add(time.Minute)
	run := func(t time.Time) string { return "pg-" + t.Format(scheduledBackupTimeFormat) }

	clock.SetTime(first.Add(5 * time.Second))
	poke(t, key)
	backupsAre(t, ns, run(first))
	clusterWhen(t, key, scheduleStatus(first, first.Add(time.Minute)))
	retentionFailedWith(t, key, "endpoint unreachable")
	stop()

	// The backup deleted while no operator runs (by hand, or retention):
	// the next operator does not take its run again, and takes the next.
	b := &tuskv1alpha1.PostgresBackup{ObjectMeta: metav1.ObjectMeta{Name: run(first), Namespace: ns}}
	if err := env.Client.Delete(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	backupsAre(t, ns)
	setStoreEndpoint(t, key, "http://169.254.169.254")
	clock.SetTime(first.Add(30 * time.Second))
	stop = startOperator(t, ns, clock)
	retentionFailedWith(t, key, "endpoint refused")
	backupsAre(t, ns)
	clusterWhen(t, key, scheduleStatus(first, first.Add(time.Minute)))
	second := first.Add(time.Minute)
	clock.SetTime(second.Add(5 * time.Second))
	poke(t, key)
	backupsAre(t, ns, run(second))
	clusterWhen(t, key, scheduleStatus(second, second.Add(time.Minute)))
	stop()

	// Ten minutes down: one catch-up backup, the latest run.
	latest := second.Add(10 * time.Minute)
	setStoreEndpoint(t, key, "http://127.0.0.1:1")
	clock.SetTime(latest.Add(30 * time.Second))
	stop = startOperator(t, ns, clock)
	defer stop()
	retentionFailedWith(t, key, "endpoint unreachable")
	backupsAre(t, ns, run(second), run(latest))
	c := clusterWhen(t, key, scheduleStatus(latest, latest.Add(time.Minute)))
	if c.Status.Backup.LastScheduledBackup != run(latest) {
		t.Errorf("lastScheduledBackup %q, want %s", c.Status.Backup.LastScheduledBackup, run(latest))
	}
	poke(t, key)
	clusterWhen(t, key, scheduleStatus(latest, latest.Add(time.Minute)))
	backupsAre(t, ns, run(second), run(latest))
	statusWrittenByClusterReconcilerOnly(t, key)
}

// retentionFailedWith waits for the cluster's BackupRetention condition
// to fail saying what.
func retentionFailedWith(t *testing.T, key client.ObjectKey, what string) {
	t.Helper()
	clusterWhen(t, key, func(c *tuskv1alpha1.PostgresCluster) error {
		if err := condition(c, tuskv1alpha1.ConditionBackupRetention, metav1.ConditionFalse, tuskv1alpha1.ReasonRetentionFailed); err != nil {
			return err
		}
		if msg := findCondition(c, tuskv1alpha1.ConditionBackupRetention).Message; !strings.Contains(msg, what) {
			return fmt.Errorf("BackupRetention says %q, want %q", msg, what)
		}
		return nil
	})
}

func setStoreEndpoint(t *testing.T, key client.ObjectKey, endpoint string) {
	t.Helper()
	c := get(t, key.Namespace, key.Name, &tuskv1alpha1.PostgresCluster{})
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Backup.ObjectStore.Endpoint = endpoint
	if err := env.Client.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
}

// TestClusterStatusHasOneWriter: a cluster whose schedule creates backups
// and whose retention runs (and fails) has its status written by the
// ClusterReconciler only, under its field manager: the check above can
// fail, as a status written by anyone else shows.
func TestClusterStatusHasOneWriter(t *testing.T) {
	ns := newNamespace(t)
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
		Data:       map[string][]byte{"ACCESS_KEY_ID": []byte("id"), "SECRET_ACCESS_KEY": []byte("secret")},
	})
	cluster := newBackupCluster(ns)
	cluster.Spec.Backup.ObjectStore.CASecret = nil
	cluster.Spec.Backup.ObjectStore.Endpoint = "http://127.0.0.1:1"
	cluster.Spec.Backup.Schedule = "@daily"
	cluster.Spec.Backup.Retention = "7d"
	create(t, cluster)
	key := client.ObjectKeyFromObject(cluster)
	reportSystemIdentifier(t, key)
	clusterWhen(t, key, func(c *tuskv1alpha1.PostgresCluster) error {
		if err := condition(c, tuskv1alpha1.ConditionScheduledBackups, metav1.ConditionTrue, tuskv1alpha1.ReasonScheduled); err != nil {
			return err
		}
		return condition(c, tuskv1alpha1.ConditionBackupRetention, metav1.ConditionFalse, tuskv1alpha1.ReasonRetentionFailed)
	})
	statusWrittenByClusterReconcilerOnly(t, key)

	// Another writer is seen (in the object the write returns: the
	// ClusterReconciler puts the field back soon after). A merge patch
	// without a resourceVersion: the reconciler keeps writing the status,
	// and an update from a copy it has since replaced would conflict.
	c := get(t, ns, "pg", &tuskv1alpha1.PostgresCluster{})
	patch := client.MergeFrom(c.DeepCopy())
	c.Status.Backup.LastScheduledBackup = "by-someone-else"
	if err := env.Client.Status().Patch(context.Background(), c, patch, client.FieldOwner("someone-else")); err != nil {
		t.Fatal(err)
	}
	if err := statusWriters(c, StatusOwner); err == nil {
		t.Error("a status written by another field manager passed for the ClusterReconciler's alone")
	}
}
