package plugin

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

type backupOptions struct {
	*options
	name    string
	target  string
	wait    bool
	timeout time.Duration
	now     func() time.Time
}

func newBackupCommand(o *options) *cobra.Command {
	bo := &backupOptions{options: o, now: time.Now}
	cmd := &cobra.Command{
		Use:   "backup CLUSTER",
		Short: "Take a base backup of a cluster now (creates a PostgresBackup)",
		Long: `Backup creates a PostgresBackup of CLUSTER; the operator takes it on a ready,
streaming replica (or the primary, with --target primary or when no replica
is ready) into the cluster's object store (spec.backup). One backup of a
cluster runs at a time: the operator refuses another while one runs.

Without --name the backup is named CLUSTER-YYYYMMDD-HHMMSS (UTC). With --wait
the plugin follows it until it completes or fails and prints the result.`,
		Example: `  kubectl tusk backup orders
  kubectl tusk backup orders --name before-upgrade --target primary --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return bo.run(cmd.Context(), args[0])
		},
	}
	cmd.Flags().StringVar(&bo.name, "name", "", "the PostgresBackup's name (CLUSTER-YYYYMMDD-HHMMSS when empty)")
	cmd.Flags().StringVar(&bo.target, "target", "", "where to take it: primary or prefer-replica (the cluster's spec.backup.target when empty)")
	cmd.Flags().BoolVar(&bo.wait, "wait", false, "wait until the backup completes or fails, and print the result")
	cmd.Flags().DurationVar(&bo.timeout, "timeout", time.Hour, "how long --wait waits")
	return cmd
}

func (bo *backupOptions) run(ctx context.Context, cluster string) error {
	target, err := parseBackupTarget(bo.target)
	if err != nil {
		return err
	}
	if errs := validation.IsDNS1123Subdomain(bo.name); bo.name != "" && len(errs) > 0 {
		return fmt.Errorf("--name %q cannot name a PostgresBackup: %s", bo.name, strings.Join(errs, "; "))
	}
	cl, ns, err := bo.client()
	if err != nil {
		return err
	}
	c, err := getCluster(ctx, cl, ns, cluster)
	if err != nil {
		return err
	}
	if c.Spec.Backup == nil {
		return fmt.Errorf("PostgresCluster %s has no spec.backup: set spec.backup.objectStore to archive its WAL and take base backups", cluster)
	}
	b := &tuskv1alpha1.PostgresBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cmp.Or(bo.name, backupName(cluster, bo.now()))},
		Spec:       tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: cluster}, Target: target},
	}
	if err := cl.Create(ctx, b); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("PostgresBackup %s already exists in namespace %s: choose another --name", b.Name, ns)
		}
		return fmt.Errorf("while creating PostgresBackup %s: %w", b.Name, err)
	}
	fmt.Fprintf(bo.streams.Out, "Created PostgresBackup %s of %s.\n", b.Name, cluster)
	if !bo.wait {
		fmt.Fprintf(bo.streams.Out, "Not waiting: follow it with kubectl tusk backups %s -n %s\n", cluster, ns)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, bo.timeout)
	defer cancel()
	return waitForBackup(ctx, cl, client.ObjectKeyFromObject(b), cluster, bo.streams.Out)
}

// parseBackupTarget checks --target.
func parseBackupTarget(s string) (tuskv1alpha1.BackupTarget, error) {
	switch t := tuskv1alpha1.BackupTarget(s); t {
	case "", tuskv1alpha1.BackupTargetPrimary, tuskv1alpha1.BackupTargetPreferReplica:
		return t, nil
	}
	return "", fmt.Errorf("unknown --target %q: use %s or %s", s, tuskv1alpha1.BackupTargetPrimary, tuskv1alpha1.BackupTargetPreferReplica)
}

// backupName is the generated name: the cluster's, and the time in UTC
// to the second.
func backupName(cluster string, now time.Time) string {
	return cluster + "-" + now.UTC().Format("20060102-150405")
}

// waitForBackup polls the backup until it ends, printing each change of
// phase and of its Ready condition, then the result. A failed backup is an
// error saying why.
func waitForBackup(ctx context.Context, cl client.Client, key client.ObjectKey, cluster string, w io.Writer) error {
	start := time.Now()
	var last string
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var lastErr error
	for {
		b := &tuskv1alpha1.PostgresBackup{}
		if lastErr = cl.Get(ctx, key, b); lastErr == nil {
			if line := backupProgress(b); line != last {
				last = line
				fmt.Fprintf(w, "[%3.0fs] %s\n", time.Since(start).Seconds(), line)
			}
			switch b.Status.Phase {
			case tuskv1alpha1.BackupPhaseCompleted:
				return renderBackupResult(w, b)
			case tuskv1alpha1.BackupPhaseFailed:
				return fmt.Errorf("backup %s failed: %s", b.Name, b.Status.Error)
			}
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("gave up waiting for backup %s; the operator goes on: follow it with kubectl tusk backups %s -n %s",
				key.Name, cluster, key.Namespace)
			if lastErr != nil {
				return fmt.Errorf("%s (last error: %w)", msg, lastErr)
			}
			return errors.New(msg)
		case <-ticker.C:
		}
	}
}

// backupProgress is one line of where the backup is.
func backupProgress(b *tuskv1alpha1.PostgresBackup) string {
	line := "phase " + orNone(string(b.Status.Phase))
	if cond := meta.FindStatusCondition(b.Status.Conditions, tuskv1alpha1.ConditionReady); cond != nil {
		line += ", " + conditionLine(*cond)
	}
	return line
}

// renderBackupResult describes a completed backup.
func renderBackupResult(w io.Writer, b *tuskv1alpha1.PostgresBackup) error {
	st := b.Status
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Backup %s of %s completed.\n", b.Name, b.Spec.Cluster.Name)
	fmt.Fprintf(tw, "Instance:\t%s\n", orNone(st.Instance))
	fmt.Fprintf(tw, "WAL:\t%s to %s, timeline %d\n", orDash(st.BeginLSN), orDash(st.EndLSN), st.Timeline)
	fmt.Fprintf(tw, "Size:\t%s (compressed)\n", formatBytes(st.SizeBytes))
	fmt.Fprintf(tw, "Took:\t%s\n", backupDuration(st))
	fmt.Fprintf(tw, "Location:\t%s\n", orNone(st.Location))
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, trimLines(buf.String()))
	return err
}

func newBackupsCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:     "backups CLUSTER",
		Aliases: []string{"backup-list"},
		Short:   "List a cluster's PostgresBackups: phase, instance, WAL range, size",
		Example: `  kubectl tusk backups orders -n shop`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, ns, err := o.client()
			if err != nil {
				return err
			}
			var list tuskv1alpha1.PostgresBackupList
			if err := cl.List(cmd.Context(), &list, client.InNamespace(ns)); err != nil {
				return fmt.Errorf("while listing the PostgresBackups of namespace %s: %w", ns, err)
			}
			return renderBackups(o.streams.Out, args[0], list.Items)
		},
	}
}

// renderBackups writes the backups of cluster as a table, oldest first.
// The output depends on the backups only, never on the time.
func renderBackups(w io.Writer, cluster string, all []tuskv1alpha1.PostgresBackup) error {
	var backups []tuskv1alpha1.PostgresBackup
	for _, b := range all {
		if b.Spec.Cluster.Name == cluster {
			backups = append(backups, b)
		}
	}
	if len(backups) == 0 {
		_, err := fmt.Fprintf(w, "No PostgresBackups of %s.\n", cluster)
		return err
	}
	slices.SortFunc(backups, func(a, b tuskv1alpha1.PostgresBackup) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPHASE\tINSTANCE\tSTARTED\tTOOK\tBEGIN LSN\tEND LSN\tTIMELINE\tSIZE\tMESSAGE")
	for _, b := range backups {
		st := b.Status
		started, size, timeline := "-", "-", "-"
		if st.StartedAt != nil {
			started = st.StartedAt.UTC().Format(time.RFC3339)
		}
		if st.Phase == tuskv1alpha1.BackupPhaseCompleted {
			size = formatBytes(st.SizeBytes)
		}
		if st.Timeline > 0 {
			timeline = strconv.Itoa(int(st.Timeline))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.Name, orDash(string(st.Phase)), orDash(st.Instance), started,
			backupDuration(st), orDash(st.BeginLSN), orDash(st.EndLSN), timeline, size, oneLine(backupMessage(b)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, trimLines(buf.String()))
	return err
}

// backupDuration is how long an ended backup took, "-" otherwise.
func backupDuration(st tuskv1alpha1.PostgresBackupStatus) string {
	if st.StartedAt == nil || st.CompletedAt == nil {
		return "-"
	}
	return st.CompletedAt.Sub(st.StartedAt.Time).Round(time.Second).String()
}

// backupMessage is the error of a failed backup, else its Ready
// condition's message while it has not completed.
func backupMessage(b tuskv1alpha1.PostgresBackup) string {
	if b.Status.Error != "" {
		return b.Status.Error
	}
	if b.Status.Phase == tuskv1alpha1.BackupPhaseCompleted {
		return ""
	}
	if cond := meta.FindStatusCondition(b.Status.Conditions, tuskv1alpha1.ConditionReady); cond != nil {
		return cond.Message
	}
	return ""
}
