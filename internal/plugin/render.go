package plugin

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// renderStatus writes a cluster's status for humans: a header, the
// instances, the conditions, and a line when a switchover is under way.
// The output depends on the cluster only, never on the time.
func renderStatus(w io.Writer, c *tuskv1alpha1.PostgresCluster) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	renderHeader(tw, c)
	fmt.Fprintln(tw)
	renderInstances(tw, c.Status.Instances)
	fmt.Fprintln(tw)
	renderConditions(tw, c.Status.Conditions)
	if st := c.Status; st.TargetPrimary != "" && st.TargetPrimary != st.CurrentPrimary {
		fmt.Fprintf(tw, "\nSwitchover under way: the primary moves from %s to %s.\n", orNone(st.CurrentPrimary), st.TargetPrimary)
	}
	renderMajorUpgrade(tw, c)
	renderImport(tw, c)
	renderServedBy(tw, c)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, trimLines(buf.String()))
	return err
}

// renderMajorUpgrade says what a major upgrade under way does, or why the
// last one failed and how to run it again.
func renderMajorUpgrade(w io.Writer, c *tuskv1alpha1.PostgresCluster) {
	u := c.Status.MajorUpgrade
	if u == nil {
		return
	}
	switch u.Phase {
	case tuskv1alpha1.MajorUpgradeSucceeded:
		if u.Backup != "" {
			fmt.Fprintf(w, "\nUpgraded to PostgreSQL %d. The way back to %d is the backup taken before: kubectl tusk upgrade %s -n %s --restore-pre-upgrade %s-%d\n",
				u.ToMajor, u.FromMajor, c.Name, c.Namespace, c.Name, u.FromMajor)
		}
	case tuskv1alpha1.MajorUpgradeFailed:
		fmt.Fprintf(w, "\nThe upgrade to PostgreSQL %d (%s) failed and was rolled back: %s\n", u.ToMajor, u.ToImage, u.Message)
		if u.ToImage == c.Spec.Image {
			fmt.Fprintf(w, "Fix the cause, then run it again: kubectl tusk upgrade %s -n %s --retry\n", c.Name, c.Namespace)
		}
	default:
		fmt.Fprintf(w, "\nMajor upgrade under way, PostgreSQL %d to %d (%s): %s.\n", u.FromMajor, u.ToMajor, u.Phase, u.Message)
	}
}

// renderImport says where a logical import is, and how to cut over.
func renderImport(w io.Writer, c *tuskv1alpha1.PostgresCluster) {
	imp := c.Status.Import
	if imp == nil {
		return
	}
	fmt.Fprintf(w, "\nLogical import: %s: %s.\n", imp.Phase, imp.Message)
	switch imp.Phase {
	case tuskv1alpha1.ImportReplicating:
		fmt.Fprintf(w, "Cut over when ready: kubectl tusk cutover %s -n %s\n", c.Name, c.Namespace)
	case tuskv1alpha1.ImportCutoverFailed:
		fmt.Fprintf(w, "Fix the cause, then try again: kubectl tusk cutover %s -n %s\n", c.Name, c.Namespace)
	}
}

// renderServedBy says where the cluster's Services send clients once
// another cluster took them over.
func renderServedBy(w io.Writer, c *tuskv1alpha1.PostgresCluster) {
	if by := c.Status.ServedBy; by != "" {
		fmt.Fprintf(w, "\nServices %s-rw, %s-ro and %s-r send clients to %s, whose logical import from this cluster was cut over.\n",
			c.Name, c.Name, c.Name, by)
	}
}

// trimLines drops the padding tabwriter leaves after an empty last column.
func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

func renderHeader(w io.Writer, c *tuskv1alpha1.PostgresCluster) {
	st := c.Status
	fmt.Fprintf(w, "Cluster:\t%s (namespace %s)\n", c.Name, c.Namespace)
	fmt.Fprintf(w, "Phase:\t%s\n", orNone(string(st.Phase)))
	primary := orNone(st.CurrentPrimary)
	if st.TargetPrimary != "" && st.TargetPrimary != st.CurrentPrimary {
		primary += " (switching over to " + st.TargetPrimary + ")"
	}
	fmt.Fprintf(w, "Primary:\t%s\n", primary)
	fmt.Fprintf(w, "Ready:\t%d/%d instances\n", st.ReadyInstances, c.Spec.Instances)
	fmt.Fprintf(w, "Synchronous:\t%s\n", synchronousSummary(c.Spec.PostgreSQL.Synchronous))
}

// synchronousSummary says what a commit waits for.
func synchronousSummary(s tuskv1alpha1.SynchronousSpec) string {
	if s.Mode == tuskv1alpha1.SynchronousOff {
		return "off (asynchronous: commits do not wait for standbys)"
	}
	if s.Mode == "" {
		return "(not set)"
	}
	standbys := "standbys"
	if s.Number == 1 {
		standbys = "standby"
	}
	out := fmt.Sprintf("%s, %d %s", s.Mode, s.Number, standbys)
	if s.WhenTooFewStandbys != "" {
		out += fmt.Sprintf(" (when too few: %s)", s.WhenTooFewStandbys)
	}
	return out
}

func renderInstances(w io.Writer, instances []tuskv1alpha1.InstanceStatus) {
	if len(instances) == 0 {
		fmt.Fprintln(w, "No instances reported yet.")
		return
	}
	fmt.Fprintln(w, "NAME\tROLE\tREADY\tPHASE\tLSN\tLAG\tTIMELINE\tMESSAGE")
	for _, in := range instances {
		lag := "-"
		if in.LagBytes != nil {
			lag = formatBytes(*in.LagBytes)
		}
		timeline := "-"
		if in.Timeline > 0 {
			timeline = strconv.Itoa(int(in.Timeline))
		}
		fmt.Fprintf(w, "%s\t%s\t%t\t%s\t%s\t%s\t%s\t%s\n", in.Name, orDash(string(in.Role)), in.Ready,
			orDash(in.Phase), orDash(in.LSN), lag, timeline, oneLine(in.Message))
	}
}

func renderConditions(w io.Writer, conditions []metav1.Condition) {
	if len(conditions) == 0 {
		fmt.Fprintln(w, "No conditions reported yet.")
		return
	}
	fmt.Fprintln(w, "CONDITION\tSTATUS\tREASON\tMESSAGE")
	for _, cond := range conditions {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", cond.Type, cond.Status, orDash(cond.Reason), oneLine(cond.Message))
	}
}

// formatBytes writes a byte count in binary units: 0 B, 512 B, 1.5 KiB,
// 16 MiB.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	for _, suffix := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		v /= unit
		// Below 1023.95 the one-decimal form stays below 1024.
		if math.Abs(v) < unit-0.05 || suffix == "PiB" {
			s := strconv.FormatFloat(v, 'f', 1, 64)
			return strings.TrimSuffix(s, ".0") + " " + suffix
		}
	}
	return "" // not reached
}

// oneLine keeps a table row on one line: messages from PostgreSQL may span
// several.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
