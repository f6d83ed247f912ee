package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"tusk.dev/tusk/internal/instance/pgbin"
	"tusk.dev/tusk/internal/instance/pgupgrade"
)

// newCopyBinariesCommand is the init container that runs in the old
// major's image and carries its server into a volume for pg_upgrade.
func newCopyBinariesCommand() *cobra.Command {
	var dest, binDir string
	cmd := &cobra.Command{
		Use:   "copy-binaries",
		Short: "Copy this image's PostgreSQL server, with the libraries it needs, into a volume for a major upgrade in a newer image (init container)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := pgbin.Finder{Dir: binDir}.Find()
			if err != nil {
				return err
			}
			copied, err := pgupgrade.CopyServer(dir, dest)
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), copied)
		},
	}
	cmd.Flags().StringVar(&dest, "dest", "/tusk-old", "the volume to copy into; the new image's container must mount it at the same path")
	cmd.Flags().StringVar(&binDir, "pg-bindir", "", "directory of the PostgreSQL server programs (found as the instance manager finds them when empty)")
	return cmd
}

// upgradeFlags are what every step of `tusk instance upgrade` needs.
type upgradeFlags struct {
	plan    pgupgrade.Plan
	oldCopy string
	mode    string
}

func (f *upgradeFlags) complete() error {
	if f.plan.DataDir == "" {
		return errors.New("--pgdata is required")
	}
	if f.plan.OldBinDir == "" && f.oldCopy != "" {
		old, err := pgupgrade.ReadOldBinaries(f.oldCopy)
		if err != nil {
			return err
		}
		f.plan.OldBinDir = old.BinDir
	}
	newBin, err := pgbin.Finder{Dir: f.plan.NewBinDir}.Find()
	if err != nil {
		return err
	}
	f.plan.NewBinDir, f.plan.Mode = newBin, pgupgrade.Mode(f.mode)
	switch f.plan.Mode {
	case pgupgrade.ModeLink, pgupgrade.ModeCopy, pgupgrade.ModeClone:
	default:
		return fmt.Errorf("--mode %q: want link, copy or clone", f.mode)
	}
	return nil
}

// newUpgradeCommand runs the steps of a major upgrade of a stopped data
// directory by hand (the instance manager runs the same steps itself).
func newUpgradeCommand() *cobra.Command {
	f := &upgradeFlags{}
	cmd := &cobra.Command{
		Use:   "upgrade check|run|verify|commit|rollback",
		Short: "Upgrade a stopped data directory to this image's PostgreSQL major with pg_upgrade, one step at a time",
		Long: `check     runs the pre-checks and pg_upgrade --check; nothing changes
run       upgrades (or finishes an interrupted upgrade) up to a new data directory in place, not yet started; a failure is rolled back
verify    starts the new server privately and reads every database's catalog; a failure is rolled back
commit    removes the old data directory: from here on, going back means restoring a backup
rollback  puts the old data directory back, startable as before`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"check", "run", "verify", "commit", "rollback"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != "commit" && args[0] != "rollback" {
				if err := f.complete(); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			var err error
			switch args[0] {
			case "check":
				err = pgupgrade.Check(ctx, f.plan)
			case "run":
				err = pgupgrade.Upgrade(ctx, f.plan)
			case "verify":
				err = pgupgrade.Verify(ctx, f.plan)
			case "commit":
				err = pgupgrade.Commit(f.plan.DataDir)
			case "rollback":
				err = pgupgrade.Rollback(f.plan.DataDir)
			default:
				return fmt.Errorf("unknown step %q: want check, run, verify, commit or rollback", args[0])
			}
			if err != nil {
				return err
			}
			st, err := pgupgrade.ReadState(f.plan.DataDir)
			if err != nil || st == nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), st)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.plan.DataDir, "pgdata", os.Getenv("PGDATA"), "the data directory")
	fl.StringVar(&f.plan.OldBinDir, "old-bindir", "", "the old major's server programs")
	fl.StringVar(&f.oldCopy, "old-copy", "/tusk-old", "where copy-binaries put the old major's server, when --old-bindir is not given")
	fl.StringVar(&f.plan.NewBinDir, "pg-bindir", "", "the new major's server programs (found as the instance manager finds them when empty)")
	fl.StringVar(&f.mode, "mode", string(pgupgrade.ModeLink), "how data files are carried: link, copy or clone")
	fl.StringVar(&f.plan.SocketDir, "socket-dir", "/tmp", "where the servers started for the upgrade put their socket")
	fl.IntVar(&f.plan.Port, "port", 50432, "the port number of those sockets")
	fl.IntVar(&f.plan.Jobs, "jobs", 1, "pg_upgrade's parallel jobs")
	return cmd
}
