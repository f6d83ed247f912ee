package pgconf

import "fmt"

// The PostgreSQL major versions Tusk renders configuration for. 13 is the
// oldest with wal_keep_size and primary_conninfo changes on reload; a newer
// major than MaxMajorVersion may know settings differently, so it is an
// error until someone checks its release notes and raises the bound.
const (
	MinMajorVersion = 13
	MaxMajorVersion = 18
)

// versionRange is the span of major versions that know a setting: from
// since (0: before MinMajorVersion) up to, not including, removedIn (0:
// still there).
type versionRange struct {
	since, removedIn int
}

// settingVersions lists the settings whose existence changed within
// MinMajorVersion..MaxMajorVersion (from the release notes), and which a
// user could plausibly carry across a major upgrade. PostgreSQL refuses to
// start when postgresql.conf holds a setting it does not know, so such a
// setting is dropped and reported rather than rendered. Settings not listed
// are passed through and PostgreSQL itself judges them.
var settingVersions = map[string]versionRange{
	"wal_keep_segments":           {removedIn: 13}, // became wal_keep_size
	"wal_keep_size":               {since: 13},
	"operator_precedence_warning": {removedIn: 14},
	"recovery_init_sync_method":   {since: 14},
	"log_recovery_conflict_waits": {since: 14},
	"stats_temp_directory":        {removedIn: 15}, // statistics moved to shared memory
	"archive_library":             {since: 15},
	"recovery_prefetch":           {since: 15},
	"promote_trigger_file":        {removedIn: 16},
	"vacuum_defer_cleanup_age":    {removedIn: 16},
	"force_parallel_mode":         {removedIn: 16}, // became debug_parallel_query
	"debug_parallel_query":        {since: 16},
	"old_snapshot_threshold":      {removedIn: 17},
	"db_user_namespace":           {removedIn: 17},
	"trace_recovery_messages":     {removedIn: 17},
	"allow_alter_system":          {since: 17},
	"summarize_wal":               {since: 17},
}

// unknownIn says why major does not know the setting name, or "" if it
// does (or if Tusk has no record of the setting changing).
func unknownIn(name string, major int) string {
	r, ok := settingVersions[name]
	switch {
	case !ok:
		return ""
	case r.since != 0 && major < r.since:
		return fmt.Sprintf("PostgreSQL %d does not know it: it was added in %d", major, r.since)
	case r.removedIn != 0 && major >= r.removedIn:
		return fmt.Sprintf("PostgreSQL %d does not know it: it was removed in %d", major, r.removedIn)
	default:
		return ""
	}
}

// checkMajorVersion refuses versions Tusk has not been checked against.
func checkMajorVersion(major int) error {
	if major < MinMajorVersion || major > MaxMajorVersion {
		return fmt.Errorf("PostgreSQL %d is not supported: Tusk renders configuration for %d to %d", major, MinMajorVersion, MaxMajorVersion)
	}
	return nil
}
