package pgupgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instance/fsutil"
)

// Mode is how pg_upgrade carries the user's data files into the new data
// directory.
type Mode string

const (
	// ModeLink hard-links the files: fast, no extra space, and the old
	// directory stays startable until the new server is committed to
	// (pg_upgrade renames the old pg_control away, which Rollback undoes).
	ModeLink Mode = "link"
	// ModeCopy copies the files: as much free space again as the data,
	// and the old directory is never touched.
	ModeCopy Mode = "copy"
	// ModeClone uses the filesystem's copy-on-write clones (XFS, Btrfs):
	// as fast as link, the old directory never touched.
	ModeClone Mode = "clone"
)

// Step is how far an upgrade of a data directory has come; it is kept in
// the state file beside the data directory, so an upgrade interrupted at any
// point is either finished or undone by the next run, never left half.
type Step string

const (
	// StepChecking means the new data directory is being created beside the
	// old one, which is untouched.
	StepChecking Step = "Checking"
	// StepChecked means the new data directory exists beside the old one and
	// pg_upgrade --check passed; the old one is untouched.
	StepChecked Step = "Checked"
	// StepUpgrading means pg_upgrade is running or was interrupted; the old
	// directory's pg_control may be renamed (link mode).
	StepUpgrading Step = "Upgrading"
	// StepUpgraded means pg_upgrade finished; the directories are not swapped.
	StepUpgraded Step = "Upgraded"
	// StepSwapped means the data directory path holds the new major and the old
	// one waits beside it, startable again by Rollback.
	StepSwapped Step = "Swapped"
	// StepCommitted means the new server started and the old directory is
	// being removed; there is no way back but a backup.
	StepCommitted Step = "Committed"
)

// Plan says what to upgrade with what.
type Plan struct {
	// DataDir is the data directory's path, which holds the old major
	// before and the new one after.
	DataDir string
	// OldBinDir and NewBinDir hold the two majors' server programs (the
	// old one's wrappers from CopyServer when it comes from another image).
	OldBinDir, NewBinDir string
	// Mode is how data files are carried; ModeLink when empty.
	Mode Mode
	// SocketDir is where the servers started for the upgrade listen (unix
	// socket only); it must be short (a socket path has 107 bytes at most).
	SocketDir string
	// Port is the port number both servers' sockets use, one at a time.
	Port int
	// Superuser is the data directory's install user (bootstrap superuser).
	Superuser string
	// Jobs is pg_upgrade's --jobs; 1 when zero.
	Jobs int
	// VerifyOptions are added to the new server's command line at its
	// first start (Verify), such as "-c archive_mode=off".
	VerifyOptions []string
	// VerifyConnect opens a session on a database of the new server at its
	// first start, whose pg_hba.conf is the caller's; when nil, the
	// install user over the socket with no password (pg_upgrade's trust).
	VerifyConnect func(ctx context.Context, database string) (*pgx.Conn, error)
	// Run runs a program; RunCommand when nil.
	Run Runner
	Log logr.Logger
}

// Failure is an upgrade that stopped: at which step, why, and whether the
// old major's data directory is back in place and startable.
type Failure struct {
	Step       string
	Reason     string
	RolledBack bool
}

func (f *Failure) Error() string {
	if f.RolledBack {
		return fmt.Sprintf("the upgrade failed at %s and was rolled back, the old data directory is in place: %s", f.Step, f.Reason)
	}
	return fmt.Sprintf("the upgrade failed at %s: %s", f.Step, f.Reason)
}

// State is what the state file beside the data directory holds.
type State struct {
	From    int       `json:"from"`
	To      int       `json:"to"`
	Mode    Mode      `json:"mode"`
	Step    Step      `json:"step"`
	Started time.Time `json:"started"`
	// ExtensionUpdates is the SQL pg_upgrade wrote to bring extensions
	// to the new image's versions, to run once the new server is up.
	ExtensionUpdates string `json:"extensionUpdates,omitempty"`
}

// Paths derived from the data directory: the new major is built beside it,
// the old one waits beside it after the swap, and the state file sits in
// the same volume so every rename stays on one filesystem.
func newDir(dataDir string) string    { return dataDir + ".upgrade" }
func oldDir(dataDir string) string    { return dataDir + ".old" }
func statePath(dataDir string) string { return dataDir + ".upgrade.json" }

// ReadState returns the state of an upgrade in progress on dataDir, or
// nil when there is none.
func ReadState(dataDir string) (*State, error) {
	data, err := os.ReadFile(statePath(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("while reading the upgrade state %s: %w", statePath(dataDir), err)
	}
	return &st, nil
}

func writeState(dataDir string, st State) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomically(statePath(dataDir), data)
}

func (p *Plan) defaults() {
	if p.Mode == "" {
		p.Mode = ModeLink
	}
	if p.Run == nil {
		p.Run = RunCommand
	}
	if p.Jobs == 0 {
		p.Jobs = 1
	}
	if p.Superuser == "" {
		p.Superuser = "postgres"
	}
}

// Upgrade takes the data directory from the old major to the new one, up
// to StepSwapped: the data directory then holds the new major, not yet
// started. It resumes an upgrade interrupted after pg_upgrade finished, and
// undoes one interrupted during pg_upgrade, before starting again. Any
// failure is rolled back and returned as a *Failure.
func Upgrade(ctx context.Context, p Plan) error {
	p.defaults()
	st, err := ReadState(p.DataDir)
	if err != nil {
		return err
	}
	if st != nil {
		switch st.Step {
		case StepSwapped:
			return nil
		case StepCommitted:
			return Commit(p.DataDir)
		case StepUpgraded:
			return p.swap(*st)
		default:
			p.Log.Info("Undoing an upgrade that was interrupted", "step", st.Step)
			if err := Rollback(p.DataDir); err != nil {
				return err
			}
		}
	}
	next, err := p.check(ctx)
	if err != nil {
		return p.fail("the pre-checks", err)
	}
	if err := p.pgUpgrade(ctx, next); err != nil {
		return p.fail("pg_upgrade", err)
	}
	return p.swap(next)
}

// Check runs every pre-check, pg_upgrade --check among them, and leaves
// nothing behind: the old data directory is untouched.
func Check(ctx context.Context, p Plan) error {
	p.defaults()
	st, err := ReadState(p.DataDir)
	if err != nil {
		return err
	}
	if st != nil {
		return fmt.Errorf("an upgrade of %s is already in progress (step %s)", p.DataDir, st.Step)
	}
	if _, err := p.check(ctx); err != nil {
		return p.fail("the pre-checks", err)
	}
	return Rollback(p.DataDir)
}

// fail undoes what the upgrade changed and reports err as a Failure.
func (p *Plan) fail(step string, err error) error {
	var failure *Failure
	if errors.As(err, &failure) {
		return err
	}
	failure = &Failure{Step: step, Reason: err.Error()}
	if rbErr := Rollback(p.DataDir); rbErr != nil {
		failure.Reason += "; rolling back failed too: " + rbErr.Error()
		return failure
	}
	failure.RolledBack = true
	return failure
}

// swap puts the new major at the data directory's path and the old one
// beside it. Each rename is recorded, so a crash between them is finished
// by the next run.
func (p *Plan) swap(st State) error {
	if _, err := os.Stat(newDir(p.DataDir)); err == nil {
		if err := os.Rename(p.DataDir, oldDir(p.DataDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Rename(newDir(p.DataDir), p.DataDir); err != nil {
			return err
		}
	}
	st.Step = StepSwapped
	return writeState(p.DataDir, st)
}

// Commit ends an upgrade whose new server has started: the old data
// directory is removed (in link mode it shares the data files, so only its
// own catalog goes) and rollback is no longer possible. After the first
// write, going back means restoring a backup.
func Commit(dataDir string) error {
	st, err := ReadState(dataDir)
	if err != nil || st == nil {
		return err
	}
	if st.Step != StepSwapped && st.Step != StepCommitted {
		return fmt.Errorf("cannot commit an upgrade at step %s", st.Step)
	}
	// Recorded first: a directory half removed must never be rolled back to.
	st.Step = StepCommitted
	if err := writeState(dataDir, *st); err != nil {
		return err
	}
	if err := os.RemoveAll(oldDir(dataDir)); err != nil {
		return fmt.Errorf("while removing the old data directory: %w", err)
	}
	return os.Remove(statePath(dataDir))
}

// Rollback puts the old major's data directory back at its path, startable
// as it was before the upgrade, and removes what the upgrade built. It
// does nothing when no upgrade is in progress. It must not be called once
// the new server has run with clients: in link mode their writes changed
// the files both directories share.
func Rollback(dataDir string) error {
	st, err := ReadState(dataDir)
	if err != nil || st == nil {
		return err
	}
	if st.Step == StepCommitted {
		return errors.New("the upgrade was committed: the old data directory is gone; restore the backup taken before it instead")
	}
	if _, err := os.Stat(oldDir(dataDir)); err == nil {
		// Swapped: the data directory path holds the new major.
		if err := os.RemoveAll(newDir(dataDir)); err != nil {
			return err
		}
		if err := os.Rename(dataDir, newDir(dataDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Rename(oldDir(dataDir), dataDir); err != nil {
			return err
		}
	}
	// pg_upgrade --link renames the old pg_control so the old server
	// cannot start beside the new one; nothing else of the old directory
	// changed while the new server had no clients.
	control := filepath.Join(dataDir, "global", "pg_control")
	if _, err := os.Stat(control + ".old"); err == nil {
		if err := os.Rename(control+".old", control); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(newDir(dataDir)); err != nil {
		return err
	}
	if err := fsutil.SyncDir(filepath.Dir(dataDir)); err != nil {
		return err
	}
	return os.Remove(statePath(dataDir))
}

// lastLines is the end of a program's output, for an error message.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

// Verify starts the new server on the swapped data directory privately,
// opens every database and reads its catalog, and stops it. Its
// configuration is whatever the data directory holds: the caller writes
// the instance's own first, so a setting the new major refuses fails here,
// while rollback is still possible.
func Verify(ctx context.Context, p Plan) (err error) {
	p.defaults()
	st, err := ReadState(p.DataDir)
	if err != nil {
		return err
	}
	if st == nil || st.Step != StepSwapped {
		return errors.New("no upgraded data directory is waiting to be verified")
	}
	if err := p.startServer(ctx, p.NewBinDir, p.DataDir, p.VerifyOptions...); err != nil {
		return p.fail("the first start of the new server", err)
	}
	defer func() {
		if stopErr := p.stopServer(context.WithoutCancel(ctx), p.NewBinDir, p.DataDir); stopErr != nil && err == nil {
			err = p.fail("stopping the new server", stopErr)
		}
	}()
	if err := p.readEveryCatalog(ctx); err != nil {
		_ = p.stopServer(context.WithoutCancel(ctx), p.NewBinDir, p.DataDir)
		return p.fail("reading the new server's databases", err)
	}
	return nil
}

// readEveryCatalog connects to each database of the running server and
// reads its catalog, never a user table (whose files, in link mode, the
// old directory shares).
func (p *Plan) readEveryCatalog(ctx context.Context) error {
	connect := p.VerifyConnect
	if connect == nil {
		connect = p.connect
	}
	conn, err := connect(ctx, "template1")
	if err != nil {
		return err
	}
	var databases []string
	err = collect(ctx, conn, &databases, `SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname`)
	_ = conn.Close(ctx)
	if err != nil {
		return err
	}
	for _, db := range databases {
		dbConn, err := connect(ctx, db)
		if err != nil {
			return err
		}
		var n int64
		err = dbConn.QueryRow(ctx, `SELECT count(*) FROM pg_class`).Scan(&n)
		_ = dbConn.Close(ctx)
		if err != nil {
			return fmt.Errorf("while reading the catalog of database %s: %w", db, err)
		}
	}
	return nil
}
