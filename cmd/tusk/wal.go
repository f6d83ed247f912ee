package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"tusk.dev/tusk/internal/plugin"
	"tusk.dev/tusk/internal/walarchive"
)

// Exit codes of `tusk instance wal-restore`, as PostgreSQL reads a
// restore_command's: 1 is "no such file in the archive", the normal end of
// recovery; a code above 125 makes recovery stop with a FATAL error instead
// of ending there and promoting, which is what any other failure (a corrupt
// segment, wrong credentials, an unreachable store) must do, or recovery
// would end early and silently lose what it had not replayed.
const (
	exitNotArchived   = 1
	exitAbortRecovery = 255
)

// exitError carries a process exit code; quiet ones print nothing (they
// are expected outcomes, not failures).
type exitError struct {
	code  int
	quiet bool
	err   error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// walFlags are the flags the WAL commands share.
type walFlags struct {
	config   string
	timeout  time.Duration
	parallel int
}

// add adds the flags, and makes usage errors exit with failCode (and say
// so: the WAL commands print their own errors).
func (f *walFlags) add(cmd *cobra.Command, nargs, failCode int) {
	cmd.Args = func(_ *cobra.Command, args []string) error {
		if len(args) != nargs {
			return &exitError{code: failCode, err: fmt.Errorf("%s takes %d arguments, got %d", cmd.Name(), nargs, len(args))}
		}
		return nil
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: failCode, err: err} })
	f.addFlags(cmd, 5*time.Minute)
}

// addParallel adds --parallel with what it means for the command.
func (f *walFlags) addParallel(cmd *cobra.Command, usage string) {
	cmd.Flags().IntVar(&f.parallel, "parallel", walarchive.DefaultParallel, usage)
}

// addFlags adds --config and --timeout.
func (f *walFlags) addFlags(cmd *cobra.Command, timeout time.Duration) {
	cmd.Flags().StringVar(&f.config, "config", "", "WAL archive configuration file (JSON: cluster, objectStore); $"+walarchive.ConfigEnv+" when empty")
	cmd.Flags().DurationVar(&f.timeout, "timeout", timeout, "give up after this long")
}

func (f *walFlags) archiver() (walarchive.Archiver, error) {
	cfg, err := walarchive.LoadConfig(f.config)
	if err != nil {
		return walarchive.Archiver{}, err
	}
	return walarchive.NewArchiver(cfg)
}

func (f *walFlags) context() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	return ctx, func() { cancel(); stop() }
}

func newWALArchiveCommand() *cobra.Command {
	var f walFlags
	cmd := &cobra.Command{
		Use:   "wal-archive <path>",
		Short: "Archive one WAL file to the object store (archive_command = 'tusk instance wal-archive %p')",
		Long: `Compresses the WAL file with zstd and stores it with its SHA-256 in the
object store the configuration names. Archiving a file already archived with
the same content succeeds; a different file under the same name is refused
(exit 1), never overwritten.

With --parallel above 1, it also archives the next segments waiting in
pg_wal/archive_status, at once, and records each one stored and verified
in pg_wal/tusk-spool: PostgreSQL's later call for it then only checks that
the file still has the recorded checksum. Only the requested file's failure
fails the command; the others are retried when PostgreSQL asks for them.`,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := f.archiver()
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			ctx, cancel := f.context()
			defer cancel()
			res, ahead, err := a.ArchiveAhead(ctx, args[0], f.parallel)
			for _, r := range ahead {
				if r.Err != nil {
					_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "tusk: warning: archiving %s ahead failed (it is archived when PostgreSQL asks for it): %v\n", r.Name, r.Err)
				}
			}
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			// A file archived ahead is the normal case with --parallel:
			// nothing to say about it in PostgreSQL's log.
			if res.AlreadyArchived && !res.Recorded {
				_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "tusk: %s was already archived with the same content at %s%s\n",
					args[0], a.Store.Location(), res.Key)
			}
			return nil
		},
	}
	f.add(cmd, 1, 1)
	f.addParallel(cmd, "segments archived at once: the requested file and the next ones waiting in pg_wal/archive_status (1: only the requested file)")
	return cmd
}

func newWALRestoreCommand() *cobra.Command {
	var f walFlags
	cmd := &cobra.Command{
		Use:   "wal-restore <walname> <destpath>",
		Short: "Restore one WAL file from the object store (restore_command = 'tusk instance wal-restore %f %p')",
		Long: fmt.Sprintf(`Fetches the WAL file, verifies its SHA-256 and writes it to destpath.
Exit codes: 0 restored; %d (quietly) not in the archive, which ends recovery
normally; %d for any other failure, which makes PostgreSQL stop recovery
rather than end it early.

With --parallel above 1, a segment not fetched ahead by an earlier run is
fetched together with the next segments of its timeline, which wait in
pg_wal/tusk-spool under their checksums. A later call for one of them checks
that the archive still stores that checksum and the file still has it, and
renames it into place. Missing next segments are the end of the archive,
not errors; history files are never prefetched.`, exitNotArchived, exitAbortRecovery),
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := f.archiver()
			if err != nil {
				return &exitError{code: exitAbortRecovery, err: err}
			}
			ctx, cancel := f.context()
			defer cancel()
			res, err := a.RestorePrefetch(ctx, args[0], args[1], f.parallel)
			for _, p := range res.Prefetched {
				if p.Err != nil {
					_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "tusk: warning: prefetching %s failed (it is fetched when PostgreSQL asks for it): %v\n", p.Name, p.Err)
				}
			}
			switch {
			case errors.Is(err, walarchive.ErrNotArchived):
				return &exitError{code: exitNotArchived, quiet: true, err: err}
			case err != nil:
				return &exitError{code: exitAbortRecovery, err: err}
			}
			return nil
		},
	}
	f.add(cmd, 2, exitAbortRecovery)
	f.addParallel(cmd, "segments fetched at once: the requested one and the next ones of its timeline, kept in pg_wal/tusk-spool for the next calls (1: no prefetch)")
	return cmd
}

// exitCode prints err when it is an exitError that is not quiet (cobra
// printed the others), and returns the process's exit code for it: a
// plugin command's (kubectl tusk psql passes psql's on) or 1 for others.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ex, ok := errors.AsType[*exitError](err); ok {
		if !ex.quiet {
			_, _ = fmt.Fprintln(os.Stderr, "Error:", ex.err)
		}
		return ex.code
	}
	if ex, ok := errors.AsType[*plugin.ExitCodeError](err); ok {
		return ex.Code
	}
	return 1
}
