package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// Where the first instance of a recovering cluster mounts the source
// location's Secrets: apart from the cluster's own backup Secrets, which
// may be other ones.
const (
	recoveryCredentialsMount = "/etc/tusk/secrets/recovery-source" //nolint:gosec // a mount path, not a credential
	recoveryCAMount          = "/etc/tusk/tls/recovery-source-ca"
	latestBackup             = "latest" // the instance manager's --recovery-backup for the newest fitting backup
)

// recoverySource is where the first instance recovers from: a location
// (its path resolved), a backup there (or latestBackup) and the target.
type recoverySource struct {
	store  tuskv1alpha1.ObjectStoreSpec
	backup string
	target *tuskv1alpha1.RecoveryTarget
	// field names the spec field the store comes from, for messages.
	field string
	// clone, when set, is the cluster to copy instead (bootstrap.clone);
	// the fields above are then unused.
	clone *tuskv1alpha1.PostgresCluster
	// imp, when set, is the server to import from after initdb
	// (bootstrap.initdb.import); the fields above are then unused.
	imp *tuskv1alpha1.ImportSpec
}

// recoveryPending says the cluster bootstraps by recovery and its first
// primary has not served yet: only then are the source and its Secrets
// needed (the source's backup may be deleted once the cluster runs).
func recoveryPending(c *tuskv1alpha1.PostgresCluster) bool {
	return c.Spec.Bootstrap != nil && c.Spec.Bootstrap.Recovery != nil && stillCreating(c)
}

// resolveRecovery decides where a recovery reads from. backup is the
// PostgresBackup that spec.bootstrap.recovery.backup names, nil when it
// does not exist. It returns the source, or a reason to wait (the backup
// is not there or not complete yet), or a spec error: a failed backup, a
// backup that records no location, or a source that is the cluster's own
// archive location.
func resolveRecovery(c *tuskv1alpha1.PostgresCluster, backup *tuskv1alpha1.PostgresBackup, anyPath bool) (*recoverySource, string, error) {
	spec := c.Spec.Bootstrap.Recovery
	src := &recoverySource{target: spec.Target, backup: latestBackup, field: "spec.bootstrap.recovery.source"}
	switch {
	case spec.Source != nil:
		src.store = *spec.Source
		if strings.Trim(src.store.Path, "/") == "" {
			return nil, "", userError(tuskv1alpha1.ReasonRecoverySourceInvalid, "spec.bootstrap.recovery.source.path is required: "+
				"the location's path in the bucket (<namespace>/<source cluster> when its spec.backup.objectStore.path was unset)")
		}
		if !anyPath && !inNamespace(src.store.Path, c.Namespace) {
			return nil, "", userError(tuskv1alpha1.ReasonRecoverySourceInvalid, "spec.bootstrap.recovery.source.path %q is outside the namespace: "+
				"a cluster recovers from its own namespace's locations only (%q or under \"%s/\"; the operator's --object-store-paths=any allows any path)",
				strings.Trim(src.store.Path, "/"), c.Namespace, c.Namespace)
		}
	case spec.Backup != nil:
		name := spec.Backup.Name
		switch {
		case backup == nil:
			return nil, fmt.Sprintf("Waiting for the PostgresBackup %s named by spec.bootstrap.recovery.backup: it does not exist", name), nil
		case backup.Status.Phase == tuskv1alpha1.BackupPhaseFailed:
			return nil, "", userError(tuskv1alpha1.ReasonRecoverySourceInvalid, "the PostgresBackup %s named by spec.bootstrap.recovery.backup failed (%s): "+
				"recover from another backup", name, backup.Status.Error)
		case backup.Status.Phase != tuskv1alpha1.BackupPhaseCompleted:
			return nil, fmt.Sprintf("Waiting for the PostgresBackup %s named by spec.bootstrap.recovery.backup to complete (phase %q)",
				name, backup.Status.Phase), nil
		case backup.Status.ObjectStore == nil:
			return nil, "", userError(tuskv1alpha1.ReasonRecoverySourceInvalid, "the PostgresBackup %s named by spec.bootstrap.recovery.backup "+
				"records no object store (status.objectStore): recover from its location with spec.bootstrap.recovery.source", name)
		}
		src.store, src.backup = *backup.Status.ObjectStore, name
		src.field = "status.objectStore of the PostgresBackup " + name
		if src.store.Path == "" {
			src.store.Path = legacyArchivePath(backup)
		}
	default:
		return nil, "", userError(tuskv1alpha1.ReasonRecoverySourceInvalid, "spec.bootstrap.recovery needs a backup or a source")
	}
	if c.Spec.Backup != nil && sameLocation(c.Spec.Backup.ObjectStore, archivePath(c), src.store) {
		return nil, "", userError(tuskv1alpha1.ReasonRecoverySourceInvalid, "refusing to recover from %s: it is this cluster's own spec.backup location, "+
			"and archiving there would mix the new cluster's WAL into the source's archive; give spec.backup.objectStore another path",
			locationString(src.store))
	}
	return src, "", nil
}

// sameLocation compares the cluster's archive location (its path
// resolved to ownPath) with a source location: endpoint (without a
// trailing slash, host case-insensitive), bucket and path.
func sameLocation(own tuskv1alpha1.ObjectStoreSpec, ownPath string, src tuskv1alpha1.ObjectStoreSpec) bool {
	endpoint := func(e string) string { return strings.ToLower(strings.TrimRight(e, "/")) }
	return endpoint(own.Endpoint) == endpoint(src.Endpoint) && own.Bucket == src.Bucket &&
		strings.Trim(ownPath, "/") == strings.Trim(src.Path, "/")
}

func locationString(s tuskv1alpha1.ObjectStoreSpec) string {
	return strings.TrimRight(s.Endpoint, "/") + "/" + s.Bucket + "/" + strings.Trim(s.Path, "/")
}

// reconcileRecoverySource resolves the source of a pending recovery and
// checks its Secrets. It returns nil when there is nothing to recover, and
// a message when the cluster must wait (status says so, no pod is
// created; the PostgresBackup watch wakes it).
func (r *ClusterReconciler) reconcileRecoverySource(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (*recoverySource, string, error) {
	if !recoveryPending(c) {
		return nil, "", nil
	}
	var backup *tuskv1alpha1.PostgresBackup
	if ref := c.Spec.Bootstrap.Recovery.Backup; ref != nil {
		backup = &tuskv1alpha1.PostgresBackup{}
		err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: ref.Name}, backup)
		if apierrors.IsNotFound(err) {
			backup = nil
		} else if err != nil {
			return nil, "", fmt.Errorf("while reading the PostgresBackup %s: %w", ref.Name, err)
		}
	}
	src, wait, err := resolveRecovery(c, backup, r.Config.AnyObjectStorePath)
	if err != nil || wait != "" {
		return nil, wait, err
	}
	store := src.store
	id, secret := credentialKeys(store.CredentialsSecret)
	if err := r.requireSecretKeysAs(ctx, c, tuskv1alpha1.ReasonRecoverySourceInvalid, src.field+".credentialsSecret", store.CredentialsSecret.Name, id, secret); err != nil {
		return nil, "", err
	}
	if ca := store.CASecret; ca != nil {
		if err := r.requireSecretKeysAs(ctx, c, tuskv1alpha1.ReasonRecoverySourceInvalid, src.field+".caSecret", ca.Name, ca.Key); err != nil {
			return nil, "", err
		}
	}
	return src, "", nil
}

// recoverySecrets are the source's Secrets a pending recovery or import
// mounts.
func recoverySecrets(c *tuskv1alpha1.PostgresCluster) []string {
	if !recoveryPending(c) {
		return importSecrets(c)
	}
	if s := c.Spec.Bootstrap.Recovery.Source; s != nil {
		names := []string{s.CredentialsSecret.Name}
		if s.CASecret != nil {
			names = append(names, s.CASecret.Name)
		}
		return names
	}
	return nil // a PostgresBackup's Secrets: the backup's own watch wakes the cluster
}

// recoveryArgs tell the first instance's manager where to recover from.
func recoveryArgs(src *recoverySource) []string {
	s := src.store
	args := []string{
		"--recovery-source-endpoint=" + s.Endpoint,
		"--recovery-source-bucket=" + s.Bucket,
		"--recovery-source-path=" + s.Path,
		"--recovery-source-access-key-id-file=" + recoveryCredentialsMount + "/" + fileAccessKeyID,
		"--recovery-source-secret-access-key-file=" + recoveryCredentialsMount + "/" + fileSecretAccessKey,
		"--recovery-backup=" + src.backup,
	}
	if s.Region != "" {
		args = append(args, "--recovery-source-region="+s.Region)
	}
	if s.CASecret != nil {
		args = append(args, "--recovery-source-ca-file="+recoveryCAMount+"/"+fileBackupCA)
	}
	if t := src.target; t != nil {
		switch {
		case t.Time != nil:
			args = append(args, "--recovery-target-time="+t.Time.UTC().Format(time.RFC3339))
		case t.LSN != "":
			args = append(args, "--recovery-target-lsn="+t.LSN)
		case t.Name != "":
			args = append(args, "--recovery-target-name="+t.Name)
		}
	}
	return args
}

// withRecovery adds the recovery (or clone) source to a primary's pod: the flags and
// the source's Secrets, mounted read-only like the cluster's own. The
// pod keeps the cluster's spec hash, so it is not rolled once the cluster
// has recovered.
func withRecovery(pod *corev1.Pod, src *recoverySource) {
	if src.clone != nil {
		withClone(pod, src.clone)
		return
	}
	if src.imp != nil {
		withImport(pod, src.imp)
		return
	}
	s := src.store
	id, secret := credentialKeys(s.CredentialsSecret)
	spec := &pod.Spec
	spec.Volumes = append(spec.Volumes, secretItemsVolume("recovery-source-credentials", s.CredentialsSecret.Name,
		corev1.KeyToPath{Key: id, Path: fileAccessKeyID}, corev1.KeyToPath{Key: secret, Path: fileSecretAccessKey}))
	ctr := &spec.Containers[0]
	ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "recovery-source-credentials", MountPath: recoveryCredentialsMount, ReadOnly: true})
	if ca := s.CASecret; ca != nil {
		spec.Volumes = append(spec.Volumes, secretItemsVolume("recovery-source-ca", ca.Name, corev1.KeyToPath{Key: ca.Key, Path: fileBackupCA}))
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "recovery-source-ca", MountPath: recoveryCAMount, ReadOnly: true})
	}
	ctr.Command = append(ctr.Command, recoveryArgs(src)...)
}

// recoveringCondition is the Progressing condition while the first
// primary recovers, from its report; ok is false when it is not
// recovering.
func recoveringCondition(c *tuskv1alpha1.PostgresCluster, v *view) (metav1.Condition, bool) {
	primary := v.member(c.Status.CurrentPrimary)
	if primary == nil || primary.status == nil || primary.status.Phase != instanceapi.PhaseRecovering || primary.status.Recovery == nil {
		return metav1.Condition{}, false
	}
	rec := primary.status.Recovery
	msg := fmt.Sprintf("Recovering the primary %s", primary.name)
	if initDB(c).Import != nil {
		msg = fmt.Sprintf("Importing into the primary %s", primary.name)
	}
	if rec.Backup != "" {
		msg += " from the backup " + rec.Backup
	}
	msg += ": " + rec.Step
	if rec.FailedAttempts > 0 {
		msg += fmt.Sprintf("; %d failed attempts, the last: %s", rec.FailedAttempts, primary.status.LastError)
	}
	return metav1.Condition{Type: tuskv1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: tuskv1alpha1.ReasonRecovering, Message: msg}, true
}

// clustersRecoveringFrom maps a PostgresBackup to the clusters of its
// namespace that wait to recover from it.
func (r *ClusterReconciler) clustersRecoveringFrom(ctx context.Context, o client.Object) []reconcile.Request {
	var list tuskv1alpha1.PostgresClusterList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrlLog(ctx).Error(err, "Listing the clusters that recover from a PostgresBackup", "backup", o.GetName())
		return nil
	}
	var requests []reconcile.Request
	for i := range list.Items {
		c := &list.Items[i]
		if recoveryPending(c) && c.Spec.Bootstrap.Recovery.Backup != nil && c.Spec.Bootstrap.Recovery.Backup.Name == o.GetName() {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)})
		}
	}
	return requests
}
