package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// scheduledBackupTimeFormat ends the name of a scheduled backup: the
// scheduled time, UTC, to the second.
const scheduledBackupTimeFormat = "20060102150405"

// scheduledBackupName is the PostgresBackup the schedule creates for the
// run at t: the same name for the same run, so creating it twice (after a
// status write was lost) finds it there.
func scheduledBackupName(cluster string, t time.Time) string {
	return cluster + "-" + t.UTC().Format(scheduledBackupTimeFormat)
}

// scheduledRun is the run a PostgresBackup of cluster was created for, by
// its name; false when scheduledBackupName made no such name.
func scheduledRun(cluster string, b *tuskv1alpha1.PostgresBackup) (time.Time, bool) {
	stamp, ok := strings.CutPrefix(b.Name, cluster+"-")
	if !ok || b.Spec.Cluster.Name != cluster || len(stamp) != len(scheduledBackupTimeFormat) {
		return time.Time{}, false
	}
	t, err := time.Parse(scheduledBackupTimeFormat, stamp)
	if err != nil || scheduledBackupName(cluster, t) != b.Name {
		return time.Time{}, false
	}
	return t, true
}

// lastScheduledRun is the latest run of c's schedule that was taken, by
// the scheduled PostgresBackups there are and status.backup (which keeps
// it when its backup is deleted); false when neither knows one. A run
// after now is no run the schedule took (a backup named so by hand).
func lastScheduledRun(c *tuskv1alpha1.PostgresCluster, backups []tuskv1alpha1.PostgresBackup, now time.Time) (time.Time, bool) {
	var last time.Time
	if st := c.Status.Backup; st != nil && st.LastScheduleTime != nil && !st.LastScheduleTime.After(now) {
		last = st.LastScheduleTime.UTC()
	}
	for i := range backups {
		if t, ok := scheduledRun(c.Name, &backups[i]); ok && t.After(last) && !t.After(now) {
			last = t
		}
	}
	return last, !last.IsZero()
}

// parseSchedule reads spec.backup.schedule: five cron fields or a
// descriptor such as @daily, in UTC. A schedule that never fires (such as
// 0 0 30 2 *) is an error too.
func parseSchedule(spec string, now time.Time) (cron.Schedule, error) {
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("spec.backup.schedule %q is not a cron schedule: %w", spec, err)
	}
	if s.Next(now.UTC()).IsZero() {
		return nil, fmt.Errorf("spec.backup.schedule %q never fires", spec)
	}
	return s, nil
}

// scheduleRun is what the schedule says at one moment.
type scheduleRun struct {
	// due is the run to take now (zero: none). After a window the
	// operator missed, only the latest missed run: one catch-up backup,
	// not a burst.
	due time.Time
	// next is the run after now.
	next time.Time
}

// lookbacks bound the search for the latest missed run: the smallest
// window holding a run is searched, so an every-minute schedule missed for
// a year costs at most 60 steps, not half a million.
var lookbacks = []time.Duration{time.Hour, 25 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour, (4*365 + 2) * 24 * time.Hour}

// nextRuns says which run is due at now, given the last run taken (or,
// before the first, when the cluster was created: a new cluster waits for
// its first scheduled time), and when the next one is.
func nextRuns(s cron.Schedule, last, now time.Time) scheduleRun {
	last, now = last.UTC(), now.UTC()
	run := scheduleRun{next: s.Next(now)}
	for _, back := range slices.Concat(lookbacks, []time.Duration{now.Sub(last)}) {
		from := now.Add(-back)
		if from.Before(last) {
			from = last
		}
		t := s.Next(from)
		if t.IsZero() || t.After(now) {
			if from.Equal(last) {
				return run
			}
			continue
		}
		for n := s.Next(t); !n.IsZero() && !n.After(now); n = s.Next(n) {
			t = n
		}
		run.due = t
		return run
	}
	return run
}
