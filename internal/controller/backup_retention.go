package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// reconcileRetention applies spec.backup.retention when it is due, tells
// the ClusterReconciler how it went, and says when it is due next. An
// invalid retention is the ClusterReconciler's to report.
func (r *BackupScheduleReconciler) reconcileRetention(ctx context.Context, c *tuskv1alpha1.PostgresCluster, backups []tuskv1alpha1.PostgresBackup, now time.Time) time.Time {
	key := client.ObjectKeyFromObject(c)
	period, err := retention.ParsePeriod(c.Spec.Backup.Retention)
	if c.Spec.Backup.Retention == "" || err != nil {
		r.forgetRetention(key)
		return time.Time{}
	}
	if c.Status.SystemIdentifier == "" {
		// Nothing proves yet which location is the cluster's own
		// (retention.CheckOwner): the status write that brings the
		// primary's report wakes this reconciler.
		return time.Time{}
	}
	completed := completedNames(backups)
	last, seen, retryAt := r.retentionState(key)
	due, next := retentionDue(last, completed != seen, retryAt, now)
	if !due {
		return next
	}
	res, err := r.applyRetentionInTime(ctx, c, backups, period, now)
	if err != nil {
		ctrlLog(ctx).Info("Applying retention failed", "error", err.Error())
		res, _ = r.results.get(key)
		res.applied, res.reason, res.message = false, tuskv1alpha1.ReasonRetentionFailed, retentionFailure(err)
		if errors.Is(err, retention.ErrNotOwner) {
			res.reason = tuskv1alpha1.ReasonRetentionRefused
			r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonRetentionRefused, "Retention", "%s", err.Error())
		}
		r.results.record(key, res)
		return r.failedRetention(key, now)
	}
	r.retentionDone(key, completed, now)
	r.results.record(key, res)
	return now.Add(retentionInterval)
}

// DefaultRetentionRunTimeout bounds a retention run unless the Config
// says otherwise. A run prunes what it can meanwhile; the next one goes on
// from there.
const DefaultRetentionRunTimeout = 5 * time.Minute

// errRetentionTimedOut says a retention run was stopped at its deadline.
var errRetentionTimedOut = errors.New("retention stopped at its deadline")

// applyRetentionInTime is applyRetention bounded by the run's deadline:
// the endpoint is the spec's writer's to choose, and one that drips its
// answers, or lists without end, must not hold a worker every cluster's
// schedules share.
func (r *BackupScheduleReconciler) applyRetentionInTime(ctx context.Context, c *tuskv1alpha1.PostgresCluster, backups []tuskv1alpha1.PostgresBackup, period time.Duration, now time.Time) (retentionResult, error) {
	limit := cmp.Or(r.retentionTimeout, DefaultRetentionRunTimeout)
	runCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	res, err := r.applyRetention(runCtx, c, backups, period, now)
	if err != nil && ctx.Err() == nil && errors.Is(runCtx.Err(), context.DeadlineExceeded) {
		return res, fmt.Errorf("%w after %s: the object store at %s answered too slowly or listed without end; the next run goes on from what this one pruned",
			errRetentionTimedOut, limit, c.Spec.Backup.ObjectStore.Endpoint)
	}
	return res, err
}

// applyRetention prunes the store, then the PostgresBackups of what it
// pruned, and says what it kept.
func (r *BackupScheduleReconciler) applyRetention(ctx context.Context, c *tuskv1alpha1.PostgresCluster, backups []tuskv1alpha1.PostgresBackup, period time.Duration, now time.Time) (retentionResult, error) {
	store, err := r.clusterStore(ctx, c)
	if err != nil {
		return retentionResult{}, err
	}
	if err := retention.CheckOwner(ctx, store, c.Status.SystemIdentifier); err != nil {
		return retentionResult{}, err
	}
	stored, err := retention.Load(ctx, store)
	if err != nil {
		return retentionResult{}, fmt.Errorf("while listing the backups at %s: %w", store.Location(), err)
	}
	plan := retention.Decide(stored, now, period)
	ctrlLog(ctx).Info("Applying retention", "delete", plan.Delete, "interrupted", plan.Interrupted, "keep", len(plan.Keep))
	res, err := retention.Prune(ctx, store, plan)
	if len(res.Backups)+len(res.Interrupted)+res.WALObjects > 0 {
		r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonBackupsPruned, "Retention", "Deleted %d backups %v, %d interrupted backup directories and %d archived WAL files older than retention %s",
			len(res.Backups), res.Backups, len(res.Interrupted), res.WALObjects, c.Spec.Backup.Retention)
	}
	if err != nil {
		return retentionResult{}, fmt.Errorf("retention stopped: %w", err)
	}
	if err := r.deletePrunedBackups(ctx, c, backups, stored, res.Backups, now.Add(-period)); err != nil {
		return retentionResult{}, err
	}
	out := retentionResult{applied: true, reason: tuskv1alpha1.ReasonRetentionApplied, message: "No complete backup in the object store yet", appliedAt: now}
	if t := plan.FirstRecoverabilityPoint; !t.IsZero() {
		out.firstRecoverability = t.UTC().Truncate(time.Second)
		out.message = fmt.Sprintf("Keeping %d backups for %s; the cluster can be recovered to any time from %s", len(plan.Keep), c.Spec.Backup.Retention, t.UTC().Format(time.RFC3339))
	}
	return out, nil
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
func clusterBackups(ctx context.Context, reader client.Reader, c *tuskv1alpha1.PostgresCluster) ([]tuskv1alpha1.PostgresBackup, error) {
	var list tuskv1alpha1.PostgresBackupList
	if err := reader.List(ctx, &list, client.InNamespace(c.Namespace)); err != nil {
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
// retention between passes: when it last ran to the end, with which
// completed backups, and when it may retry after a failure. After a
// restart it runs once more.
type retentionState struct {
	retryAt   time.Time
	appliedAt time.Time
	completed string
	ran       bool
}

func (r *BackupScheduleReconciler) state(key client.ObjectKey) *retentionState {
	if r.retention == nil {
		r.retention = map[client.ObjectKey]*retentionState{}
	}
	if r.retention[key] == nil {
		r.retention[key] = &retentionState{}
	}
	return r.retention[key]
}

// retentionState says when retention last ran to the end (nil: not since
// the operator started), the completedNames of that run (a value no set
// of names has before the first), and when it may retry a failure.
func (r *BackupScheduleReconciler) retentionState(key client.ObjectKey) (*metav1.Time, string, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.state(key)
	if !s.ran {
		return nil, "/", s.retryAt
	}
	return ptr.To(metav1.NewTime(s.appliedAt)), s.completed, s.retryAt
}

// failedRetention holds retention back for a while after a failure.
func (r *BackupScheduleReconciler) failedRetention(key client.ObjectKey, now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.state(key)
	s.retryAt = now.Add(retentionRetryAfterFail)
	return s.retryAt
}

func (r *BackupScheduleReconciler) retentionDone(key client.ObjectKey, completed string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retention[key] = &retentionState{completed: completed, appliedAt: now, ran: true}
}

// forgetRetention drops the state and outcome of a cluster deleted, or
// without (a valid) retention.
func (r *BackupScheduleReconciler) forgetRetention(key client.ObjectKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.retention, key)
	r.results.forget(key)
}
