package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/retention"
)

// retentionDue says whether retention runs now: never yet, an interval
// since the last run, or the cluster's completed backups changed since (a
// backup completed; and, as the operator's cache may see a backup's
// completion late, whenever the set differs) and no failure asks to wait.
// When not, it says when it will be.
func retentionDue(last *metav1.Time, completedChanged bool, retryAt, now time.Time) (bool, time.Time) {
	if now.Before(retryAt) {
		return false, retryAt
	}
	if last == nil || completedChanged {
		return true, time.Time{}
	}
	next := last.Add(retentionInterval)
	return !now.Before(next), next
}

// reconcileRetention applies spec.backup.retention when it is due, and
// says when it is due next.
func (r *BackupScheduleReconciler) reconcileRetention(ctx context.Context, c *tuskv1alpha1.PostgresCluster, now time.Time) time.Time {
	st := c.Status.Backup
	if c.Spec.Backup.Retention == "" {
		st.FirstRecoverabilityPoint, st.LastRetentionTime = nil, nil
		meta.RemoveStatusCondition(&c.Status.Conditions, tuskv1alpha1.ConditionBackupRetention)
		return time.Time{}
	}
	period, err := retention.ParsePeriod(c.Spec.Backup.Retention)
	if err != nil {
		r.setCondition(c, tuskv1alpha1.ConditionBackupRetention, metav1.ConditionFalse, tuskv1alpha1.ReasonRetentionInvalid, "spec.backup.retention: "+err.Error())
		return time.Time{}
	}
	backups, err := r.clusterBackups(ctx, c)
	if err != nil {
		r.setCondition(c, tuskv1alpha1.ConditionBackupRetention, metav1.ConditionFalse, tuskv1alpha1.ReasonRetentionFailed, retentionFailure(err))
		return r.failedRetention(c, now)
	}
	completed := completedNames(backups)
	due, next := retentionDue(st.LastRetentionTime, completed != r.seenCompleted(c), r.retryTime(c), now)
	if !due {
		return next
	}
	if err := r.applyRetention(ctx, c, backups, period, now); err != nil {
		ctrlLog(ctx).Info("Applying retention failed", "error", err.Error())
		r.setCondition(c, tuskv1alpha1.ConditionBackupRetention, metav1.ConditionFalse, tuskv1alpha1.ReasonRetentionFailed, retentionFailure(err))
		return r.failedRetention(c, now)
	}
	r.retentionDone(c, completed)
	st.LastRetentionTime = ptr.To(metav1.NewTime(now))
	return now.Add(retentionInterval)
}

// applyRetention prunes the store, then the PostgresBackups of what it
// pruned, and records the first recoverability point.
func (r *BackupScheduleReconciler) applyRetention(ctx context.Context, c *tuskv1alpha1.PostgresCluster, backups []tuskv1alpha1.PostgresBackup, period time.Duration, now time.Time) error {
	store, err := r.clusterStore(ctx, c)
	if err != nil {
		return err
	}
	stored, err := retention.Load(ctx, store)
	if err != nil {
		return fmt.Errorf("while listing the backups at %s: %w", store.Location(), err)
	}
	plan := retention.Decide(stored, now, period)
	ctrlLog(ctx).Info("Applying retention", "delete", plan.Delete, "interrupted", plan.Interrupted, "keep", len(plan.Keep))
	res, err := retention.Prune(ctx, store, plan)
	if len(res.Backups)+len(res.Interrupted)+res.WALObjects > 0 {
		r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonBackupsPruned, "Retention", "Deleted %d backups %v, %d interrupted backup directories and %d archived WAL files older than retention %s",
			len(res.Backups), res.Backups, len(res.Interrupted), res.WALObjects, c.Spec.Backup.Retention)
	}
	if err != nil {
		return fmt.Errorf("retention stopped: %w", err)
	}
	if err := r.deletePrunedBackups(ctx, c, backups, stored, res.Backups, now.Add(-period)); err != nil {
		return err
	}
	c.Status.Backup.FirstRecoverabilityPoint = nil
	msg := "No complete backup in the object store yet"
	if t := plan.FirstRecoverabilityPoint; !t.IsZero() {
		c.Status.Backup.FirstRecoverabilityPoint = ptr.To(metav1.NewTime(t.UTC().Truncate(time.Second)))
		msg = fmt.Sprintf("Keeping %d backups for %s; the cluster can be recovered to any time from %s", len(plan.Keep), c.Spec.Backup.Retention, t.UTC().Format(time.RFC3339))
	}
	r.setCondition(c, tuskv1alpha1.ConditionBackupRetention, metav1.ConditionTrue, tuskv1alpha1.ReasonRetentionApplied, msg)
	return nil
}

// retentionFailure is what status and Events say of a failed retention
// run. A failure at the object store is told by its kind and the endpoint
// only: the operator reaches the endpoint from its own place in the
// network, which the tenant's pods may not share, and the cause (refused,
// timed out, what answered) would let whoever writes the spec probe that
// network through status. The operator's log keeps the cause.
func retentionFailure(err error) string {
	var se *objectstore.Error
	if !errors.As(err, &se) {
		return err.Error()
	}
	return fmt.Sprintf("retention stopped at %s of bucket %q at %s: %s (the operator's log has the cause)", se.Op, se.Bucket, se.Endpoint, se.Kind)
}

// deletePrunedBackups deletes the completed PostgresBackups of this
// cluster's location whose backup retention just deleted, or that the
// store no longer has and that ended before the window (an earlier run
// stopped between the store and here). Backups of another location, or
// that do not say where they are, are left.
func (r *BackupScheduleReconciler) deletePrunedBackups(ctx context.Context, c *tuskv1alpha1.PostgresCluster, backups []tuskv1alpha1.PostgresBackup, stored []retention.Backup, pruned []string, windowStart time.Time) error {
	inStore := map[string]bool{}
	for _, b := range stored {
		inStore[b.Name] = true
	}
	for _, name := range pruned {
		inStore[name] = false
	}
	for i := range backups {
		b := &backups[i]
		if b.Status.Phase != tuskv1alpha1.BackupPhaseCompleted || !inClusterLocation(c, b) || inStore[b.Name] {
			continue
		}
		if b.Status.CompletedAt == nil || !b.Status.CompletedAt.Time.Before(windowStart) {
			continue
		}
		if err := r.Delete(ctx, b); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("while deleting the pruned PostgresBackup %s: %w", b.Name, err)
		}
	}
	return nil
}

// inClusterLocation says whether b was taken to c's location as it is now.
func inClusterLocation(c *tuskv1alpha1.PostgresCluster, b *tuskv1alpha1.PostgresBackup) bool {
	if b.Status.ObjectStore == nil {
		return false
	}
	taken := *b.Status.ObjectStore
	if taken.Path == "" {
		taken.Path = legacyArchivePath(b)
	}
	return sameLocation(c.Spec.Backup.ObjectStore, archivePath(c), taken)
}

// clusterBackups are the PostgresBackups of c.
func (r *BackupScheduleReconciler) clusterBackups(ctx context.Context, c *tuskv1alpha1.PostgresCluster) ([]tuskv1alpha1.PostgresBackup, error) {
	var list tuskv1alpha1.PostgresBackupList
	if err := r.List(ctx, &list, client.InNamespace(c.Namespace)); err != nil {
		return nil, fmt.Errorf("while listing the PostgresBackups: %w", err)
	}
	var mine []tuskv1alpha1.PostgresBackup
	for _, b := range list.Items {
		if b.Spec.Cluster.Name == c.Name {
			mine = append(mine, b)
		}
	}
	return mine, nil
}

// completedNames are the names of the completed backups, sorted, as one
// string to compare.
func completedNames(backups []tuskv1alpha1.PostgresBackup) string {
	var names []string
	for _, b := range backups {
		if b.Status.Phase == tuskv1alpha1.BackupPhaseCompleted {
			names = append(names, b.Name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}

// clusterStore is the object store of c's location, with the credentials
// (and CA) of its Secrets, as the instances reach it.
func (r *BackupScheduleReconciler) clusterStore(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (*objectstore.Store, error) {
	spec := c.Spec.Backup.ObjectStore
	id, secret := credentialKeys(spec.CredentialsSecret)
	creds, err := r.secretKeys(ctx, c, "spec.backup.objectStore.credentialsSecret", spec.CredentialsSecret.Name, id, secret)
	if err != nil {
		return nil, err
	}
	cfg := objectstore.Config{
		Endpoint: spec.Endpoint, Bucket: spec.Bucket, Path: archivePath(c), Region: spec.Region,
		AccessKeyID: string(creds[id]), SecretAccessKey: string(creds[secret]),
		AddressCheck: r.storeAddressCheck,
	}
	if ca := spec.CASecret; ca != nil {
		data, err := r.secretKeys(ctx, c, "spec.backup.objectStore.caSecret", ca.Name, ca.Key)
		if err != nil {
			return nil, err
		}
		cfg.CA = data[ca.Key]
	}
	return objectstore.New(cfg)
}

// secretKeys reads a Secret that must have keys, non-empty.
func (r *BackupScheduleReconciler) secretKeys(ctx context.Context, c *tuskv1alpha1.PostgresCluster, field, name string, keys ...string) (map[string][]byte, error) {
	data, err := r.secrets.data(ctx, c.Namespace, name)
	if err != nil {
		return nil, err
	}
	if data == nil {
		return nil, fmt.Errorf("the Secret %s named by %s does not exist", name, field)
	}
	for _, k := range keys {
		if len(data[k]) == 0 {
			return nil, fmt.Errorf("the Secret %s named by %s has no (or an empty) %q key", name, field, k)
		}
	}
	return data, nil
}

// retentionState is what the reconciler remembers of a cluster's
// retention between passes: when it may retry after a failure, and the
// completed backups it last ran with. After a restart it runs once more.
type retentionState struct {
	retryAt   time.Time
	completed string
	ran       bool
}

func (r *BackupScheduleReconciler) state(c *tuskv1alpha1.PostgresCluster) *retentionState {
	if r.retention == nil {
		r.retention = map[client.ObjectKey]*retentionState{}
	}
	key := client.ObjectKeyFromObject(c)
	if r.retention[key] == nil {
		r.retention[key] = &retentionState{}
	}
	return r.retention[key]
}

// failedRetention holds retention back for a while after a failure.
func (r *BackupScheduleReconciler) failedRetention(c *tuskv1alpha1.PostgresCluster, now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.state(c)
	s.retryAt = now.Add(retentionRetryAfterFail)
	return s.retryAt
}

func (r *BackupScheduleReconciler) retryTime(c *tuskv1alpha1.PostgresCluster) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state(c).retryAt
}

// seenCompleted is completedNames of the last run; a value no set of
// names has before the first run.
func (r *BackupScheduleReconciler) seenCompleted(c *tuskv1alpha1.PostgresCluster) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.state(c); s.ran {
		return s.completed
	}
	return "/"
}

func (r *BackupScheduleReconciler) retentionDone(c *tuskv1alpha1.PostgresCluster, completed string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retention[client.ObjectKeyFromObject(c)] = &retentionState{completed: completed, ran: true}
}

// forgetRetention drops a deleted cluster's state.
func (r *BackupScheduleReconciler) forgetRetention(key client.ObjectKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.retention, key)
}
