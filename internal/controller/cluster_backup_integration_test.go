//go:build integration

package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/testenv"
)

func newBackupCluster(ns string) *tuskv1alpha1.PostgresCluster {
	c := newCluster(ns)
	c.Spec.Backup = &tuskv1alpha1.BackupSpec{ObjectStore: tuskv1alpha1.ObjectStoreSpec{
		Endpoint: "https://s3.example.com", Bucket: "backups",
		CredentialsSecret: tuskv1alpha1.S3CredentialsSecret{Name: "s3"},
		CASecret:          &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s3-ca"}, Key: "ca.pem"},
	}}
	return c
}

// TestBackupSecretsAreRequired: a cluster whose backup Secrets or keys are
// missing is refused with a reason and a Warning Event naming what is
// missing, and no pod; each fix is picked up from the Secret watch alone,
// and then the pod mounts them and is told where to archive.
func TestBackupSecretsAreRequired(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cluster := newBackupCluster(ns)
	create(t, cluster)
	key := client.ObjectKeyFromObject(cluster)

	clusterWhen(t, key, failedSaying(tuskv1alpha1.ReasonBackupSecretInvalid, "the Secret s3 named by spec.backup.objectStore.credentialsSecret does not exist"))
	e := waitForEvent(t, ns, tuskv1alpha1.ReasonBackupSecretInvalid, "s3 named by")
	if e.Type != corev1.EventTypeWarning || e.Regarding.Name != "pg" {
		t.Errorf("Event %s about %s, want a Warning about pg", e.Type, e.Regarding.Name)
	}
	noPods(t, ns)

	creds := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
		Data:       map[string][]byte{"ACCESS_KEY_ID": []byte("id")},
	}
	create(t, creds)
	clusterWhen(t, key, failedSaying(tuskv1alpha1.ReasonBackupSecretInvalid, `the Secret s3 named by spec.backup.objectStore.credentialsSecret has no (or an empty) "SECRET_ACCESS_KEY" key`))
	noPods(t, ns)

	creds.Data["SECRET_ACCESS_KEY"] = []byte("secret-1")
	if err := env.Client.Update(ctx, creds); err != nil {
		t.Fatal(err)
	}
	clusterWhen(t, key, failedSaying(tuskv1alpha1.ReasonBackupSecretInvalid, "the Secret s3-ca named by spec.backup.objectStore.caSecret does not exist"))
	noPods(t, ns)

	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s3-ca", Namespace: ns},
		Data:       map[string][]byte{"ca.pem": []byte(fakeCAPEM)},
	})
	clusterWhen(t, key, creating)
	pod := get(t, ns, "pg-1", &corev1.Pod{})
	if v := findVolume(pod, "backup-credentials"); v == nil || v.Secret == nil || v.Secret.SecretName != "s3" ||
		!slices.Equal(v.Secret.Items, []corev1.KeyToPath{{Key: "ACCESS_KEY_ID", Path: fileAccessKeyID}, {Key: "SECRET_ACCESS_KEY", Path: fileSecretAccessKey}}) {
		t.Errorf("pod pg-1 mounts %+v as the backup credentials, want the two keys of s3", v)
	}
	if v := findVolume(pod, "backup-ca"); v == nil || v.Secret == nil || v.Secret.SecretName != "s3-ca" ||
		!slices.Equal(v.Secret.Items, []corev1.KeyToPath{{Key: "ca.pem", Path: fileBackupCA}}) {
		t.Errorf("pod pg-1 mounts %+v as the backup CA, want ca.pem of s3-ca", v)
	}
	args := pod.Spec.Containers[0].Command
	for flag, want := range map[string]string{"--wal-archive-endpoint": "https://s3.example.com", "--wal-archive-bucket": "backups", "--wal-archive-path": ns + "/pg"} {
		if got := flagValue(args, flag); got != want {
			t.Errorf("pod pg-1: %s=%q, want %q", flag, got, want)
		}
	}
}

// TestBackupSecretChangesReachThePods: a new secret access key changes the
// pods' Secrets hash (which makes the kubelet refresh the files at once)
// and not their spec hash: nothing restarts, the next archive command
// reads the new key.
func TestBackupSecretChangesReachThePods(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	creds := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
		Data:       map[string][]byte{"ACCESS_KEY_ID": []byte("id"), "SECRET_ACCESS_KEY": []byte("secret-1")},
	}
	create(t, creds)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-ca", Namespace: ns}, Data: map[string][]byte{"ca.pem": []byte(fakeCAPEM)}})
	cluster := newBackupCluster(ns)
	create(t, cluster)
	clusterWhen(t, client.ObjectKeyFromObject(cluster), creating)
	var before corev1.Pod
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pg-1"}, &before); err != nil {
			return err
		}
		if before.Annotations[AnnotationSecretsHash] == "" {
			return errors.New("pg-1 has no Secrets hash yet")
		}
		return nil
	})

	creds.Data["SECRET_ACCESS_KEY"] = []byte("secret-2")
	if err := env.Client.Update(ctx, creds); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		var pod corev1.Pod
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&before), &pod); err != nil {
			return err
		}
		switch {
		case pod.UID != before.UID || pod.Annotations[AnnotationHash] != before.Annotations[AnnotationHash]:
			return fmt.Errorf("pg-1 was replaced or its spec hash changed: a Secret change must not roll the pods")
		case pod.Annotations[AnnotationSecretsHash] == before.Annotations[AnnotationSecretsHash]:
			return errors.New("pg-1's Secrets hash did not change")
		}
		return nil
	})
}

// TestClusterWithoutBackupHasNoArchiving: the pods of a cluster without
// spec.backup mount and pass nothing of archiving, and status has no
// archive report.
func TestClusterWithoutBackupHasNoArchiving(t *testing.T) {
	ns := newNamespace(t)
	cluster := newCluster(ns)
	create(t, cluster)
	c := clusterWhen(t, client.ObjectKeyFromObject(cluster), creating)
	pod := get(t, ns, "pg-1", &corev1.Pod{})
	if findVolume(pod, "backup-credentials") != nil || findVolume(pod, "backup-ca") != nil || flagValue(pod.Spec.Containers[0].Command, "--wal-archive-endpoint") != "" {
		t.Errorf("pod pg-1 of a cluster without spec.backup archives: volumes %+v, command %q", pod.Spec.Volumes, pod.Spec.Containers[0].Command)
	}
	if c.Status.Archive != nil {
		t.Errorf("status.archive %+v without spec.backup", c.Status.Archive)
	}
}

// failedSaying is failed(reason) with a Ready message of exactly message.
func failedSaying(reason, message string) func(c *tuskv1alpha1.PostgresCluster) error {
	return func(c *tuskv1alpha1.PostgresCluster) error {
		if err := failed(reason)(c); err != nil {
			return err
		}
		for _, cond := range c.Status.Conditions {
			if cond.Type == tuskv1alpha1.ConditionReady && cond.Message != message {
				return fmt.Errorf("Ready says %q, want %q", cond.Message, message)
			}
		}
		return nil
	}
}

// TestBackupPathOutsideTheNamespaceIsRefused: a new cluster whose backup
// path is another namespace's (the start of a squat, or a read of another
// tenant's backups with shared bucket keys) is refused with a reason and
// a Warning Event, and gets no pod; moved under its namespace, it is
// created archiving there.
func TestBackupPathOutsideTheNamespaceIsRefused(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	create(t, s3Secret(ns, "s3"))
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s3-ca", Namespace: ns},
		Data:       map[string][]byte{"ca.pem": []byte(fakeCAPEM)},
	})
	cluster := newBackupCluster(ns)
	cluster.Spec.Backup.ObjectStore.Path = "victims/pg"
	create(t, cluster)
	key := client.ObjectKeyFromObject(cluster)

	clusterWhen(t, key, failedSaying(tuskv1alpha1.ReasonBackupPathRefused, fmt.Sprintf(`spec.backup.objectStore.path "victims/pg" is outside the namespace: it must be %q or start with "%s/", `+
		"so that no namespace reads or takes another's backups in a shared bucket (the operator's --object-store-paths=any allows any path)", ns, ns)))
	if e := waitForEvent(t, ns, tuskv1alpha1.ReasonBackupPathRefused, "victims/pg"); e.Type != corev1.EventTypeWarning {
		t.Errorf("Event %s, want a Warning", e.Type)
	}
	noPods(t, ns)

	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, key, cluster); err != nil {
			return err
		}
		cluster.Spec.Backup.ObjectStore.Path = ns + "/pg"
		return env.Client.Update(ctx, cluster)
	}); err != nil {
		t.Fatal(err)
	}
	c := clusterWhen(t, key, creating)
	if c.Status.BackupLocation != ns+"/pg" {
		t.Errorf("status.backupLocation = %q, want %q", c.Status.BackupLocation, ns+"/pg")
	}
	if got := flagValue(get(t, ns, "pg-1", &corev1.Pod{}).Spec.Containers[0].Command, "--wal-archive-path"); got != ns+"/pg" {
		t.Errorf("pod pg-1 archives to %q, want %q", got, ns+"/pg")
	}
}
