package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

func sourceStore(path string) tuskv1alpha1.ObjectStoreSpec {
	return tuskv1alpha1.ObjectStoreSpec{Endpoint: "https://s3.example.com", Bucket: "backups", Path: path,
		CredentialsSecret: tuskv1alpha1.S3CredentialsSecret{Name: "src-creds"}}
}

func recoveryCluster(spec tuskv1alpha1.RecoverySpec) *tuskv1alpha1.PostgresCluster {
	c := defaultCluster()
	c.Name = "restored"
	c.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{Recovery: &spec}
	return c
}

func completedBackup(store *tuskv1alpha1.ObjectStoreSpec) *tuskv1alpha1.PostgresBackup {
	return &tuskv1alpha1.PostgresBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly"},
		Spec:       tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: "orders"}},
		Status:     tuskv1alpha1.PostgresBackupStatus{Phase: tuskv1alpha1.BackupPhaseCompleted, ObjectStore: store},
	}
}

func TestResolveRecovery(t *testing.T) {
	byBackup := tuskv1alpha1.RecoverySpec{Backup: &corev1.LocalObjectReference{Name: "nightly"}}
	bySource := tuskv1alpha1.RecoverySpec{Source: ptr.To(sourceStore("db/orders"))}
	otherNamespace := tuskv1alpha1.RecoverySpec{Source: ptr.To(sourceStore("prod/orders"))}
	withBackup := func(store tuskv1alpha1.ObjectStoreSpec) func(*tuskv1alpha1.PostgresCluster) {
		return func(c *tuskv1alpha1.PostgresCluster) { c.Spec.Backup = &tuskv1alpha1.BackupSpec{ObjectStore: store} }
	}
	phase := func(p tuskv1alpha1.BackupPhase) *tuskv1alpha1.PostgresBackup {
		b := completedBackup(ptr.To(sourceStore("")))
		b.Status.Phase, b.Status.Error = p, "pg_basebackup failed"
		return b
	}
	for _, tc := range []struct {
		name   string
		spec   tuskv1alpha1.RecoverySpec
		change func(*tuskv1alpha1.PostgresCluster)
		backup *tuskv1alpha1.PostgresBackup
		// anyPath is the operator's --object-store-paths=any.
		anyPath bool
		// want is "store path, backup" when resolved, "wait: ..." or
		// "error <reason>: ...".
		want string
	}{
		{"a completed backup recorded without a path (before paths were recorded): its cluster's name", byBackup, nil,
			completedBackup(ptr.To(sourceStore(""))), false, "orders, nightly"},
		{"a completed backup with a path", byBackup, nil, completedBackup(ptr.To(sourceStore("prod/orders"))), false, "prod/orders, nightly"},
		{"a missing backup", byBackup, nil, nil, false, "wait: Waiting for the PostgresBackup nightly named by spec.bootstrap.recovery.backup: it does not exist"},
		{"a running backup", byBackup, nil, phase(tuskv1alpha1.BackupPhaseRunning), false, `wait: Waiting for the PostgresBackup nightly named by spec.bootstrap.recovery.backup to complete (phase "Running")`},
		{"a new backup", byBackup, nil, phase(""), false, `wait: Waiting for the PostgresBackup nightly named by spec.bootstrap.recovery.backup to complete (phase "")`},
		{"a failed backup", byBackup, nil, phase(tuskv1alpha1.BackupPhaseFailed), false,
			"error RecoverySourceInvalid: the PostgresBackup nightly named by spec.bootstrap.recovery.backup failed (pg_basebackup failed): recover from another backup"},
		{"a backup without a location", byBackup, nil, completedBackup(nil), false, "error RecoverySourceInvalid: the PostgresBackup nightly named by spec.bootstrap.recovery.backup records no object store"},
		{"a source location: the latest backup", bySource, nil, nil, false, "db/orders, latest"},
		// Shared bucket credentials must not read another namespace's.
		{"a source outside the namespace", otherNamespace, nil, nil, false,
			`error RecoverySourceInvalid: spec.bootstrap.recovery.source.path "prod/orders" is outside the namespace`},
		{"a source outside the namespace, any path allowed", otherNamespace, nil, nil, true, "prod/orders, latest"},
		{"a source without a path", tuskv1alpha1.RecoverySpec{Source: ptr.To(sourceStore(""))}, nil, nil, false,
			"error RecoverySourceInvalid: spec.bootstrap.recovery.source.path is required"},
		{"archiving into the source", bySource, withBackup(sourceStore("db/orders/")), nil, false,
			"error RecoverySourceInvalid: refusing to recover from https://s3.example.com/backups/db/orders: it is this cluster's own spec.backup location"},
		{"archiving into the backup's location by default paths", byBackup, func(c *tuskv1alpha1.PostgresCluster) {
			c.Name = "orders"
			withBackup(sourceStore(""))(c)
		}, completedBackup(ptr.To(sourceStore("db/orders"))), false, "error RecoverySourceInvalid: refusing to recover from https://s3.example.com/backups/db/orders"},
		{"archiving elsewhere in the same bucket", bySource, withBackup(sourceStore("")), nil, false, "db/orders, latest"},
		{"archiving to another endpoint", bySource, withBackup(func() tuskv1alpha1.ObjectStoreSpec {
			s := sourceStore("db/orders")
			s.Endpoint = "https://s3.other.example.com"
			return s
		}()), nil, false, "db/orders, latest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := recoveryCluster(tc.spec)
			if tc.change != nil {
				tc.change(c)
			}
			src, wait, err := resolveRecovery(c, tc.backup, tc.anyPath)
			got := resolution(err, wait, func() string { return src.store.Path + ", " + src.backup })
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("resolveRecovery = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRecoveryPodMountsTheSourceKeys: the flags of the first instance name
// files of the source's Secrets, mounted apart from the cluster's own
// backup Secrets, and the target; the pod keeps the cluster's spec hash.
func TestRecoveryPodMountsTheSourceKeys(t *testing.T) {
	c := backupCluster()
	store := sourceStore("prod/orders")
	store.CredentialsSecret.AccessKeyIDKey = "id"
	store.CASecret = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "src-ca"}, Key: "ca.pem"}
	at := metav1.NewTime(time.Date(2026, 11, 23, 10, 15, 0, 0, time.UTC))
	src := &recoverySource{store: store, backup: "nightly", target: &tuskv1alpha1.RecoveryTarget{Time: &at}}
	pod := instancePod(c, instanceName(c.Name, 1), instanceapi.RolePrimary, testManagerImage)
	plain := pod.DeepCopy()
	withRecovery(pod, src)
	args := pod.Spec.Containers[0].Command
	checkSecretFileFlags(t, pod, map[string]secretFile{
		"--recovery-source-access-key-id-file":     {"recovery-source-credentials", "src-creds", "id"},
		"--recovery-source-secret-access-key-file": {"recovery-source-credentials", "src-creds", "SECRET_ACCESS_KEY"},
		"--recovery-source-ca-file":                {"recovery-source-ca", "src-ca", "ca.pem"},
	})
	for flag, value := range map[string]string{
		"--recovery-source-endpoint": "https://s3.example.com", "--recovery-source-bucket": "backups",
		"--recovery-source-path": "prod/orders", "--recovery-backup": "nightly",
		"--recovery-target-time": "2026-11-23T10:15:00Z",
		// The cluster's own archive is unchanged.
		"--wal-archive-path": "db/archived", "--wal-archive-access-key-id-file": backupCredentialsMount + "/" + fileAccessKeyID,
	} {
		if got := flagValue(args, flag); got != value {
			t.Errorf("%s=%q, want %q", flag, got, value)
		}
	}
	if pod.Annotations[AnnotationHash] != plain.Annotations[AnnotationHash] || pod.Annotations[AnnotationHash] != podSpecHash(c, testManagerImage) {
		t.Error("the recovering pod's spec hash is not the cluster's: it would be rolled once recovered")
	}
	for _, tc := range []struct {
		target tuskv1alpha1.RecoveryTarget
		want   string
	}{
		{tuskv1alpha1.RecoveryTarget{LSN: "0/3000060"}, "--recovery-target-lsn=0/3000060"},
		{tuskv1alpha1.RecoveryTarget{Name: "before-upgrade"}, "--recovery-target-name=before-upgrade"},
	} {
		src.target = &tc.target
		if args := recoveryArgs(src); !slices.Contains(args, tc.want) {
			t.Errorf("recoveryArgs(%+v) = %v, want %s", tc.target, args, tc.want)
		}
	}
	src.target = nil
	for _, a := range recoveryArgs(src) {
		if strings.HasPrefix(a, "--recovery-target") {
			t.Errorf("recoveryArgs without a target has %s", a)
		}
	}
}

func TestRecoveringCondition(t *testing.T) {
	c := recoveryCluster(tuskv1alpha1.RecoverySpec{Backup: &corev1.LocalObjectReference{Name: "nightly"}})
	c.Status.CurrentPrimary = "restored-1"
	report := func(phase instanceapi.Phase, rec *instanceapi.RecoveryStatus, lastError string) *view {
		return &view{members: []*member{{name: "restored-1", status: &instanceapi.Status{Phase: phase, Recovery: rec, LastError: lastError}}}}
	}
	for _, tc := range []struct {
		name string
		v    *view
		want string // the message; empty: not recovering
	}{
		{"replaying", report(instanceapi.PhaseRecovering, &instanceapi.RecoveryStatus{Backup: "nightly", Step: "replaying the WAL archive up to the target"}, ""),
			"Recovering the primary restored-1 from the backup nightly: replaying the WAL archive up to the target"},
		{"failing", report(instanceapi.PhaseRecovering, &instanceapi.RecoveryStatus{Step: "waiting 4s before trying again", FailedAttempts: 2}, "recovery failed (attempt 2): bucket does not exist"),
			"Recovering the primary restored-1: waiting 4s before trying again; 2 failed attempts, the last: recovery failed (attempt 2): bucket does not exist"},
		{"recovered", report(instanceapi.PhaseStarting, nil, ""), ""},
		{"no report", &view{members: []*member{{name: "restored-1"}}}, ""},
	} {
		cond, ok := recoveringCondition(c, tc.v)
		switch {
		case tc.want == "" && ok:
			t.Errorf("%s: recovering %+v, want not", tc.name, cond)
		case tc.want != "" && (!ok || cond.Reason != tuskv1alpha1.ReasonRecovering || cond.Status != metav1.ConditionTrue || cond.Message != tc.want):
			t.Errorf("%s: %+v, want Progressing True, Recovering, %q", tc.name, cond, tc.want)
		}
	}
}

func TestRecoveryPendingOnlyWhileCreating(t *testing.T) {
	c := recoveryCluster(tuskv1alpha1.RecoverySpec{Backup: &corev1.LocalObjectReference{Name: "nightly"}})
	for _, tc := range []struct {
		phase  tuskv1alpha1.ClusterPhase
		reason string
		want   bool
	}{
		{"", "", true},
		{tuskv1alpha1.ClusterPhasePending, tuskv1alpha1.ReasonWaitingForBackup, true},
		{tuskv1alpha1.ClusterPhaseCreating, tuskv1alpha1.ReasonRecovering, true},
		// A spec error while waiting or recovering must not end the
		// recovery: the next pass would initdb the first instance.
		{tuskv1alpha1.ClusterPhaseFailed, tuskv1alpha1.ReasonWaitingForBackup, true},
		{tuskv1alpha1.ClusterPhaseFailed, tuskv1alpha1.ReasonRecovering, true},
		{tuskv1alpha1.ClusterPhaseHealthy, tuskv1alpha1.ReasonUpToDate, false},
		{tuskv1alpha1.ClusterPhaseFailed, tuskv1alpha1.ReasonUpToDate, false},
	} {
		c.Status.Phase = tc.phase
		c.Status.Conditions = nil
		if tc.reason != "" {
			setCondition(c, metav1.Condition{Type: tuskv1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: tc.reason, Message: "x"})
		}
		if got := recoveryPending(c); got != tc.want {
			t.Errorf("phase %q, Progressing %q: recoveryPending = %v, want %v", tc.phase, tc.reason, got, tc.want)
		}
	}
}

func archiving(c *tuskv1alpha1.PostgresCluster, path string) *tuskv1alpha1.PostgresCluster {
	c = c.DeepCopy()
	c.Spec.Backup = &tuskv1alpha1.BackupSpec{ObjectStore: sourceStore(path)}
	return c
}

func TestResolveClone(t *testing.T) {
	c := defaultCluster()
	c.Name = "copy"
	c.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{Clone: &tuskv1alpha1.CloneSpec{Cluster: "orders"}}
	source := defaultCluster()
	source.Name = "orders"
	ready := source.DeepCopy()
	setCondition(ready, metav1.Condition{Type: tuskv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: tuskv1alpha1.ReasonClusterReady})
	notReady := source.DeepCopy()
	setCondition(notReady, metav1.Condition{Type: tuskv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: tuskv1alpha1.ReasonCreating})
	for _, tc := range []struct {
		name   string
		self   bool
		source *tuskv1alpha1.PostgresCluster
		want   string
	}{
		{"a ready source", false, ready, "clone orders"},
		{"a missing source", false, nil, "wait: Waiting for the PostgresCluster orders named by spec.bootstrap.clone.cluster: it does not exist"},
		{"a source not ready", false, notReady, "wait: Waiting for the PostgresCluster orders named by spec.bootstrap.clone.cluster to be Ready"},
		{"a source without conditions", false, source, "wait: Waiting for the PostgresCluster orders named by spec.bootstrap.clone.cluster to be Ready"},
		{"itself", true, ready, "error CloneSourceInvalid: spec.bootstrap.clone.cluster names this cluster itself"},
		{"archiving where the source does", false, archiving(ready, "shared"), "error CloneSourceInvalid: refusing to clone orders: this cluster's spec.backup location is the one orders archives to"},
		{"archiving elsewhere", false, archiving(ready, "orders-only"), "clone orders"},
	} {
		cc := c.DeepCopy()
		if tc.source != nil && tc.source.Spec.Backup != nil {
			cc.Spec.Backup = &tuskv1alpha1.BackupSpec{ObjectStore: sourceStore("shared")}
		}
		if tc.self {
			cc.Name = "orders"
		}
		src, wait, err := resolveClone(cc, tc.source)
		got := resolution(err, wait, func() string { return "clone " + src.clone.Name })
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: resolveClone = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestClonePodMountsTheSourceCertificate: the first instance of a clone
// copies <source>-rw with the source's replication client certificate and
// CA, mounted read-only, and keeps the cluster's spec hash.
func TestClonePodMountsTheSourceCertificate(t *testing.T) {
	c := defaultCluster()
	source := defaultCluster()
	source.Name = "orders"
	pod := instancePod(c, instanceName(c.Name, 1), instanceapi.RolePrimary, testManagerImage)
	withRecovery(pod, &recoverySource{clone: source})
	args := pod.Spec.Containers[0].Command
	for flag, want := range map[string]string{"--clone-host": "orders-rw", "--clone-port": "5432", "--clone-tls-dir": cloneTLSMount} {
		if got := flagValue(args, flag); got != want {
			t.Errorf("%s=%q, want %q", flag, got, want)
		}
	}
	vol, mount := volumeNamed(pod, "clone-source-tls"), mountNamed(pod.Spec.Containers[0], "clone-source-tls")
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != "orders-replication" || len(vol.Secret.Items) != 3 ||
		mount == nil || !mount.ReadOnly || mount.MountPath != cloneTLSMount {
		t.Errorf("volume %+v, mount %+v: want orders-replication's tls.crt, tls.key, ca.crt read-only at %s", vol, mount, cloneTLSMount)
	}
	if pod.Annotations[AnnotationHash] != podSpecHash(c, testManagerImage) {
		t.Error("the cloning pod's spec hash is not the cluster's")
	}
}

// resolution describes what a resolve function decided, for comparison:
// a spec error with its reason, a wait, or (resolved) what it found.
func resolution(err error, wait string, resolved func() string) string {
	switch se, ok := asSpecError(err); {
	case ok:
		return "error " + se.reason + ": " + se.message
	case err != nil:
		return "unexpected error: " + err.Error()
	case wait != "":
		return "wait: " + wait
	default:
		return resolved()
	}
}
