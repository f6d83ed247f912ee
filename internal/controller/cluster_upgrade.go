package controller

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// A major upgrade (docs/upgrades.md) is a state machine kept in
// status.majorUpgrade, one phase per pass at most, its moves listed in
// upgradeMoves (cluster_upgrade_phases.go). The primary's instance manager
// does the work on its own volume (pgupgrade): the operator only chooses
// which image and arguments each pod gets, and reads how it went from
// /status.

// imageTag finds the version tag in an image reference, as the CRD's rule
// on spec.image does.
var imageTag = regexp.MustCompile(`:([0-9]+)([.][0-9]+)*(-[^/:@]*)?(@|$)`)

// imageMajor is the PostgreSQL major version an image's tag names, 0 when
// it names none (a digest, latest).
func imageMajor(image string) int32 {
	m := imageTag.FindStringSubmatch(image)
	if m == nil {
		return 0
	}
	n, err := strconv.ParseInt(m[1], 10, 32)
	if err != nil {
		return 0
	}
	return int32(n)
}

// reportedMajor is the major version of an instance's server, 0 when it
// did not say.
func reportedMajor(st *instanceapi.Status) int32 {
	if st == nil {
		return 0
	}
	major, _, _ := strings.Cut(st.PostgresVersion, ".")
	n, err := strconv.ParseInt(major, 10, 32)
	if err != nil {
		return 0
	}
	return int32(n)
}

// imageToRun is the image the instances run: the old one while an upgrade
// to spec.image waits to start, backs up, stops the replicas, rolls back
// or after it failed (until spec.image changes again); spec.image
// otherwise. A pod of the new major on the old data would not start.
func imageToRun(c *tuskv1alpha1.PostgresCluster) string {
	u := c.Status.MajorUpgrade
	if u != nil && u.ToImage == c.Spec.Image {
		switch u.Phase {
		case tuskv1alpha1.MajorUpgradeBackingUp, tuskv1alpha1.MajorUpgradeStoppingReplicas, tuskv1alpha1.MajorUpgradeRollingBack,
			tuskv1alpha1.MajorUpgradeFailed:
			return u.FromImage
		}
		return c.Spec.Image
	}
	if upgradePending(c) && c.Status.Image != "" {
		return c.Status.Image
	}
	return c.Spec.Image
}

// upgradePending says spec.image names a newer major than the data's.
func upgradePending(c *tuskv1alpha1.PostgresCluster) bool {
	want, have := imageMajor(c.Spec.Image), c.Status.PostgresMajor
	return want > 0 && have > 0 && want > have
}

// recordImage keeps spec.image as the image of the data's major, except
// while an upgrade runs or waits to start.
func recordImage(c *tuskv1alpha1.PostgresCluster) {
	if !upgradeUnderway(c) && !upgradePending(c) {
		c.Status.Image = c.Spec.Image
	}
}

// upgradeUnderway says a major upgrade runs (its backup included).
func upgradeUnderway(c *tuskv1alpha1.PostgresCluster) bool {
	u := c.Status.MajorUpgrade
	if u == nil {
		return false
	}
	switch u.Phase {
	case tuskv1alpha1.MajorUpgradeSucceeded, tuskv1alpha1.MajorUpgradeFailed:
		return false
	}
	return true
}

// Paths and names of the upgrade's additions to the primary's pod.
const (
	oldServerMount     = "/tusk-old"
	oldServerVolume    = "tusk-old"
	oldServerContainer = "old-server"
)

// withUpgrade makes pod the primary's pod of an upgrade attempt: the new
// image, told to upgrade, with an init container that copies the old
// image's server into a volume it shares. Its hash stays the spec's, so the
// rollout keeps it once the upgrade is done (the arguments do nothing then).
func withUpgrade(pod *corev1.Pod, u *tuskv1alpha1.MajorUpgradeStatus) {
	spec := &pod.Spec
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: oldServerVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	spec.InitContainers = append(spec.InitContainers, corev1.Container{
		Name:            oldServerContainer,
		Image:           u.FromImage,
		ImagePullPolicy: spec.Containers[0].ImagePullPolicy,
		Command:         []string{instanceapi.ManagerBinary, "instance", "copy-binaries", "--dest", oldServerMount},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "tusk-bin", MountPath: binMount, ReadOnly: true},
			{Name: oldServerVolume, MountPath: oldServerMount},
		},
		SecurityContext: containerSecurityContext(),
		// It copies about 80 MB of files; page cache is charged to it.
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		},
	})
	ctr := &spec.Containers[0]
	ctr.Image = u.ToImage
	ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: oldServerVolume, MountPath: oldServerMount, ReadOnly: true})
	ctr.Command = append(ctr.Command, "--upgrade-from="+oldServerMount, "--upgrade-mode="+u.Mode, "--upgrade-attempt="+u.Attempt)
	setAnnotation(pod, AnnotationUpgradeAttempt, u.Attempt)
}

// AnnotationUpgradeAttempt marks the primary's pod of an upgrade attempt.
const AnnotationUpgradeAttempt = "tusk.dev/upgrade-attempt"

// reconcileMajorUpgrade starts a major upgrade when spec.image names a
// newer major than the data's, and moves one that runs a phase further. It
// reports whether one runs: then it alone acts on the instances.
func (r *ClusterReconciler) reconcileMajorUpgrade(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) (bool, error) {
	if !upgradeUnderway(c) {
		started, err := r.startMajorUpgrade(ctx, c, v, ic)
		if err != nil || !started {
			return false, err
		}
	}
	u := c.Status.MajorUpgrade
	switch u.Phase {
	case tuskv1alpha1.MajorUpgradeBackingUp:
		// The cluster serves, fails over and heals as usual meanwhile.
		return false, r.backUpBeforeUpgrade(ctx, c)
	case tuskv1alpha1.MajorUpgradeStoppingReplicas:
		return true, r.stopReplicasForUpgrade(ctx, c, v)
	case tuskv1alpha1.MajorUpgradeUpgrading:
		return true, r.upgradePrimary(ctx, c, v)
	case tuskv1alpha1.MajorUpgradeRollingBack:
		return true, r.rollBackUpgrade(ctx, c, v)
	case tuskv1alpha1.MajorUpgradeCloningReplicas:
		return true, r.recloneReplicasAfterUpgrade(ctx, c, v)
	}
	return false, nil
}

// startMajorUpgrade begins an upgrade when spec.image's major is newer
// than the data's and the cluster is settled: a ready primary, no
// switchover. A failed attempt is not started again for the same image,
// unless the cluster's annotation tusk.dev/retry-upgrade names it.
func (r *ClusterReconciler) startMajorUpgrade(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) (bool, error) {
	to, from := imageMajor(c.Spec.Image), c.Status.PostgresMajor
	if to == 0 || from == 0 || to <= from {
		return false, nil
	}
	if u := c.Status.MajorUpgrade; u != nil && u.Phase == tuskv1alpha1.MajorUpgradeFailed && u.ToImage == c.Spec.Image &&
		c.Annotations[tuskv1alpha1.AnnotationRetryUpgrade] != u.Attempt {
		return false, nil
	}
	primary := v.member(c.Status.CurrentPrimary)
	if primary == nil || !primary.ready() || c.Status.TargetPrimary != c.Status.CurrentPrimary || reportedMajor(primary.status) != from {
		return false, nil
	}
	// The checks a serving primary can answer come first: refused, the
	// attempt ends Failed before anything stopped.
	problem, err := onlinePrecheck(ctx, ic, primary)
	if err != nil {
		return false, err
	}
	mode := "link"
	if c.Spec.Upgrade != nil && c.Spec.Upgrade.Mode != "" {
		mode = c.Spec.Upgrade.Mode
	}
	now := metav1.Now()
	attempt := &tuskv1alpha1.MajorUpgradeStatus{
		Attempt:   fmt.Sprintf("%d-%d", to, now.Unix()),
		FromImage: cmp.Or(c.Status.Image, primary.pod.Spec.Containers[0].Image), ToImage: c.Spec.Image, FromMajor: from, ToMajor: to, Mode: mode,
		Phase: upgradeNew, StartedAt: now,
	}
	begin := func(s *tuskv1alpha1.PostgresClusterStatus) { s.MajorUpgrade = attempt }
	if problem != "" {
		// It runs again by the retry annotation or a new image.
		return false, r.setUpgradePhase(ctx, c, tuskv1alpha1.MajorUpgradeFailed,
			"The upgrade was refused before anything stopped: "+problem+"; the cluster runs "+attempt.FromImage+" as before", begin)
	}
	phase, message := tuskv1alpha1.MajorUpgradeStoppingReplicas, "Stopping the replicas; their volumes stay until the upgrade is committed"
	if c.Spec.Backup != nil {
		attempt.Backup = c.Name + "-pre-upgrade-" + attempt.Attempt
		phase, message = tuskv1alpha1.MajorUpgradeBackingUp, "Taking the backup "+attempt.Backup+": after the new server's first write, it is the way back"
	}
	if err := r.recordDecision(ctx, c, func(s *tuskv1alpha1.PostgresClusterStatus) error {
		begin(s)
		return moveUpgrade(c, phase, message, now)
	}); err != nil {
		return false, err
	}
	r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonMajorUpgradeRunning, "Upgrade",
		"Upgrading PostgreSQL %d to %d (%s, pg_upgrade --%s)", from, to, c.Spec.Image, mode)
	return true, nil
}

// onlinePrecheck asks the serving primary for the pre-checks it can
// answer, and returns what would make the upgrade fail ("" for nothing).
// A manager of an earlier version, without the request, is not asked:
// the same checks run again in the upgrade's pod.
func onlinePrecheck(ctx context.Context, ic *instanceClient, primary *member) (string, error) {
	var res instanceapi.UpgradePrecheckResult
	err := ic.call(ctx, primary.pod, http.MethodPost, instanceapi.PathUpgradePrecheck, nil, &res)
	if code, _ := apiErrorCode(err); code == http.StatusNotFound || code == http.StatusMethodNotAllowed {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("while asking %s for the upgrade's pre-checks: %w", primary.name, err)
	}
	return res.Problem, nil
}

// setUpgradePhase records the upgrade's move to phase (moveUpgrade), with
// what else changes in status with it (also), before acting on it; then
// it says so in an Event. A move the upgrade does not make is refused with
// an error, and nothing is written.
func (r *ClusterReconciler) setUpgradePhase(ctx context.Context, c *tuskv1alpha1.PostgresCluster, phase tuskv1alpha1.MajorUpgradePhase, message string,
	also ...func(*tuskv1alpha1.PostgresClusterStatus)) error {
	if err := r.recordDecision(ctx, c, func(s *tuskv1alpha1.PostgresClusterStatus) error {
		for _, change := range also {
			change(s)
		}
		return moveUpgrade(c, phase, message, metav1.Now())
	}); err != nil {
		return err
	}
	eventType, reason := upgradeEvent(phase)
	r.event(c, eventType, reason, "Upgrade", "%s: %s", phase, message)
	return nil
}

// stopReplicasForUpgrade deletes the replicas' pods; their volumes keep
// the old major's data for a rollback.
func (r *ClusterReconciler) stopReplicasForUpgrade(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) error {
	running := 0
	for _, m := range v.members {
		if m.name == c.Status.CurrentPrimary || m.pod == nil {
			continue
		}
		running++
		if m.pod.DeletionTimestamp == nil {
			if err := r.Delete(ctx, m.pod); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("while stopping replica %s for the upgrade: %w", m.name, err)
			}
		}
	}
	if running > 0 {
		return nil
	}
	message := fmt.Sprintf("Upgrading the primary %s's data directory with pg_upgrade", c.Status.CurrentPrimary)
	if c.Spec.Backup == nil {
		return r.setUpgradePhase(ctx, c, tuskv1alpha1.MajorUpgradeUpgrading, message)
	}
	// pg_upgrade makes a new database system: its WAL must not mix with
	// the old one's, whose backups stay restorable where they are.
	u := c.Status.MajorUpgrade
	moved := c.DeepCopy()
	moved.Status.ArchiveSubdirectory = "pg" + u.Attempt
	message += "; WAL and backups of PostgreSQL " + strconv.Itoa(int(u.ToMajor)) + " go to " + archivePath(moved)
	return r.setUpgradePhase(ctx, c, tuskv1alpha1.MajorUpgradeUpgrading, message, func(s *tuskv1alpha1.PostgresClusterStatus) {
		s.MajorUpgrade.PreviousArchiveSubdirectory = s.ArchiveSubdirectory
		s.ArchiveSubdirectory = moved.Status.ArchiveSubdirectory
	})
}

// upgradePrimary replaces the primary's pod with the upgrade attempt's and
// follows it: a failure reported by its manager (rolled back on the
// volume), or an image that does not start, rolls back; the new major
// serving ends the phase.
func (r *ClusterReconciler) upgradePrimary(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) error {
	u := c.Status.MajorUpgrade
	primary := v.member(c.Status.CurrentPrimary)
	if primary == nil {
		return r.setUpgradePhase(ctx, c, tuskv1alpha1.MajorUpgradeRollingBack, "the primary's volume is gone")
	}
	switch {
	case primary.pod == nil:
		return r.createUpgradePod(ctx, c, primary.name)
	case primary.pod.Annotations[AnnotationUpgradeAttempt] != u.Attempt:
		if primary.pod.DeletionTimestamp != nil {
			return nil
		}
		// Deleting the pod stops postgres cleanly, as pg_upgrade needs.
		return client.IgnoreNotFound(r.Delete(ctx, primary.pod))
	}
	st := primary.status
	switch {
	case st != nil && st.Upgrade != nil && st.Upgrade.Attempt == u.Attempt && st.Upgrade.Failed:
		how := "the old data directory is back in place"
		if !st.Upgrade.RolledBack {
			how = "rolling back on the volume failed too; the old image's manager finishes it"
		}
		return r.setUpgradePhase(ctx, c, tuskv1alpha1.MajorUpgradeRollingBack, fmt.Sprintf("The upgrade failed at %s; %s", st.Upgrade.Reason, how))
	case waitingReason(primary.pod) != "" && st == nil:
		// The new image (or the old one, for its server's copy) does not
		// start: nothing ran on the volume.
		return r.setUpgradePhase(ctx, c, tuskv1alpha1.MajorUpgradeRollingBack, "The upgrade's pod does not start: "+waitingReason(primary.pod))
	case primary.ready() && reportedMajor(st) == u.ToMajor:
		return r.setUpgradePhase(ctx, c, tuskv1alpha1.MajorUpgradeCloningReplicas,
			fmt.Sprintf("The primary serves PostgreSQL %d; replacing the replicas' volumes with copies of it", u.ToMajor),
			func(s *tuskv1alpha1.PostgresClusterStatus) { s.PostgresMajor = u.ToMajor })
	}
	return nil
}

// createUpgradePod creates the primary's pod of the upgrade attempt on its
// volume.
func (r *ClusterReconciler) createUpgradePod(ctx context.Context, c *tuskv1alpha1.PostgresCluster, name string) error {
	pod := instancePod(c, name, instanceapi.RolePrimary, r.Config.InstanceManagerImage)
	withUpgrade(pod, c.Status.MajorUpgrade)
	secretsHash, err := r.mountedSecretsHash(ctx, c)
	if err != nil {
		return err
	}
	setAnnotation(pod, AnnotationSecretsHash, secretsHash)
	if err := r.ownAndCreate(ctx, c, pod); err != nil {
		return fmt.Errorf("while creating the upgrade's pod for %s: %w", name, err)
	}
	r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonMajorUpgradeRunning, "Upgrade",
		"Started %s on %s to upgrade its data directory", name, c.Status.MajorUpgrade.ToImage)
	return nil
}

// rollBackUpgrade puts the primary back on the old image (its manager
// finishes a rollback on the volume if one is left) and ends the upgrade
// as failed once it serves the old major again; the replicas then come
// back on their kept volumes.
func (r *ClusterReconciler) rollBackUpgrade(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) error {
	u := c.Status.MajorUpgrade
	primary := v.member(c.Status.CurrentPrimary)
	switch {
	case primary == nil:
		return nil
	case primary.pod == nil:
		return r.createInstance(ctx, c, primary.name, instanceapi.RolePrimary, false, nil)
	case primary.pod.Annotations[AnnotationUpgradeAttempt] == u.Attempt:
		if primary.pod.DeletionTimestamp != nil {
			return nil
		}
		return client.IgnoreNotFound(r.Delete(ctx, primary.pod))
	case committedBeforeRollback(primary.status, u):
		// The attempt's manager committed, then stopped before it said so
		// (a crash): the old image cannot serve the data any more, so the
		// way is forward, on the new image again.
		return r.setUpgradePhase(ctx, c, tuskv1alpha1.MajorUpgradeUpgrading, fmt.Sprintf(
			"The upgrade to PostgreSQL %d was committed before the rollback began (%s); starting the primary on %s again", u.ToMajor, u.Message, u.ToImage),
			func(s *tuskv1alpha1.PostgresClusterStatus) {
				if c.Spec.Backup != nil {
					s.ArchiveSubdirectory = "pg" + u.Attempt
				}
			})
	case primary.ready() && reportedMajor(primary.status) == u.FromMajor:
		return r.setUpgradePhase(ctx, c, tuskv1alpha1.MajorUpgradeFailed, u.Message+"; the cluster runs "+u.FromImage+" again")
	}
	return nil
}

// committedBeforeRollback says the primary, back on the old image, found
// the data directory already upgraded to the attempt's major.
func committedBeforeRollback(st *instanceapi.Status, u *tuskv1alpha1.MajorUpgradeStatus) bool {
	return st != nil && st.Upgrade != nil && st.Upgrade.NewerData != 0 && int32(st.Upgrade.NewerData) == u.ToMajor //nolint:gosec // a major version
}

// recloneReplicasAfterUpgrade removes the replicas' volumes, which hold the
// old major; the usual scale-up then copies the upgraded primary into new
// instances.
func (r *ClusterReconciler) recloneReplicasAfterUpgrade(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view) error {
	left := 0
	for _, m := range v.members {
		if m.name == c.Status.CurrentPrimary {
			continue
		}
		left++
		if m.pvc != nil && m.pvc.DeletionTimestamp != nil {
			continue
		}
		if err := r.removeInstance(ctx, m); err != nil {
			return err
		}
		r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonRemovedInstance, "Upgrade",
			"Removed replica %s and its volume of PostgreSQL %d; a copy of the upgraded primary replaces it", m.name, c.Status.MajorUpgrade.FromMajor)
	}
	if left > 0 {
		return nil
	}
	took := time.Since(c.Status.MajorUpgrade.StartedAt.Time).Round(time.Second)
	return r.setUpgradePhase(ctx, c, tuskv1alpha1.MajorUpgradeSucceeded,
		fmt.Sprintf("Upgraded to PostgreSQL %d in %s; new replicas are copied from the primary", c.Status.MajorUpgrade.ToMajor, took))
}

// backUpBeforeUpgrade takes the PostgresBackup of the upgrade and moves on
// once it completed; a failed one ends the upgrade before anything
// changed. Like a scheduled backup it is labelled with the cluster, not
// owned by it, and the retention never prunes it: it stays in the old
// system's location.
func (r *ClusterReconciler) backUpBeforeUpgrade(ctx context.Context, c *tuskv1alpha1.PostgresCluster) error {
	u := c.Status.MajorUpgrade
	b := &tuskv1alpha1.PostgresBackup{}
	err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: u.Backup}, b)
	if apierrors.IsNotFound(err) {
		b = &tuskv1alpha1.PostgresBackup{
			ObjectMeta: metav1.ObjectMeta{Name: u.Backup, Namespace: c.Namespace, Labels: clusterLabels(c)},
			Spec:       tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: c.Name}},
		}
		if err := r.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("while creating the backup before the upgrade: %w", err)
		}
		r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonMajorUpgradeRunning, "Upgrade", "Created PostgresBackup %s before the upgrade", u.Backup)
		return nil
	}
	if err != nil {
		return err
	}
	switch b.Status.Phase {
	case tuskv1alpha1.BackupPhaseCompleted:
		return r.setUpgradePhase(ctx, c, tuskv1alpha1.MajorUpgradeStoppingReplicas,
			fmt.Sprintf("Backed up to %s (restorable into a PostgreSQL %d cluster); stopping the replicas", u.Backup, u.FromMajor))
	case tuskv1alpha1.BackupPhaseFailed:
		why := "see its conditions"
		if cond := meta.FindStatusCondition(b.Status.Conditions, tuskv1alpha1.ConditionReady); cond != nil {
			why = cond.Message
		}
		return r.setUpgradePhase(ctx, c, tuskv1alpha1.MajorUpgradeFailed,
			fmt.Sprintf("The backup %s before the upgrade failed (%s); nothing was changed", u.Backup, why))
	}
	return nil
}
