package basebackup

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"tusk.dev/tusk/internal/postgres"
)

// Target is where recovery stops: at most one of its fields is set; none
// is the end of the archive.
type Target struct {
	Time *time.Time
	LSN  *postgres.LSN
	// Name is a restore point made with pg_create_restore_point.
	Name string
}

// IsSet says whether recovery stops before the end of the archive.
func (t Target) IsSet() bool { return t.Time != nil || t.LSN != nil || t.Name != "" }

// validate checks the target is one the backup can reach: a time or LSN
// before the backup's end cannot be, since the restored copy is only
// consistent from there.
func (t Target) validate(rec *Record) error {
	if err := t.Check(); err != nil {
		return err
	}
	if t.Time != nil && t.Time.Before(rec.EndTime) {
		return fmt.Errorf("recovery target time %s is before backup %q ended (%s): a backup can only be recovered to a later time; "+
			"use an earlier backup", t.Time.UTC().Format(time.RFC3339Nano), rec.Name, rec.EndTime.Format(time.RFC3339Nano))
	}
	if t.LSN != nil && *t.LSN < rec.EndLSN {
		return fmt.Errorf("recovery target LSN %s is before backup %q ended (LSN %s): a backup can only be recovered to a later LSN; "+
			"use an earlier backup", t.LSN, rec.Name, rec.EndLSN)
	}
	return nil
}

// Check makes the checks of the target that need no backup: at most one
// kind of target, and a restore point name PostgreSQL can have made.
func (t Target) Check() error {
	n := 0
	for _, set := range []bool{t.Time != nil, t.LSN != nil, t.Name != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return errors.New("give at most one recovery target: a time, an LSN or a restore point name")
	}
	if strings.ContainsAny(t.Name, "\n\x00") || len(t.Name) >= 64 {
		return fmt.Errorf("restore point name %q is not one PostgreSQL can have made (at most 63 bytes on one line)", t.Name)
	}
	return nil
}

// RecoverySettings are the lines appended to postgresql.auto.conf of a
// restored data directory: WAL from the archive through restoreCommand,
// recovery up to the target and, when there is one, promotion there.
// Without a target, PostgreSQL replays the whole archive and promotes at
// its end. Either way the promoted server starts a new timeline.
func RecoverySettings(backup, restoreCommand string, t Target) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n# Recovery of backup %s, added by tusk instance restore.\n", backup)
	setting(&b, "restore_command", restoreCommand)
	setting(&b, "recovery_target_timeline", "latest")
	switch {
	case t.Time != nil:
		setting(&b, "recovery_target_time", t.Time.UTC().Format("2006-01-02 15:04:05.999999")+"+00")
	case t.LSN != nil:
		setting(&b, "recovery_target_lsn", t.LSN.String())
	case t.Name != "":
		setting(&b, "recovery_target_name", t.Name)
	}
	if t.IsSet() {
		setting(&b, "recovery_target_action", "promote")
	}
	return b.String()
}

// setting writes one line of a PostgreSQL configuration file, its value
// quoted: backslashes and quotes are escaped in such strings.
func setting(b *strings.Builder, name, value string) {
	value = strings.ReplaceAll(value, `\`, `\\`)
	value = strings.ReplaceAll(value, `'`, `''`)
	fmt.Fprintf(b, "%s = '%s'\n", name, value)
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@+=:,./-]+$`)

// ShellQuote quotes s for sh, as PostgreSQL runs restore_command.
func ShellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// RestoreCommand is the restore_command that runs `tusk instance
// wal-restore` with the given binary and archive configuration. A '%' in
// them is doubled, as PostgreSQL reads %f, %p and %r there.
func RestoreCommand(tuskBinary, config string) string {
	q := func(s string) string { return strings.ReplaceAll(ShellQuote(s), "%", "%%") }
	return q(tuskBinary) + " instance wal-restore --config " + q(config) + " %f %p"
}
