package instance

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/instance/lifecycle"
	"tusk.dev/tusk/internal/instance/sqlobjects"
	"tusk.dev/tusk/internal/instance/supervisor"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/walarchive"
)

// LatestBackup is the RecoveryOptions.Backup that restores the newest complete
// backup of the source location that ended before the target (the newest
// of all without a target).
const LatestBackup = "latest"

// RecoveryOptions make a new primary restore a base backup and replay the
// WAL archive of another location instead of running initdb.
type RecoveryOptions struct {
	// Source is the location holding the backups and the WAL archive: the
	// source cluster's, never this cluster's own (Path is required).
	Source walarchive.Config
	// Backup names the backup to restore, or is LatestBackup.
	Backup string
	// Target is where recovery stops; the end of the archive when unset.
	Target basebackup.Target
	// Binary is the tusk binary postgres runs as restore_command.
	Binary string
}

func (o *RecoveryOptions) validate(own *WALArchiveOptions) error {
	if o == nil {
		return nil
	}
	var errs []error
	if !filepath.IsAbs(o.Binary) {
		errs = append(errs, fmt.Errorf("recovery needs the tusk binary's absolute path, got %q", o.Binary))
	}
	s := o.Source.ObjectStore
	if s.Endpoint == "" || s.Bucket == "" || strings.Trim(s.Path, "/") == "" {
		errs = append(errs, errors.New("recovery needs the source location's endpoint, bucket and path"))
	}
	if o.Backup != LatestBackup {
		if err := basebackup.ValidateName(o.Backup); err != nil {
			errs = append(errs, err)
		}
	}
	if err := o.Target.Check(); err != nil {
		errs = append(errs, err)
	}
	if own != nil && SameLocation(own.Config, o.Source) {
		errs = append(errs, fmt.Errorf("refusing to recover from %s/%s/%s: it is where this cluster archives its own WAL, "+
			"and archiving there would mix two histories in the source's archive", s.Endpoint, s.Bucket, strings.Trim(s.Path, "/")))
	}
	return errors.Join(errs...)
}

// SameLocation says whether two archive configurations name the same
// location: endpoint, bucket and path (the cluster's name when empty).
func SameLocation(a, b walarchive.Config) bool {
	path := func(c walarchive.Config) string {
		if p := strings.Trim(c.ObjectStore.Path, "/"); p != "" {
			return p
		}
		return c.Cluster
	}
	return strings.EqualFold(strings.TrimRight(a.ObjectStore.Endpoint, "/"), strings.TrimRight(b.ObjectStore.Endpoint, "/")) &&
		a.ObjectStore.Bucket == b.ObjectStore.Bucket && path(a) == path(b)
}

// recoveryConfigPath is restore_command's configuration: the source's
// location, apart from the cluster's own archive configuration.
func (m *Manager) recoveryConfigPath() string {
	return filepath.Join(m.opts.RunDir, "recovery-source.json")
}

// recoverPrimary builds a primary's data directory in dir from a backup:
// it restores the backup, replays the archive until postgres promotes
// itself (at the target, or the end of the archive), checks that it came
// out as a primary on a new timeline, and gives the roles this cluster's
// passwords. dir is left for the caller to remove on failure.
func (m *Manager) recoverPrimary(ctx context.Context, dir string) error {
	o := m.opts.Recovery
	m.setRecoveryStep("", "reading the backups at the source")
	data, err := json.Marshal(o.Source)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(m.recoveryConfigPath(), data); err != nil {
		return err
	}
	archiver, err := walarchive.NewArchiver(o.Source)
	if err != nil {
		return err
	}
	name, err := resolveBackup(ctx, archiver.Store, o.Backup, o.Target)
	if err != nil {
		return err
	}
	m.setRecoveryStep(name, "downloading and verifying the backup")
	m.log.Info("Restoring a base backup", "backup", name, "source", archiver.Store.Location())
	rec, err := basebackup.Restore(ctx, basebackup.RestoreOptions{
		Name: name, Store: archiver.Store, TargetDir: dir, Target: o.Target,
		RestoreCommand: basebackup.RestoreCommand(o.Binary, m.recoveryConfigPath()),
	})
	if err != nil {
		return err
	}
	// This cluster's configuration, not the source's (its archive_command
	// would write into the source's location), then the recovery settings.
	st := m.snapshot()
	st.role = instanceapi.RolePrimary
	if err := m.writeConfigIn(dir, st); err != nil {
		return err
	}
	if err := appendRecoverySettings(dir, basebackup.RecoverySettings(name, basebackup.RestoreCommand(o.Binary, m.recoveryConfigPath()), o.Target)); err != nil {
		return err
	}
	m.setRecoveryStep(name, "replaying the WAL archive up to the target")
	return m.finishRecovery(ctx, dir, rec.Timeline)
}

// finishRecovery runs the recovery set up in dir until postgres promotes
// itself, checks it came out on a timeline after fromTimeline, and gives
// the roles this cluster's passwords.
func (m *Manager) finishRecovery(ctx context.Context, dir string, fromTimeline uint32) error {
	if err := m.replayArchive(ctx, dir); err != nil {
		return err
	}
	if err := m.checkPromoted(ctx, dir, fromTimeline); err != nil {
		return err
	}
	m.setRecoveryStep("", "setting this cluster's passwords")
	if err := m.resetSuperuserPassword(ctx, dir); err != nil {
		return err
	}
	return m.withPrivateServer(ctx, dir, m.reconcileRecoveredRoles)
}

// resolveBackup is the backup to restore: name itself, or the latest one
// the target allows.
func resolveBackup(ctx context.Context, store *objectstore.Store, name string, target basebackup.Target) (string, error) {
	if name != LatestBackup {
		return name, nil
	}
	names, err := basebackup.ListBackups(ctx, store)
	if err != nil {
		return "", err
	}
	var records []*basebackup.Record
	for _, n := range names {
		rec, err := basebackup.LoadRecord(ctx, store, n)
		if err != nil {
			return "", err
		}
		records = append(records, rec)
	}
	rec, err := chooseBackup(records, target)
	if err != nil {
		return "", fmt.Errorf("at %s: %w", store.Location(), err)
	}
	return rec.Name, nil
}

// chooseBackup picks the backup recovery to target starts from: the one
// that ended last among those that ended before the target time or LSN
// (every backup for a restore point or the end of the archive).
func chooseBackup(records []*basebackup.Record, target basebackup.Target) (*basebackup.Record, error) {
	var best *basebackup.Record
	for _, r := range records {
		if target.Time != nil && r.EndTime.After(*target.Time) || target.LSN != nil && r.EndLSN > *target.LSN {
			continue
		}
		if best == nil || r.EndTime.After(best.EndTime) || r.EndTime.Equal(best.EndTime) && r.EndLSN > best.EndLSN {
			best = r
		}
	}
	switch {
	case best != nil:
		return best, nil
	case len(records) == 0:
		return nil, errors.New("there are no complete backups to recover from")
	case target.Time != nil:
		return nil, fmt.Errorf("no backup ended before the recovery target time %s (the first ended %s)",
			target.Time.UTC().Format(time.RFC3339Nano), firstEnd(records).EndTime.UTC().Format(time.RFC3339Nano))
	default:
		return nil, fmt.Errorf("no backup ended before the recovery target LSN %s (the first ended at %s)", target.LSN, firstEnd(records).EndLSN)
	}
}

func firstEnd(records []*basebackup.Record) *basebackup.Record {
	return slices.MinFunc(records, func(a, b *basebackup.Record) int { return a.EndTime.Compare(b.EndTime) })
}

// appendRecoverySettings adds the recovery settings to the
// postgresql.auto.conf writeConfigIn just emptied, and the recovery.signal
// that makes postgres read them.
func appendRecoverySettings(dir, settings string) error {
	auto := filepath.Join(dir, "postgresql.auto.conf")
	current, err := os.ReadFile(auto) //nolint:gosec // in the directory being built
	if err != nil {
		return fmt.Errorf("while writing the recovery settings: %w", err)
	}
	if err := writeFileAtomic(auto, append(current, settings...)); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, "recovery.signal"), nil)
}

// replayArchive runs postgres privately (no TCP, no hot standby: nothing
// connects while it recovers) until it has promoted itself: postmaster.pid
// then says "ready". A postgres that stops first (target not reached,
// archive unreachable) is the error, with its last message.
func (m *Manager) replayArchive(ctx context.Context, dir string) error {
	args := []string{"-c", "listen_addresses=", "-c", "unix_socket_directories=" + m.opts.SocketDir,
		"-c", "port=" + portArg(m.opts.Port), "-c", "hot_standby=off"}
	// wal-restore's prefetched segments belong to one recovery: start
	// without any, and leave none behind once it ended.
	spool := filepath.Join(dir, "pg_wal")
	if err := walarchive.ClearSpool(spool); err != nil {
		return fmt.Errorf("while clearing the WAL spool: %w", err)
	}
	defer func() { _ = walarchive.ClearSpool(spool) }()
	m.resetWALWatcher()
	pm, err := supervisor.StartPostmaster(m.opts.BinDir, dir, args, m.reaper, m.postgresOutput(), m.log)
	if err != nil {
		return err
	}
	started := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = pm.Stop(supervisor.Fast, m.opts.Timeouts)
			return ctx.Err()
		case <-pm.Done():
			return fmt.Errorf("postgres stopped before recovery ended (%w): %s",
				cmpErr(pm.ExitErr(), errors.New("exit status 0")), pm.LastError())
		case <-tick.C:
		}
		content, err := os.ReadFile(filepath.Join(dir, "postmaster.pid")) //nolint:gosec // in the directory being built
		if err != nil || postmasterStatus(string(content)) != "ready" {
			continue
		}
		m.log.Info("Recovery ended: postgres promoted itself", "duration", time.Since(started).String())
		return pm.Stop(supervisor.Fast, m.opts.Timeouts)
	}
}

// cmpErr is err, or otherwise when err is nil.
func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// postmasterStatus is the status line of postmaster.pid (its 8th line):
// "starting", "stopping", "ready" or "standby"; empty before postgres
// writes it.
func postmasterStatus(pidFile string) string {
	lines := strings.Split(pidFile, "\n")
	if len(lines) < 8 {
		return ""
	}
	return strings.TrimSpace(lines[7])
}

// checkPromoted reads pg_control of the stopped server: it must have shut
// down cleanly, as a primary, on a timeline after the backup's.
func (m *Manager) checkPromoted(ctx context.Context, dir string, backupTimeline uint32) error {
	cd, err := m.readControlData(ctx, dir)
	if err != nil {
		return err
	}
	if cd.state != instanceapi.StateShutDown {
		return fmt.Errorf("the recovered server did not come out as a cleanly stopped primary: pg_control says %q", cd.state)
	}
	if cd.timeline <= backupTimeline {
		return fmt.Errorf("the recovered server is on timeline %d, the backup's was %d: it did not promote onto a new timeline", cd.timeline, backupTimeline)
	}
	m.log.Info("The recovered server is a primary on a new timeline", "timeline", cd.timeline)
	return nil
}

// controlData is what the recovery checks of pg_controldata's output.
type controlData struct {
	state    string
	timeline uint32
	systemID string
	// checkpoint and minRecovery are LSNs as pg_controldata prints them.
	checkpoint, minRecovery string
}

func parseControlData(out string) controlData {
	var cd controlData
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch strings.TrimSpace(key) {
		case "Database cluster state":
			cd.state = value
		case "Database system identifier":
			cd.systemID = value
		case "Latest checkpoint location":
			cd.checkpoint = value
		case "Minimum recovery ending location":
			cd.minRecovery = value
		case "Latest checkpoint's TimeLineID":
			if tli, err := strconv.ParseUint(value, 10, 32); err == nil {
				cd.timeline = uint32(tli)
			}
		}
	}
	return cd
}

// readControlData runs pg_controldata on the data directory dir (in the C
// locale, whose labels parseControlData reads) and parses its output.
func (m *Manager) readControlData(ctx context.Context, dir string) (controlData, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(m.opts.BinDir, "pg_controldata"), "-D", dir) //nolint:gosec // PostgreSQL's own program
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := m.reaper.Start(cmd); err != nil {
		return controlData{}, fmt.Errorf("while starting pg_controldata: %w", err)
	}
	if err := m.reaper.Wait(cmd); err != nil {
		return controlData{}, fmt.Errorf("pg_controldata failed (%w): %s", err, lastLines(out.String(), 3))
	}
	return parseControlData(out.String()), nil
}

// resetSuperuserPassword gives postgres this cluster's superuser password.
// The recovered roles have the source's passwords, which the manager does
// not know, so it runs a single-user backend (no connection, no
// authentication) on the stopped directory. The statement holds a SCRAM
// verifier, never the password.
func (m *Manager) resetSuperuserPassword(ctx context.Context, dir string) error {
	verifier, err := sqlobjects.ScramVerifier(m.currentSecrets().superuserPassword)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(m.opts.BinDir, "postgres"), "--single", "-D", dir, //nolint:gosec // PostgreSQL's own server
		"-c", "archive_mode=off", "-c", "log_statement=none", "-c", "log_min_error_statement=panic", "postgres")
	cmd.Stdin = strings.NewReader(fmt.Sprintf("ALTER ROLE %s WITH LOGIN SUPERUSER PASSWORD %s\n", ident(superuser), literal(verifier)))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := m.reaper.Start(cmd); err != nil {
		return fmt.Errorf("while starting postgres --single: %w", err)
	}
	err = m.reaper.Wait(cmd)
	// A failed statement does not change the exit code in single-user mode.
	if err != nil || strings.Contains(out.String(), "ERROR:") || strings.Contains(out.String(), "FATAL:") {
		return fmt.Errorf("while setting the superuser's password in single-user mode (%w): %s", err, sqlobjects.RedactVerifiers(lastLines(out.String(), 3)))
	}
	return nil
}

// reconcileRecoveredRoles makes the recovered roles those of this
// cluster, as initdb would have made them: the replication role (with
// this cluster's password, or none when replicas use a certificate), the
// monitoring role, and the application owner and database (created when
// the backup has none of that name).
func (m *Manager) reconcileRecoveredRoles(ctx context.Context, conn *pgx.Conn) error {
	if err := sqlobjects.QuietRoleStatements(ctx, conn); err != nil {
		return err
	}
	secrets := m.currentSecrets()
	replication := fmt.Sprintf("ALTER ROLE %s WITH LOGIN REPLICATION PASSWORD NULL", ident(replicationUser))
	if m.replicationCerts == nil {
		verifier, err := sqlobjects.ScramVerifier(secrets.replicationPassword)
		if err != nil {
			return err
		}
		replication = fmt.Sprintf("ALTER ROLE %s WITH LOGIN REPLICATION PASSWORD %s", ident(replicationUser), literal(verifier))
	}
	create, err := m.createReplicationRole(secrets)
	if err != nil {
		return err
	}
	if err := m.ensureRole(ctx, conn, replicationUser, create, replication); err != nil {
		return err
	}
	if err := m.grantRoleRights(ctx, conn); err != nil {
		return err
	}
	owner, database := m.opts.InitDB.Owner, m.opts.InitDB.Database
	if owner == "" {
		return nil
	}
	verifier, err := sqlobjects.ScramVerifier(secrets.appPassword)
	if err != nil {
		return err
	}
	if err := m.ensureRole(ctx, conn, owner, fmt.Sprintf("CREATE ROLE %s WITH LOGIN PASSWORD %s", ident(owner), literal(verifier)),
		fmt.Sprintf("ALTER ROLE %s WITH LOGIN PASSWORD %s", ident(owner), literal(verifier))); err != nil {
		return err
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", database).Scan(&exists); err != nil {
		return fmt.Errorf("while looking for database %s: %w", database, err)
	}
	if exists {
		return nil
	}
	m.log.Info("The backup has no application database of this name; creating it", "database", database)
	_, err = conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s OWNER %s", ident(database), ident(owner)))
	return err
}

// ensureRole runs create when the role does not exist, alter (if any)
// when it does.
func (m *Manager) ensureRole(ctx context.Context, conn *pgx.Conn, role, create, alter string) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)", role).Scan(&exists); err != nil {
		return fmt.Errorf("while looking for role %s: %w", role, err)
	}
	s := create
	if exists {
		s = alter
	}
	if s == "" {
		return nil
	}
	if _, err := conn.Exec(ctx, s); err != nil {
		// The statement holds only a verifier, never a password.
		return fmt.Errorf("while setting up the recovered cluster (%s): %w", firstWords(s, 3), err)
	}
	return nil
}

// setRecoveryStep reports what the recovery bootstrap is doing.
func (m *Manager) setRecoveryStep(backup, step string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := instanceapi.RecoveryStatus{Backup: backup, Step: step}
	if m.state.recovery != nil {
		r.FailedAttempts = m.state.recovery.FailedAttempts
		if backup == "" {
			r.Backup = m.state.recovery.Backup
		}
	}
	m.recordLocked(lifecycle.Recovering)
	m.state.recovery = &r
}

// recoveryFailed records a failed attempt.
func (m *Manager) recoveryFailed(err error, retryIn time.Duration) {
	m.mu.Lock()
	r := instanceapi.RecoveryStatus{}
	if m.state.recovery != nil {
		r = *m.state.recovery
	}
	r.FailedAttempts++
	r.Step = fmt.Sprintf("waiting %s before trying again", retryIn)
	m.state.recovery = &r
	m.recordLocked(lifecycle.Recovering)
	m.mu.Unlock()
	m.setError(fmt.Errorf("recovery failed (attempt %d): %w", r.FailedAttempts, err))
}

// recovering says whether this start bootstraps by recovery.
func (m *Manager) recovering() bool {
	return m.opts.Recovery != nil && m.opts.Role == instanceapi.RolePrimary && !isDataDir(m.opts.DataDir)
}

// bootstrapRetryBackoff spaces the attempts of a recovery or clone that
// failed. Its causes are fixed outside the pod, so retrying at a crashed
// postgres's pace (RestartBackoff starts at 100 ms) would only load the
// object store or the source cluster.
var bootstrapRetryBackoff = Backoff{Min: time.Second, Max: 30 * time.Second}

// bootstrapWithRetries is bootstrap; a recovery, clone or import that fails is tried
// again with a growing wait (the operator shows the error meanwhile),
// since its causes (a missing backup, an unreachable store, wrong
// credentials) are fixed outside the pod, and a pod that exits would only
// restart it sooner and lose its status.
func (m *Manager) bootstrapWithRetries(ctx context.Context) (bool, error) {
	if !m.recovering() && !m.cloning() && !m.importing() {
		return m.bootstrap(ctx)
	}
	var wait time.Duration
	for {
		fresh, err := m.bootstrap(ctx)
		if err == nil {
			m.mu.Lock()
			m.state.recovery, m.state.lastError = nil, ""
			m.mu.Unlock()
			return fresh, nil
		}
		if ctx.Err() != nil {
			return false, err
		}
		wait = bootstrapRetryBackoff.next(wait)
		m.recoveryFailed(err, wait)
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(wait):
		}
	}
}
