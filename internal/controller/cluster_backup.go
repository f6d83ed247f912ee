package controller

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// Where an instance pod mounts the object store's Secrets, and the file
// names of the keys there (the Secret's own key names may differ).
const (
	backupCredentialsMount = "/etc/tusk/secrets/backup" //nolint:gosec // a mount path, not a credential
	backupCAMount          = "/etc/tusk/tls/backup-ca"
	fileAccessKeyID        = "ACCESS_KEY_ID"
	fileSecretAccessKey    = "SECRET_ACCESS_KEY"
	fileBackupCA           = "ca.crt"
)

// Default key names of the credentials Secret (the CRD's defaults too).
const (
	defaultAccessKeyIDKey     = "ACCESS_KEY_ID"
	defaultSecretAccessKeyKey = "SECRET_ACCESS_KEY"
)

// credentialKeys are the keys of the credentials Secret, defaulted.
func credentialKeys(s tuskv1alpha1.S3CredentialsSecret) (id, secret string) {
	id, secret = s.AccessKeyIDKey, s.SecretAccessKeyKey
	if id == "" {
		id = defaultAccessKeyIDKey
	}
	if secret == "" {
		secret = defaultSecretAccessKeyKey
	}
	return id, secret
}

// archivePath is the cluster's location in the bucket: <namespace>/<name>
// unless spec.backup.objectStore.path says otherwise. The namespace is
// part of it so that two clusters of the same name in two namespaces that
// share a bucket never share a location (each one's retention would prune
// the other's backups). After a major upgrade, the new database system
// archives into a subdirectory of it (status.archiveSubdirectory).
func archivePath(c *tuskv1alpha1.PostgresCluster) string {
	base := archiveBase(c)
	if sub := c.Status.ArchiveSubdirectory; sub != "" {
		return strings.TrimRight(base, "/") + "/" + sub
	}
	return base
}

// archiveBase is the cluster's backup path, before any subdirectory
// of a major upgrade.
func archiveBase(c *tuskv1alpha1.PostgresCluster) string {
	if p := c.Spec.Backup.ObjectStore.Path; p != "" {
		return p
	}
	return c.Namespace + "/" + c.Name
}

// inNamespace says whether an object-store path is the namespace's: the
// namespace itself or under it.
func inNamespace(path, namespace string) bool {
	path = strings.Trim(path, "/")
	return path == namespace || strings.HasPrefix(path, namespace+"/")
}

// checkBackupLocation accepts the cluster's backup path, recording it in
// status, or refuses one outside the namespace (unless any path is
// allowed). A path already in use when the operator began checking (a
// cluster with instances and no accepted location yet) is accepted as it
// is, so an operator upgrade stops no running cluster; a change of it is
// checked again.
func (r *ClusterReconciler) checkBackupLocation(c *tuskv1alpha1.PostgresCluster) error {
	path := strings.Trim(archiveBase(c), "/")
	switch {
	case path == c.Status.BackupLocation:
		return nil
	case r.Config.AnyObjectStorePath || inNamespace(path, c.Namespace),
		c.Status.BackupLocation == "" && c.Status.LastInstanceSerial > 0:
		c.Status.BackupLocation = path
		return nil
	}
	return userError(tuskv1alpha1.ReasonBackupPathRefused, "spec.backup.objectStore.path %q is outside the namespace: it must be %q or start with \"%s/\", "+
		"so that no namespace reads or takes another's backups in a shared bucket (the operator's --object-store-paths=any allows any path)",
		path, c.Namespace, c.Namespace)
}

// legacyArchivePath is where a backup whose status records no path was
// taken: before the path was recorded, the default was the cluster's name.
func legacyArchivePath(b *tuskv1alpha1.PostgresBackup) string {
	return b.Spec.Cluster.Name
}

// archiveArgs tell the instance manager where to archive WAL; none
// without spec.backup, so such clusters' pods keep their hash.
func archiveArgs(c *tuskv1alpha1.PostgresCluster) []string {
	if c.Spec.Backup == nil {
		return nil
	}
	store := c.Spec.Backup.ObjectStore
	args := []string{
		"--wal-archive-endpoint=" + store.Endpoint,
		"--wal-archive-bucket=" + store.Bucket,
		"--wal-archive-path=" + archivePath(c),
		"--wal-archive-access-key-id-file=" + backupCredentialsMount + "/" + fileAccessKeyID,
		"--wal-archive-secret-access-key-file=" + backupCredentialsMount + "/" + fileSecretAccessKey,
		"--wal-archive-binary=" + instanceapi.ManagerBinary,
	}
	if store.Region != "" {
		args = append(args, "--wal-archive-region="+store.Region)
	}
	if store.CASecret != nil {
		args = append(args, "--wal-archive-ca-file="+backupCAMount+"/"+fileBackupCA)
	}
	return args
}

// backupVolumes mount only the keys the instance manager needs, read-only.
func backupVolumes(c *tuskv1alpha1.PostgresCluster) []corev1.Volume {
	if c.Spec.Backup == nil {
		return nil
	}
	store := c.Spec.Backup.ObjectStore
	id, secret := credentialKeys(store.CredentialsSecret)
	vols := []corev1.Volume{secretItemsVolume("backup-credentials", store.CredentialsSecret.Name,
		corev1.KeyToPath{Key: id, Path: fileAccessKeyID}, corev1.KeyToPath{Key: secret, Path: fileSecretAccessKey})}
	if store.CASecret != nil {
		vols = append(vols, secretItemsVolume("backup-ca", store.CASecret.Name, corev1.KeyToPath{Key: store.CASecret.Key, Path: fileBackupCA}))
	}
	return vols
}

func backupMounts(c *tuskv1alpha1.PostgresCluster) []corev1.VolumeMount {
	if c.Spec.Backup == nil {
		return nil
	}
	mounts := []corev1.VolumeMount{{Name: "backup-credentials", MountPath: backupCredentialsMount, ReadOnly: true}}
	if c.Spec.Backup.ObjectStore.CASecret != nil {
		mounts = append(mounts, corev1.VolumeMount{Name: "backup-ca", MountPath: backupCAMount, ReadOnly: true})
	}
	return mounts
}

func secretItemsVolume(name, secretName string, items ...corev1.KeyToPath) corev1.Volume {
	v := secretVolume(name, secretName)
	v.Secret.Items = items
	return v
}

// backupSecrets are the user's Secrets the pods mount for backups.
func backupSecrets(c *tuskv1alpha1.PostgresCluster) []string {
	if c.Spec.Backup == nil {
		return nil
	}
	names := []string{c.Spec.Backup.ObjectStore.CredentialsSecret.Name}
	if ca := c.Spec.Backup.ObjectStore.CASecret; ca != nil {
		names = append(names, ca.Name)
	}
	return names
}

// checkBackupSecrets refuses a spec.backup whose Secrets or keys are
// missing: a pod mounting them would never start (the kubelet cannot
// mount a missing key), and the user must fix it.
func (r *ClusterReconciler) checkBackupSecrets(ctx context.Context, c *tuskv1alpha1.PostgresCluster) error {
	if c.Spec.Backup == nil {
		return nil
	}
	if err := r.checkBackupLocation(c); err != nil {
		return err
	}
	store := c.Spec.Backup.ObjectStore
	id, secret := credentialKeys(store.CredentialsSecret)
	if err := r.requireSecretKeys(ctx, c, "spec.backup.objectStore.credentialsSecret", store.CredentialsSecret.Name, id, secret); err != nil {
		return err
	}
	if ca := store.CASecret; ca != nil {
		return r.requireSecretKeys(ctx, c, "spec.backup.objectStore.caSecret", ca.Name, ca.Key)
	}
	return nil
}

// requireSecretKeys checks that the Secret exists with non-empty keys.
func (r *ClusterReconciler) requireSecretKeys(ctx context.Context, c *tuskv1alpha1.PostgresCluster, field, name string, keys ...string) error {
	return r.requireSecretKeysAs(ctx, c, tuskv1alpha1.ReasonBackupSecretInvalid, field, name, keys...)
}

// requireSecretKeysAs is requireSecretKeys reporting reason.
func (r *ClusterReconciler) requireSecretKeysAs(ctx context.Context, c *tuskv1alpha1.PostgresCluster, reason, field, name string, keys ...string) error {
	data, err := r.secrets.data(ctx, c.Namespace, name)
	if err != nil {
		return err
	}
	if data == nil {
		return userError(reason, "the Secret %s named by %s does not exist", name, field)
	}
	for _, k := range keys {
		if len(data[k]) == 0 {
			return userError(reason, "the Secret %s named by %s has no (or an empty) %q key", name, field, k)
		}
	}
	return nil
}

// archiveStatus is the primary's report of WAL archiving; the last one
// known while the primary does not answer; nil without spec.backup.
func archiveStatus(c *tuskv1alpha1.PostgresCluster, v *view) *tuskv1alpha1.ArchiveStatus {
	if c.Spec.Backup == nil {
		return nil
	}
	primary := v.member(c.Status.CurrentPrimary)
	if primary == nil || primary.status == nil || primary.status.Role != instanceapi.RolePrimary || primary.status.Archive == nil {
		return c.Status.Archive
	}
	a := primary.status.Archive
	return &tuskv1alpha1.ArchiveStatus{
		LastArchivedWAL:  a.LastArchivedWAL,
		LastArchivedTime: statusTime(a.LastArchivedTime),
		LastFailedWAL:    a.LastFailedWAL,
		LastFailedTime:   statusTime(a.LastFailedTime),
		Failing:          a.Failing,
		Reason:           truncate(a.Reason, maxArchiveReason),
	}
}

// maxArchiveReason bounds the reason status copies from an instance.
const maxArchiveReason = 1024

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// statusTime is t as status stores it (whole seconds), so an unchanged
// report compares equal to what was written and costs no write.
func statusTime(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	return ptr.To(metav1.NewTime(t.UTC().Truncate(time.Second)))
}
