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
	config  string
	timeout time.Duration
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
(exit 1), never overwritten.`,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := f.archiver()
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			ctx, cancel := f.context()
			defer cancel()
			res, err := a.Archive(ctx, args[0])
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			if res.AlreadyArchived {
				_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "tusk: %s was already archived with the same content at %s%s\n",
					args[0], a.Store.Location(), res.Key)
			}
			return nil
		},
	}
	f.add(cmd, 1, 1)
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
rather than end it early.`, exitNotArchived, exitAbortRecovery),
		SilenceErrors: true,
		RunE: func(_ *cobra.Command, args []string) error {
			a, err := f.archiver()
			if err != nil {
				return &exitError{code: exitAbortRecovery, err: err}
			}
			ctx, cancel := f.context()
			defer cancel()
			err = a.Restore(ctx, args[0], args[1])
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
	return cmd
}

// exitCode prints err when it is an exitError that is not quiet (cobra
// printed the others), and returns the process's exit code for it.
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
	return 1
}
