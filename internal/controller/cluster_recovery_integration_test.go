//go:build integration

package controller

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

func s3Secret(ns, name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data:       map[string][]byte{"ACCESS_KEY_ID": []byte("id"), "SECRET_ACCESS_KEY": []byte("secret")},
	}
}

// waitingForBackup: the cluster is Pending, not Ready, for the reason
// WaitingForBackup and the message what.
func waitingForBackup(what string) func(c *tuskv1alpha1.PostgresCluster) error {
	return waitingFor(tuskv1alpha1.ReasonWaitingForBackup, what)
}

// waitingFor: the cluster is Pending, not Ready, for reason and the
// message what.
func waitingFor(reason, what string) func(c *tuskv1alpha1.PostgresCluster) error {
	return func(c *tuskv1alpha1.PostgresCluster) error {
		if c.Status.Phase != tuskv1alpha1.ClusterPhasePending || c.Status.ObservedGeneration != c.Generation {
			return fmt.Errorf("phase %q for generation %d/%d, want Pending", c.Status.Phase, c.Status.ObservedGeneration, c.Generation)
		}
		for _, cond := range c.Status.Conditions {
			if cond.Type == tuskv1alpha1.ConditionReady && (cond.Status != metav1.ConditionFalse || cond.Reason != reason || cond.Message != what) {
				return fmt.Errorf("Ready %s %s %q, want False %s %q", cond.Status, cond.Reason, cond.Message, reason, what)
			}
		}
		return condition(c, tuskv1alpha1.ConditionProgressing, metav1.ConditionTrue, reason)
	}
}

// TestRecoveryWaitsForItsBackup: a cluster recovering from a PostgresBackup
// that does not exist, then is not complete (Pending: the backup
// controller waits for its cluster), waits (Pending, no pod); its
// completion (written here as the backup controller would), seen through
// the PostgresBackup watch alone, creates the
// first instance told to recover from the backup's recorded location,
// with that location's Secret mounted.
func TestRecoveryWaitsForItsBackup(t *testing.T) {
	ns := newNamespace(t)
	create(t, s3Secret(ns, "orders-s3"))
	cluster := newCluster(ns)
	cluster.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{Recovery: &tuskv1alpha1.RecoverySpec{
		Backup: &corev1.LocalObjectReference{Name: "nightly"},
	}}
	create(t, cluster)
	key := client.ObjectKeyFromObject(cluster)
	clusterWhen(t, key, waitingForBackup("Waiting for the PostgresBackup nightly named by spec.bootstrap.recovery.backup: it does not exist"))
	noPods(t, ns)

	backup := &tuskv1alpha1.PostgresBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns},
		Spec:       tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: "orders"}},
	}
	create(t, backup)
	// Its cluster does not exist: the backup controller keeps it Pending.
	clusterWhen(t, key, waitingForBackup(`Waiting for the PostgresBackup nightly named by spec.bootstrap.recovery.backup to complete (phase "Pending")`))
	noPods(t, ns)

	// The requeue of a waiting cluster is a minute away, longer than
	// waitTimeout: the watch alone brings the pod.
	setBackupPhase(t, backup, tuskv1alpha1.BackupPhaseCompleted, &tuskv1alpha1.ObjectStoreSpec{
		Endpoint: "https://s3.example.com", Bucket: "backups", CredentialsSecret: tuskv1alpha1.S3CredentialsSecret{Name: "orders-s3"},
	})
	clusterWhen(t, key, creating)
	pod := get(t, ns, "pg-1", &corev1.Pod{})
	args := pod.Spec.Containers[0].Command
	for flag, want := range map[string]string{
		"--recovery-source-endpoint": "https://s3.example.com", "--recovery-source-bucket": "backups",
		"--recovery-source-path": "orders", "--recovery-backup": "nightly",
	} {
		if got := flagValue(args, flag); got != want {
			t.Errorf("pod pg-1: %s=%q, want %q", flag, got, want)
		}
	}
	if v := findVolume(pod, "recovery-source-credentials"); v == nil || v.Secret == nil || v.Secret.SecretName != "orders-s3" {
		t.Errorf("pod pg-1 mounts %+v as the source's credentials, want orders-s3", v)
	}
}

// setBackupPhase writes a PostgresBackup's status as the backup
// controller would.
func setBackupPhase(t *testing.T, b *tuskv1alpha1.PostgresBackup, phase tuskv1alpha1.BackupPhase, store *tuskv1alpha1.ObjectStoreSpec) {
	t.Helper()
	updateBackupStatus(t, b, func(s *tuskv1alpha1.PostgresBackupStatus) {
		s.Phase, s.ObjectStore = phase, store
	})
}

// updateBackupStatus changes a PostgresBackup's status the way a second
// writer must: on the latest version, again after a conflict. The backup
// controller may still be writing it (a waiting backup's message changes
// as the cluster's objects appear).
func updateBackupStatus(t *testing.T, b *tuskv1alpha1.PostgresBackup, change func(*tuskv1alpha1.PostgresBackupStatus)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		change(&b.Status)
		return env.Client.Status().Update(context.Background(), b)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRecoveryIntoItsOwnArchiveIsRefused: a cluster whose spec.backup
// location is its recovery source is refused (its archiving would write
// into the source's archive), with a Warning Event and no pod; a missing
// source Secret is refused the same way, and creating it (the Secret
// watch alone) creates the first instance.
func TestRecoveryIntoItsOwnArchiveIsRefused(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	create(t, s3Secret(ns, "s3"))
	cluster := newCluster(ns)
	own := tuskv1alpha1.ObjectStoreSpec{Endpoint: "https://s3.example.com", Bucket: "backups", CredentialsSecret: tuskv1alpha1.S3CredentialsSecret{Name: "s3"}}
	source := own
	source.Endpoint, source.Path = "https://s3.example.com/", ns+"/pg" // the cluster's default path
	source.CredentialsSecret.Name = "src-s3"
	cluster.Spec.Backup = &tuskv1alpha1.BackupSpec{ObjectStore: own}
	cluster.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{Recovery: &tuskv1alpha1.RecoverySpec{Source: &source}}
	create(t, cluster)
	key := client.ObjectKeyFromObject(cluster)
	clusterWhen(t, key, failedSaying(tuskv1alpha1.ReasonRecoverySourceInvalid, "refusing to recover from https://s3.example.com/backups/"+ns+"/pg: "+
		"it is this cluster's own spec.backup location, and archiving there would mix the new cluster's WAL into the source's archive; "+
		"give spec.backup.objectStore another path"))
	e := waitForEvent(t, ns, tuskv1alpha1.ReasonRecoverySourceInvalid, "own spec.backup location")
	if e.Type != corev1.EventTypeWarning || e.Regarding.Name != "pg" {
		t.Errorf("Event %s about %s, want a Warning about pg", e.Type, e.Regarding.Name)
	}
	noPods(t, ns)

	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, key, cluster); err != nil {
			return err
		}
		cluster.Spec.Backup.ObjectStore.Path = ns + "/pg-restored"
		return env.Client.Update(ctx, cluster)
	}); err != nil {
		t.Fatal(err)
	}
	clusterWhen(t, key, failedSaying(tuskv1alpha1.ReasonRecoverySourceInvalid, "the Secret src-s3 named by spec.bootstrap.recovery.source.credentialsSecret does not exist"))
	noPods(t, ns)

	create(t, s3Secret(ns, "src-s3"))
	clusterWhen(t, key, creating)
	pod := get(t, ns, "pg-1", &corev1.Pod{})
	args := pod.Spec.Containers[0].Command
	for flag, want := range map[string]string{"--recovery-source-path": ns + "/pg", "--recovery-backup": "latest", "--wal-archive-path": ns + "/pg-restored"} {
		if got := flagValue(args, flag); got != want {
			t.Errorf("pod pg-1: %s=%q, want %q", flag, got, want)
		}
	}
}

// TestCloneWaitsForItsSource: a cluster cloning a cluster that does not
// exist, then is not Ready, waits (Pending, WaitingForSource, no pod of
// its own), woken by the source's creation through the watch; a cluster
// cloning itself is refused.
func TestCloneWaitsForItsSource(t *testing.T) {
	ns := newNamespace(t)
	clone := newCluster(ns)
	clone.Name = "copy"
	clone.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{Clone: &tuskv1alpha1.CloneSpec{Cluster: "pg"}}
	create(t, clone)
	key := client.ObjectKeyFromObject(clone)
	clusterWhen(t, key, waitingFor(tuskv1alpha1.ReasonWaitingForSource, "Waiting for the PostgresCluster pg named by spec.bootstrap.clone.cluster: it does not exist"))
	create(t, newCluster(ns))
	clusterWhen(t, key, waitingFor(tuskv1alpha1.ReasonWaitingForSource, "Waiting for the PostgresCluster pg named by spec.bootstrap.clone.cluster to be Ready"))
	var pods corev1.PodList
	if err := env.Client.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{LabelCluster: "copy"}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods created for a clone whose source is not Ready", len(pods.Items))
	}

	self := newCluster(ns)
	self.Name = "narcissus"
	self.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{Clone: &tuskv1alpha1.CloneSpec{Cluster: "narcissus"}}
	create(t, self)
	clusterWhen(t, client.ObjectKeyFromObject(self), failedSaying(tuskv1alpha1.ReasonCloneSourceInvalid,
		"spec.bootstrap.clone.cluster names this cluster itself: clone another cluster"))
}

// TestImportWaitsForItsSecret: an importing cluster whose password Secret
// is missing is refused with what to fix and gets no pod; the Secret's
// creation wakes it (the watch on the user's Secrets), and the first pod
// imports with the password mounted.
func TestImportWaitsForItsSecret(t *testing.T) {
	ns := newNamespace(t)
	cluster := newCluster(ns)
	cluster.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{InitDB: &tuskv1alpha1.InitDBSpec{Import: &tuskv1alpha1.ImportSpec{
		Source: tuskv1alpha1.ImportSource{Host: "legacy.example.com", User: "migrator", SSLMode: "require",
			PasswordSecret: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "legacy"}, Key: "password"}},
		Databases: []string{"shop"},
	}}}
	create(t, cluster)
	key := client.ObjectKeyFromObject(cluster)
	clusterWhen(t, key, failedSaying(tuskv1alpha1.ReasonImportSourceInvalid, "the Secret legacy named by spec.bootstrap.initdb.import.source.passwordSecret does not exist"))
	waitForEvent(t, ns, tuskv1alpha1.ReasonImportSourceInvalid, "legacy")
	noPods(t, ns)

	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "legacy"}, StringData: map[string]string{"password": "s3cret"}})
	clusterWhen(t, key, creating)
	pod := get(t, ns, "pg-1", &corev1.Pod{})
	args := pod.Spec.Containers[0].Command
	for flag, want := range map[string]string{"--import-host": "legacy.example.com", "--import-sslmode": "require", "--import-database": "shop",
		"--import-password-file": importSourceMount + "/password"} {
		if got := flagValue(args, flag); got != want {
			t.Errorf("pod pg-1: %s=%q, want %q", flag, got, want)
		}
	}
}
