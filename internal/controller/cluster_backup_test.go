package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// TestBackupPodMountsTheKeysItsArgumentsName: each file the archive flags
// name is an item of the Secret volume mounted there, from the key the
// spec names, and only those keys are mounted.
func TestBackupPodMountsTheKeysItsArgumentsName(t *testing.T) {
	c := backupCluster()
	pod := instancePod(c, instanceName(c.Name, 1), instanceapi.RolePrimary, testManagerImage)
	args := pod.Spec.Containers[0].Command
	checkSecretFileFlags(t, pod, map[string]secretFile{
		"--wal-archive-access-key-id-file":     {"backup-credentials", "s3-creds", "id"},
		"--wal-archive-secret-access-key-file": {"backup-credentials", "s3-creds", "secret"},
		"--wal-archive-ca-file":                {"backup-ca", "s3-ca", "bundle.pem"},
	})
	if got := len(volumeNamed(pod, "backup-credentials").Secret.Items); got != 2 {
		t.Errorf("the credentials volume mounts %d keys, want the 2 the spec names", got)
	}
	for flag, value := range map[string]string{
		"--wal-archive-endpoint": "https://s3.example.com", "--wal-archive-bucket": "backups",
		"--wal-archive-path": "db/archived", "--wal-archive-region": "eu-west-1", "--wal-archive-binary": instanceapi.ManagerBinary,
	} {
		if got := flagValue(args, flag); got != value {
			t.Errorf("%s=%q, want %q", flag, got, value)
		}
	}
}

func TestArchivePathDefaultsToTheNamespaceAndClusterName(t *testing.T) {
	c := backupCluster()
	if got, want := archivePath(c), c.Namespace+"/"+c.Name; got != want {
		t.Errorf("archivePath = %q, want %q", got, want)
	}
	other := c.DeepCopy()
	other.Namespace = "elsewhere"
	if archivePath(other) == archivePath(c) {
		t.Errorf("clusters %s/%s and %s/%s share the location %q", c.Namespace, c.Name, other.Namespace, other.Name, archivePath(c))
	}
	c.Spec.Backup.ObjectStore.Path = "prod/orders"
	if got := flagValue(instanceArgs(c), "--wal-archive-path"); got != "prod/orders" {
		t.Errorf("--wal-archive-path=%q, want prod/orders", got)
	}
}

// TestNoBackupNoArchiving: without spec.backup nothing of archiving is in
// the pod, so existing clusters' pods keep their hash (the golden files
// hold it) and are not rolled.
func TestNoBackupNoArchiving(t *testing.T) {
	for _, c := range []*tuskv1alpha1.PostgresCluster{defaultCluster(), customCluster()} {
		pod := instancePod(c, instanceName(c.Name, 1), instanceapi.RolePrimary, testManagerImage)
		for _, arg := range pod.Spec.Containers[0].Command {
			if strings.Contains(arg, "archive") {
				t.Errorf("%s: argument %s without spec.backup", c.Name, arg)
			}
		}
		if volumeNamed(pod, "backup-credentials") != nil || volumeNamed(pod, "backup-ca") != nil || len(backupSecrets(c)) != 0 {
			t.Errorf("%s: backup volumes or Secrets without spec.backup", c.Name)
		}
	}
	c := backupCluster()
	for _, s := range []string{"s3-creds", "s3-ca"} {
		if !slices.Contains(mountedSecrets(c), s) || !slices.Contains(userSecrets(c), s) {
			t.Errorf("the backup Secret %s is not among the mounted and the user's Secrets: its changes would not reach the pods", s)
		}
	}
}

func flagValue(args []string, flag string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

func volumeNamed(pod *corev1.Pod, name string) *corev1.Volume {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == name {
			return &pod.Spec.Volumes[i]
		}
	}
	return nil
}

func mountNamed(ctr corev1.Container, name string) *corev1.VolumeMount {
	for i := range ctr.VolumeMounts {
		if ctr.VolumeMounts[i].Name == name {
			return &ctr.VolumeMounts[i]
		}
	}
	return nil
}

// TestSetStatusArchive: status.archive is the primary's report, kept while
// the primary does not answer; failing archiving degrades the cluster but
// leaves it Ready; without spec.backup there is no archive status.
func TestSetStatusArchive(t *testing.T) {
	archived := time.Date(2026, 11, 23, 1, 0, 0, 123456789, time.UTC)
	failed := archived.Add(time.Minute)
	report := func(failing bool) *instanceapi.ArchiveStatus {
		a := &instanceapi.ArchiveStatus{LastArchivedWAL: "000000010000000000000003", LastArchivedTime: &archived}
		if failing {
			a.LastFailedWAL, a.LastFailedTime, a.Failing = "000000010000000000000004", &failed, true
			a.Reason = "access denied: wrong credentials or no permission on the bucket"
		}
		return a
	}
	all := []inst{{serial: 1, ready: true}, {serial: 2, ready: true, streaming: true}, {serial: 3, ready: true, streaming: true}}
	withBackup := func() *tuskv1alpha1.PostgresCluster {
		c := clusterWithPrimary(3, 1)
		c.Spec.PostgreSQL.Synchronous.Mode = tuskv1alpha1.SynchronousOff
		c.Spec.Backup = backupCluster().Spec.Backup
		return c
	}
	condition := func(c *tuskv1alpha1.PostgresCluster, typ string) metav1.Condition {
		cond := meta.FindStatusCondition(c.Status.Conditions, typ)
		if cond == nil {
			t.Fatalf("no %s condition", typ)
		}
		return *cond
	}

	c := withBackup()
	v := testView(c, all...)
	v.members[0].status.Archive = report(true)
	setStatus(c, v, progress{})
	a := c.Status.Archive
	if a == nil || !a.Failing || a.LastFailedWAL != "000000010000000000000004" || a.LastArchivedWAL != "000000010000000000000003" ||
		a.LastArchivedTime == nil || !a.LastArchivedTime.Equal(&metav1.Time{Time: archived.Truncate(time.Second)}) {
		t.Fatalf("status.archive %+v: want the primary's failing report, times in whole seconds", a)
	}
	if d, r := condition(c, tuskv1alpha1.ConditionDegraded), condition(c, tuskv1alpha1.ConditionReady); d.Status != metav1.ConditionTrue || d.Reason != tuskv1alpha1.ReasonArchiveFailing ||
		!strings.Contains(d.Message, "000000010000000000000004") || !strings.Contains(d.Message, "access denied") || r.Status != metav1.ConditionTrue || c.Status.Phase != tuskv1alpha1.ClusterPhaseDegraded {
		t.Errorf("failing archive: Degraded %+v, Ready %+v, phase %s; want Degraded ArchiveFailing naming the WAL and why, still Ready", d, r, c.Status.Phase)
	}

	// The primary does not answer: the last report stays.
	v = testView(c, all...)
	v.members[0].status = nil
	setStatus(c, v, progress{})
	if c.Status.Archive == nil || !c.Status.Archive.Failing {
		t.Errorf("status.archive %+v after the primary did not answer: want the last report kept", c.Status.Archive)
	}

	// Archiving works again.
	v = testView(c, all...)
	v.members[0].status.Archive = report(false)
	setStatus(c, v, progress{})
	if d := condition(c, tuskv1alpha1.ConditionDegraded); c.Status.Archive.Failing || d.Status != metav1.ConditionFalse {
		t.Errorf("healthy archive: status.archive %+v, Degraded %+v", c.Status.Archive, d)
	}

	// No spec.backup: no archive status, whatever an instance says.
	c = clusterWithPrimary(3, 1)
	v = testView(c, all...)
	v.members[0].status.Archive = report(true)
	setStatus(c, v, progress{})
	if c.Status.Archive != nil || condition(c, tuskv1alpha1.ConditionDegraded).Reason == tuskv1alpha1.ReasonArchiveFailing {
		t.Errorf("without spec.backup: status.archive %+v, Degraded %+v", c.Status.Archive, condition(c, tuskv1alpha1.ConditionDegraded))
	}
}

// secretFile is where a flag's file must come from: an item of the Secret
// volume mounted there, holding the Secret's key.
type secretFile struct{ volume, secret, key string }

// checkSecretFileFlags checks that each flag names a file of a read-only
// Secret volume, the item of the key want says.
func checkSecretFileFlags(t *testing.T, pod *corev1.Pod, want map[string]secretFile) {
	t.Helper()
	args := pod.Spec.Containers[0].Command
	for flag, w := range want {
		file := flagValue(args, flag)
		vol := volumeNamed(pod, w.volume)
		mount := mountNamed(pod.Spec.Containers[0], w.volume)
		if file == "" || vol == nil || vol.Secret == nil || mount == nil || !mount.ReadOnly {
			t.Errorf("%s=%q, volume %+v, mount %+v: want a read-only Secret volume", flag, file, vol, mount)
			continue
		}
		item := strings.TrimPrefix(file, mount.MountPath+"/")
		if vol.Secret.SecretName != w.secret || !slices.Contains(vol.Secret.Items, corev1.KeyToPath{Key: w.key, Path: item}) {
			t.Errorf("%s=%s: volume %s mounts %s items %+v, want key %s at %s", flag, file, w.volume, vol.Secret.SecretName, vol.Secret.Items, w.key, item)
		}
	}
}

// TestBackupLocationStaysInItsNamespace: a cluster archives under its
// namespace only, unless the operator allows any path; a path in use
// before the operator checked is kept, a change of it checked again.
func TestBackupLocationStaysInItsNamespace(t *testing.T) {
	for _, tc := range []struct {
		name      string
		path      string // spec.backup.objectStore.path
		accepted  string // status.backupLocation before
		instances int32  // status.lastInstanceSerial
		anyPath   bool
		want      string // the accepted location; "" when refused
	}{
		{name: "the default", want: "db/archived"},
		{name: "under the namespace", path: "db/team/archived/", want: "db/team/archived"},
		{name: "the namespace itself", path: "db", want: "db"},
		{name: "another namespace", path: "prod/orders"},
		{name: "a namespace with the same start", path: "dbx/orders"},
		{name: "any path allowed", path: "prod/orders", anyPath: true, want: "prod/orders"},
		{name: "in use before the check", path: "prod/orders", instances: 3, want: "prod/orders"},
		{name: "accepted before", path: "prod/orders", accepted: "prod/orders", instances: 3, want: "prod/orders"},
		{name: "changed after it was accepted", path: "prod/payments", accepted: "prod/orders", instances: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := backupCluster()
			c.Spec.Backup.ObjectStore.Path = tc.path
			c.Status.BackupLocation, c.Status.LastInstanceSerial = tc.accepted, tc.instances
			r := &ClusterReconciler{Config: Config{AnyObjectStorePath: tc.anyPath}}
			err := r.checkBackupLocation(c)
			if tc.want == "" {
				se, ok := asSpecError(err)
				if !ok || se.reason != tuskv1alpha1.ReasonBackupPathRefused || !strings.Contains(se.message, `it must be "db" or start with "db/"`) {
					t.Fatalf("checkBackupLocation = %v, want the path refused", err)
				}
				if c.Status.BackupLocation != tc.accepted {
					t.Errorf("status.backupLocation = %q after a refusal, want %q as it was", c.Status.BackupLocation, tc.accepted)
				}
				return
			}
			if err != nil || c.Status.BackupLocation != tc.want {
				t.Errorf("checkBackupLocation = %v, status.backupLocation %q; want it accepted as %q", err, c.Status.BackupLocation, tc.want)
			}
		})
	}
}
