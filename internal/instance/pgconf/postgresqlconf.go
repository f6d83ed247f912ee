package pgconf

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ServerConfig is everything postgresql.conf is rendered from. The
// Tusk-owned fields are computed by the instance manager from the cluster
// and the instance's role; UserParameters are spec.postgresql.parameters.
type ServerConfig struct {
	// MajorVersion is the PostgreSQL major version of the server binaries
	// (13 to 18); settings that version does not know are never rendered.
	MajorVersion int
	// Port is the TCP port (and the Unix socket's name suffix).
	Port int
	// ListenAddresses is listen_addresses, such as "*".
	ListenAddresses string
	// SocketDir is the only unix_socket_directories entry; the instance
	// manager connects there.
	SocketDir string
	// ClusterName is cluster_name, shown in process titles (the instance name).
	ClusterName string

	// UserParameters are the user's settings. Reserved names are dropped
	// and reported in Conf.Ignored; see ReservedParameters.
	UserParameters map[string]string

	// PrimaryConnInfo and PrimarySlotName make the server stream from a
	// primary (see PrimaryConnInfo); both are empty on a primary. A slot
	// without a connection string is an error.
	PrimaryConnInfo string
	PrimarySlotName string
	// SynchronousStandbyNames is synchronous_standby_names (see
	// SynchronousStandbyNames); empty for asynchronous replication.
	SynchronousStandbyNames string
	// ArchiveCommand turns archive_mode on when set, off when empty.
	ArchiveCommand string
	// ArchiveTimeout is archive_timeout, such as "60s": the longest a
	// finished transaction waits before its WAL segment is switched and
	// archived. "0" (off) when empty.
	ArchiveTimeout string
	// RestoreCommand is restore_command, for replicas that fall back to the
	// WAL archive and for recovery from a backup.
	RestoreCommand string
	// TLS turns ssl on with these files; nil leaves ssl off.
	TLS *TLSFiles
	// JSONLog makes the logging collector write jsonlog into these files
	// (PostgreSQL 15 and later); nil leaves the log on postgres's stderr.
	JSONLog *JSONLogFiles
	// Logging is what spec.postgresql.logging asks PostgreSQL to log
	// besides errors; nil leaves PostgreSQL's (or the user's) settings.
	Logging *Logging
}

// JSONLogFiles name where the logging collector writes: log_directory and
// log_filename (the jsonlog file is the same name ending in .json).
type JSONLogFiles struct {
	Directory string
	FileName  string
}

// Logging is what PostgreSQL logs besides errors; nil fields leave the
// setting as PostgreSQL (or the user's parameters) has it.
type Logging struct {
	// SlowStatementThreshold is log_min_duration_statement: statements
	// that run this long or longer are logged with their duration (0:
	// every statement).
	SlowStatementThreshold *time.Duration
	// LockWaits is log_lock_waits: a session that waited longer than
	// LockWaitThreshold for a lock is logged, with who holds it. A
	// replica's startup process waiting as long on a recovery conflict
	// is logged too (log_recovery_conflict_waits, PostgreSQL 14 and later).
	LockWaits *bool
	// LockWaitThreshold is deadlock_timeout: how long a lock wait lasts
	// before it is logged and checked for a deadlock.
	LockWaitThreshold *time.Duration
}

// TLSFiles are the server's TLS files, as paths PostgreSQL can read.
type TLSFiles struct {
	CertFile string
	KeyFile  string
	// CAFile verifies client certificates (needed for cert authentication);
	// optional otherwise.
	CAFile string
}

// Conf is a rendered postgresql.conf.
type Conf struct {
	// Text is the file's content.
	Text string
	// Ignored are the user parameters left out of Text, sorted by name,
	// for the caller to log and report in status: none of them is an error
	// that should stop the server from starting.
	Ignored []IgnoredParameter
}

// IgnoredParameter is a user parameter that was not rendered, and why.
type IgnoredParameter struct {
	Name   string
	Reason string
}

// Defaults Tusk sets unless the user sets them: what streaming replication,
// pg_rewind and SCRAM authentication need, and room for a few replicas and
// backup streams. Users may raise them.
//
// wal_level = logical: publications (PostgresPublication) work without a
// restart; it costs a little more WAL than replica (the old key of updated
// rows with a replica identity, and the xids of subtransactions).
//
// max_wal_senders and max_replication_slots = 32: a cluster has up to 15
// replicas, each with a WAL sender, pg_basebackup takes two more with a
// temporary slot, and every subscriber of a publication holds a WAL sender
// and a logical slot, one more of each per table being copied while it
// syncs (max_sync_workers_per_subscription, 2). Each costs a few hundred
// bytes of shared memory. A replica needs at least its primary's
// max_wal_senders, which the same default gives it.
//
// wal_keep_size keeps a little WAL for replicas without replication slots:
// without it a checkpoint (another replica's pg_basebackup asks for one) can
// recycle the segment a starting pg_basebackup is about to stream, before
// its temporary slot exists ("requested WAL segment ... has already been
// removed"), and a replica that briefly disconnects must be copied again.
//
// recovery_init_sync_method = syncfs (14 and later, Linux): before crash
// recovery PostgreSQL makes sure the data directory is on disk; fsync of
// every file took more than a second of a restart after a crash, one
// syncfs of the file system takes a few milliseconds.
//
// wal_retrieve_retry_interval = 1s: a replica whose primary restarted
// (a crash restarted in place) retries streaming after this; PostgreSQL's
// 5 s was most of the write gap of a synchronous cluster, whose commits
// wait for a standby to stream again.
var tuskDefaults = map[string]string{ //nolint:gosec // G101: password_encryption is a setting name, not a credential
	"wal_level":                   "logical",
	"recovery_init_sync_method":   "syncfs",
	"wal_retrieve_retry_interval": "1s",
	"wal_keep_size":               "128MB",
	"max_wal_senders":             "32",
	"max_replication_slots":       "32",
	"wal_log_hints":               "on",
	"password_encryption":         "scram-sha-256",
}

// allowedWALLevels: minimal would break replicas and backups.
var allowedWALLevels = []string{"replica", "logical"}

// slotName is what PostgreSQL accepts as a replication slot name, with
// maxIdentifierLength.
var slotName = regexp.MustCompile(`^[a-z0-9_]+$`)

// maxIdentifierLength is PostgreSQL's NAMEDATALEN-1. Patterns check it
// with len, not with a {1,63} repetition: that compiles to a program of
// hundreds of instructions, paid by every run of the binary (every
// archive_command) at start-up.
const maxIdentifierLength = 63

// setting is one name = value line.
type setting struct {
	name, value string
}

// PostgresqlConf renders the postgresql.conf the instance manager writes
// into PGDATA. Defaults and user parameters come first, Tusk's own
// settings last: PostgreSQL takes the last occurrence of a setting, so
// Tusk's win even if a reserved name slipped past the filter. Settings
// made with ALTER SYSTEM (postgresql.auto.conf, read after this file)
// still override it; that is PostgreSQL's design, not something a
// rendered file can prevent.
//
// It returns an error, and no text, for input that cannot be rendered
// safely: an unsupported major version, a malformed name, or a value with
// a line break. User parameters that are merely unwelcome (reserved, or
// unknown to this major version) are dropped and listed in Conf.Ignored.
func PostgresqlConf(in ServerConfig) (Conf, error) {
	if err := in.validate(); err != nil {
		return Conf{}, fmt.Errorf("while rendering postgresql.conf: %w", err)
	}
	user, ignored, err := userSettings(in.UserParameters, in.MajorVersion)
	if err != nil {
		return Conf{}, fmt.Errorf("while rendering postgresql.conf: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# postgresql.conf for PostgreSQL %d.\n", in.MajorVersion)
	b.WriteString("# This file is managed by Tusk and will be overwritten: do not edit it.\n")
	b.WriteString("# Set parameters in the PostgresCluster's spec.postgresql.parameters.\n")
	b.WriteString("# PostgreSQL takes the last occurrence of a setting: Tusk's own come last.\n")
	if err := writeSection(&b, "Defaults and user parameters", user); err != nil {
		return Conf{}, fmt.Errorf("while rendering postgresql.conf: %w", err)
	}
	if logging := loggingSettings(in.Logging, in.MajorVersion); len(logging) > 0 {
		if err := writeSection(&b, "spec.postgresql.logging", logging); err != nil {
			return Conf{}, fmt.Errorf("while rendering postgresql.conf: %w", err)
		}
	}
	if err := writeSection(&b, "Managed by Tusk", ownedSettings(in)); err != nil {
		return Conf{}, fmt.Errorf("while rendering postgresql.conf: %w", err)
	}
	writeIgnored(&b, ignored)
	return Conf{Text: b.String(), Ignored: ignored}, nil
}

// writeSection writes a comment and the settings, sorted by name.
func writeSection(b *strings.Builder, title string, settings []setting) error {
	slices.SortFunc(settings, func(x, y setting) int { return strings.Compare(x.name, y.name) })
	fmt.Fprintf(b, "\n# %s\n", title)
	for _, s := range settings {
		quoted, err := quoteValue(s.name, s.value)
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "%s = %s\n", s.name, quoted)
	}
	return nil
}

// writeIgnored lists the parameters left out, so someone reading the file
// in the pod sees why a setting they asked for is missing. Names are
// valid setting names (checked before), so they cannot break the comment.
func writeIgnored(b *strings.Builder, ignored []IgnoredParameter) {
	if len(ignored) == 0 {
		return
	}
	b.WriteString("\n# User parameters left out\n")
	for _, p := range ignored {
		fmt.Fprintf(b, "# %s: %s\n", p.Name, p.Reason)
	}
}

// validate checks the Tusk-owned fields; they come from the instance
// manager, so a problem here is a bug to report, not a user mistake.
func (in ServerConfig) validate() error {
	if err := checkMajorVersion(in.MajorVersion); err != nil {
		return err
	}
	var errs []error
	if in.Port < 1 || in.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d is not a TCP port", in.Port))
	}
	if in.ListenAddresses == "" {
		errs = append(errs, errors.New("listen_addresses is empty: replicas and Services could not connect"))
	}
	if in.SocketDir == "" {
		errs = append(errs, errors.New("the Unix socket directory is empty: the instance manager connects there"))
	}
	if in.PrimarySlotName != "" && (len(in.PrimarySlotName) > maxIdentifierLength || !slotName.MatchString(in.PrimarySlotName)) {
		errs = append(errs, fmt.Errorf("primary_slot_name %q is not a replication slot name (a-z, 0-9, _; at most 63)", in.PrimarySlotName))
	}
	if in.PrimarySlotName != "" && in.PrimaryConnInfo == "" {
		errs = append(errs, errors.New("primary_slot_name is set without primary_conninfo: a slot needs a primary to stream from"))
	}
	if in.TLS != nil && (in.TLS.CertFile == "" || in.TLS.KeyFile == "") {
		errs = append(errs, errors.New("TLS needs both a certificate and a key file"))
	}
	if j := in.JSONLog; j != nil && (in.MajorVersion < jsonlogSince || j.Directory == "" || j.FileName == "") {
		errs = append(errs, fmt.Errorf("jsonlog needs PostgreSQL %d or later, a log directory and a file name", jsonlogSince))
	}
	errs = append(errs, in.Logging.validate())
	return errors.Join(errs...)
}

// userSettings merges Tusk's defaults with the user's parameters (the
// user's win) and drops what must not be rendered, saying why.
func userSettings(params map[string]string, major int) ([]setting, []IgnoredParameter, error) {
	merged := maps.Clone(tuskDefaults)
	var ignored []IgnoredParameter
	for _, name := range slices.Sorted(maps.Keys(params)) {
		value := params[name]
		if err := checkName(name); err != nil {
			return nil, nil, err
		}
		if reason := ignoreReason(name, value, major); reason != "" {
			ignored = append(ignored, IgnoredParameter{Name: name, Reason: reason})
			continue
		}
		merged[name] = value
	}
	var out []setting
	for name, value := range merged {
		if unknownIn(name, major) == "" {
			out = append(out, setting{name, value})
		}
	}
	return out, ignored, nil
}

// ignoreReason says why a user parameter is left out, or "" to keep it.
func ignoreReason(name, value string, major int) string {
	switch {
	case IsReserved(name):
		return "managed by Tusk: it keeps Services, replication, failover, archiving, TLS or logging working"
	case slices.Contains(includeDirectives, name):
		return "an include directive, not a setting: it would make PostgreSQL read another file"
	case name == "wal_level" && !slices.Contains(allowedWALLevels, value):
		return "wal_level must be replica or logical: streaming replicas and backups need at least replica"
	default:
		return unknownIn(name, major)
	}
}

// ownedSettings are the settings Tusk owns, always rendered (empty values
// included) so the file states the role it gives the server; settings
// unknown to the major version are left out.
func ownedSettings(in ServerConfig) []setting {
	archiveMode := "off"
	if in.ArchiveCommand != "" {
		archiveMode = "on"
	}
	owned := []setting{
		{"listen_addresses", in.ListenAddresses},
		{"port", strconv.Itoa(in.Port)},
		{"unix_socket_directories", in.SocketDir},
		{"cluster_name", in.ClusterName},
		// Replicas answer read-only queries (the -ro Service).
		{"hot_standby", "on"},
		{"archive_mode", archiveMode},
		{"archive_command", in.ArchiveCommand},
		{"archive_timeout", cmp.Or(in.ArchiveTimeout, "0")},
		// archive_command is how Tusk archives; on 16 and later setting
		// both is an error, on 15 the library would silently win.
		{"archive_library", ""},
		{"restore_command", in.RestoreCommand},
		{"primary_conninfo", in.PrimaryConnInfo},
		{"primary_slot_name", in.PrimarySlotName},
		{"synchronous_standby_names", in.SynchronousStandbyNames},
	}
	owned = append(owned, logSettings(in.JSONLog)...)
	owned = append(owned, tlsSettings(in.TLS)...)
	return slices.DeleteFunc(owned, func(s setting) bool { return unknownIn(s.name, in.MajorVersion) != "" })
}

// jsonlogSince is the first major version with log_destination = jsonlog.
const jsonlogSince = 15

// logSettings say where postgres logs. The instance manager forwards it
// into its own JSON log: from the named pipes the logging collector
// writes jsonlog into, or, without them, from postgres's stderr. The
// pipes are never rotated: a fixed file name, no rotation by age or size.
func logSettings(j *JSONLogFiles) []setting {
	if j == nil {
		return []setting{{"logging_collector", "off"}, {"log_destination", "stderr"}}
	}
	return []setting{
		{"logging_collector", "on"},
		{"log_destination", "jsonlog"},
		{"log_directory", j.Directory},
		{"log_filename", j.FileName},
		{"log_rotation_age", "0"},
		{"log_rotation_size", "0"},
	}
}

// maxMillis is the largest millisecond setting PostgreSQL takes (INT_MAX).
const maxMillis = 1<<31 - 1

func (l *Logging) validate() error {
	if l == nil {
		return nil
	}
	var errs []error
	for name, d := range map[string]*time.Duration{
		"log_min_duration_statement": l.SlowStatementThreshold, "deadlock_timeout": l.LockWaitThreshold,
	} {
		if d != nil && (*d < 0 || d.Milliseconds() > maxMillis) {
			errs = append(errs, fmt.Errorf("%s %s is not from 0 to %d ms", name, *d, maxMillis))
		}
	}
	if l.LockWaitThreshold != nil && *l.LockWaitThreshold < time.Millisecond {
		errs = append(errs, fmt.Errorf("deadlock_timeout %s is less than 1ms", *l.LockWaitThreshold))
	}
	return errors.Join(errs...)
}

// loggingSettings are the settings spec.postgresql.logging asks for.
func loggingSettings(l *Logging, major int) []setting {
	if l == nil {
		return nil
	}
	var s []setting
	millis := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }
	if d := l.SlowStatementThreshold; d != nil {
		s = append(s, setting{"log_min_duration_statement", millis(*d)})
	}
	if d := l.LockWaitThreshold; d != nil {
		s = append(s, setting{"deadlock_timeout", millis(*d)})
	}
	if l.LockWaits != nil {
		on := "off"
		if *l.LockWaits {
			on = "on"
		}
		s = append(s, setting{"log_lock_waits", on})
		if major >= 14 {
			s = append(s, setting{"log_recovery_conflict_waits", on})
		}
	}
	return s
}

// tlsSettings turns ssl on with the given files, or off.
func tlsSettings(tls *TLSFiles) []setting {
	if tls == nil {
		return []setting{{"ssl", "off"}}
	}
	s := []setting{
		{"ssl", "on"},
		{"ssl_cert_file", tls.CertFile},
		{"ssl_key_file", tls.KeyFile},
	}
	if tls.CAFile != "" {
		s = append(s, setting{"ssl_ca_file", tls.CAFile})
	}
	return s
}
