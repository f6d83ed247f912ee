package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/instance/pgbin"
	"tusk.dev/tusk/internal/postgres"
	"tusk.dev/tusk/internal/walarchive"
)

// defaultConnString reaches the local instance as the instance manager
// sets it up: its socket, the superuser, the passfile it writes.
const defaultConnString = "host=/run/tusk/socket port=5432 user=postgres dbname=postgres passfile=/run/tusk/pgpass"

func newBackupCommand() *cobra.Command {
	f := walFlags{}
	var name, conn, binDir string
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Take a base backup of the instance into the object store",
		Long: `Runs pg_basebackup against the instance and streams its tar output,
compressed with zstd, to <location>/base/<name>/base.tar.zst, checking every
file against the backup manifest on the way; then writes
<location>/base/<name>/backup.json, which marks the backup complete, and
prints it. The WAL the backup needs is archived by wal-archive.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := f.archiver()
			if err != nil {
				return err
			}
			dir, err := pgbin.Finder{Dir: binDir}.Find()
			if err != nil {
				return err
			}
			ctx, cancel := f.context()
			defer cancel()
			rec, err := basebackup.Backup(ctx, basebackup.Options{Name: name, BinDir: dir, ConnString: conn, Store: a.Store})
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), rec)
		},
	}
	f.addFlags(cmd, 24*time.Hour)
	fl := cmd.Flags()
	fl.StringVar(&name, "name", "", "the backup's name, unique in the cluster's location (required)")
	fl.StringVar(&conn, "connection", defaultConnString, "libpq connection string of the instance to back up")
	fl.StringVar(&binDir, "pg-bindir", "", "directory of pg_basebackup (found on PATH, by pg_config or in /usr/lib/postgresql when empty)")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

type restoreFlags struct {
	walFlags
	name, targetDir, tuskBinary       string
	targetTime, targetLSN, targetName string
}

func newRestoreCommand() *cobra.Command {
	f := restoreFlags{}
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Restore a base backup into a new data directory, set to recover from the WAL archive",
		Long: `Downloads backup <name>, verifies every file against its backup manifest and
writes it into the target directory (which must be empty or missing), then
writes recovery.signal and the recovery settings to postgresql.auto.conf:
restore_command running wal-restore with the same configuration and, with a
target, recovery_target_* and recovery_target_action = promote. Starting
postgres on the directory then replays the archive to the target (or to its
end) and promotes on a new timeline. A target before the backup's end is
refused before anything is written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	f.addFlags(cmd, 24*time.Hour)
	fl := cmd.Flags()
	fl.StringVar(&f.name, "backup", "", "name of the backup to restore (required)")
	fl.StringVar(&f.targetDir, "target-dir", "", "the new data directory: missing or empty (required)")
	fl.StringVar(&f.targetTime, "target-time", "", "recover up to this time (RFC 3339, e.g. 2026-01-02T15:04:05.123Z) and promote")
	fl.StringVar(&f.targetLSN, "target-lsn", "", "recover up to this LSN (e.g. 0/3000060) and promote")
	fl.StringVar(&f.targetName, "target-name", "", "recover up to this restore point (pg_create_restore_point) and promote")
	fl.StringVar(&f.tuskBinary, "tusk-binary", "", "the tusk binary restore_command runs (this one when empty)")
	_ = cmd.MarkFlagRequired("backup")
	_ = cmd.MarkFlagRequired("target-dir")
	return cmd
}

func (f *restoreFlags) run(cmd *cobra.Command) error {
	target, err := f.target()
	if err != nil {
		return err
	}
	restoreCommand, err := f.restoreCommand()
	if err != nil {
		return err
	}
	a, err := f.archiver()
	if err != nil {
		return err
	}
	ctx, cancel := f.context()
	defer cancel()
	rec, err := basebackup.Restore(ctx, basebackup.RestoreOptions{Name: f.name, Store: a.Store, TargetDir: f.targetDir,
		Target: target, RestoreCommand: restoreCommand})
	if err != nil {
		return err
	}
	return printJSON(cmd.OutOrStdout(), rec)
}

func (f *restoreFlags) target() (basebackup.Target, error) {
	return parseTarget(f.targetTime, f.targetLSN, f.targetName, "--target")
}

// parseTarget reads a recovery target from the flags prefix-time,
// prefix-lsn and prefix-name.
func parseTarget(targetTime, targetLSN, targetName, prefix string) (basebackup.Target, error) {
	var t basebackup.Target
	if targetTime != "" {
		at, err := time.Parse(time.RFC3339Nano, targetTime)
		if err != nil {
			return t, fmt.Errorf("%s-time %q is not an RFC 3339 time such as 2026-01-02T15:04:05.123Z", prefix, targetTime)
		}
		t.Time = &at
	}
	if targetLSN != "" {
		lsn, err := postgres.ParseLSN(targetLSN)
		if err != nil {
			return t, fmt.Errorf("%s-lsn: %w", prefix, err)
		}
		t.LSN = &lsn
	}
	t.Name = targetName
	return t, nil
}

// restoreCommand runs this binary (or --tusk-binary) with the same
// configuration file, by absolute paths: postgres runs it from the data
// directory.
func (f *restoreFlags) restoreCommand() (string, error) {
	bin := f.tuskBinary
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return "", err
		}
		bin = self
	}
	config := f.config
	if config == "" {
		config = os.Getenv(walarchive.ConfigEnv)
	}
	if config == "" {
		return "", errors.New("no WAL archive configuration: pass --config")
	}
	config, err := filepath.Abs(config)
	if err != nil {
		return "", err
	}
	return basebackup.RestoreCommand(bin, config), nil
}
