package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instance/lifecycle"
	"tusk.dev/tusk/internal/instance/pgupgrade"
	"tusk.dev/tusk/internal/instanceapi"
)

// UpgradeOptions make the manager upgrade an older major's data directory
// to its image's major before it starts postgres (the operator sets them on
// the primary's pod during a major upgrade).
type UpgradeOptions struct {
	// OldCopy is where the old image's init container copied its server
	// (tusk instance copy-binaries).
	OldCopy string
	// Mode is pg_upgrade's transfer mode.
	Mode pgupgrade.Mode
	// Attempt names this attempt: a failed attempt is not run again by a
	// restarted manager, only by a pod with another attempt's name.
	Attempt string
}

// errUpgradeFailed stops the manager's start: postgres stays stopped and
// the manager keeps serving its status until the pod is replaced.
var errUpgradeFailed = errors.New("the major upgrade failed")

// resolveUpgrade runs before the bootstrap. It finishes, undoes or starts
// a major upgrade of the data directory, so that what follows finds a data
// directory of the image's major or none, and refuses to go on with any
// other.
func (m *Manager) resolveUpgrade(ctx context.Context) error {
	if err := dataDirReadable(m.opts.DataDir); err != nil {
		if m.opts.Upgrade == nil {
			return err
		}
		report := &instanceapi.UpgradeStatus{Attempt: m.opts.Upgrade.Attempt, To: m.opts.MajorVersion}
		return m.upgradeFailed(report, &pgupgrade.Failure{Step: "reading the data directory", Reason: err.Error(), RolledBack: true})
	}
	st, err := pgupgrade.ReadState(m.opts.DataDir)
	if err != nil {
		return err
	}
	if st != nil && st.To != m.opts.MajorVersion {
		if st.From != m.opts.MajorVersion {
			return fmt.Errorf("an upgrade from PostgreSQL %d to %d is unfinished on this volume; run an image of one of them, not %d",
				st.From, st.To, m.opts.MajorVersion)
		}
		// Back on the old image: the upgrade was given up before its
		// commit, so the old directory is intact.
		m.log.Info("Rolling back an unfinished upgrade", "from", st.From, "to", st.To, "step", st.Step)
		if err := pgupgrade.Rollback(m.opts.DataDir); err != nil {
			return fmt.Errorf("while rolling back the unfinished upgrade to %d: %w", st.To, err)
		}
		st = nil
	}
	if st != nil && st.Step == pgupgrade.StepCommitted {
		// The new server ran: only the old directory's removal was left.
		m.log.Info("Finishing the commit of an upgrade", "from", st.From, "to", st.To)
		return pgupgrade.Commit(m.opts.DataDir)
	}
	dataMajor := dataDirMajor(m.opts.DataDir)
	if st == nil {
		switch {
		case dataMajor == 0 || dataMajor == m.opts.MajorVersion:
			return nil
		case dataMajor > m.opts.MajorVersion:
			return m.newerDataDir(dataMajor)
		case m.opts.Upgrade == nil:
			return fmt.Errorf("the data directory is PostgreSQL %d and this image is %d: a major upgrade (pg_upgrade) is needed, "+
				"which the operator runs when spec.image names the newer major", dataMajor, m.opts.MajorVersion)
		}
	}
	if m.opts.Upgrade == nil {
		return fmt.Errorf("an upgrade to PostgreSQL %d is unfinished on this volume and the pod has no old server to finish it with", st.To)
	}
	if st != nil {
		dataMajor = st.From
	}
	return m.upgrade(ctx, dataMajor)
}

// newerDataDir refuses a data directory of a newer major, and says so in
// the status rather than by exiting: the operator, rolling back an
// upgrade whose commit it never heard of, learns from it that the upgrade
// was done and goes forward.
func (m *Manager) newerDataDir(dataMajor int) error {
	err := fmt.Errorf("the data directory is PostgreSQL %d, newer than this image's %d: a major version never goes back; "+
		"run an image of %d, or restore a backup taken before the upgrade into a new cluster", dataMajor, m.opts.MajorVersion, dataMajor)
	m.log.Error(err, "Refusing the data directory")
	m.setUpgrade(&instanceapi.UpgradeStatus{To: dataMajor, Step: string(pgupgrade.StepCommitted), NewerData: dataMajor}, lifecycle.UpgradeFailed)
	m.setError(err)
	return errUpgradeFailed
}

// dataDirReadable refuses a data directory another user owns: an image
// whose postgres user differs from the one that wrote it (the upgrade's
// new image, say) can neither read nor upgrade it.
func dataDirReadable(dir string) error {
	if _, err := readDataDir(dir); errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("the data directory %s belongs to another user than this image's (uid %d): "+
			"images that run one cluster must run as the same user; set spec.postgresUID and spec.postgresGID", dir, os.Getuid())
	}
	return nil
}

// readDataDir lists a directory; tests, which run as root, make it fail as
// another user's would.
var readDataDir = os.ReadDir

// dataDirMajor is the PG_VERSION of dir, 0 when there is none.
func dataDirMajor(dir string) int {
	data, err := os.ReadFile(filepath.Join(dir, "PG_VERSION")) //nolint:gosec // the data directory
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return n
}

// upgrade runs the attempt: pg_upgrade, the new server's first start with
// this instance's own configuration (archiving off: the new system's WAL
// must not go into the old one's archive before the commit), the commit.
// Any failure before the commit is rolled back and recorded, and the
// manager then waits with postgres stopped.
func (m *Manager) upgrade(ctx context.Context, from int) error {
	o := m.opts.Upgrade
	report := &instanceapi.UpgradeStatus{Attempt: o.Attempt, From: from, To: m.opts.MajorVersion}
	if failed, ok := m.failedUpgrade(); ok && failed.Attempt == o.Attempt {
		m.setUpgrade(failed, lifecycle.UpgradeFailed)
		return errUpgradeFailed
	}
	old, err := pgupgrade.ReadOldBinaries(o.OldCopy)
	if err != nil {
		return m.upgradeFailed(report, &pgupgrade.Failure{Step: "finding the old server", Reason: err.Error(), RolledBack: true})
	}
	plan := pgupgrade.Plan{DataDir: m.opts.DataDir, OldBinDir: old.BinDir, NewBinDir: m.opts.BinDir, Mode: o.Mode,
		SocketDir: m.opts.SocketDir, Port: m.opts.Port, Superuser: superuser, Run: m.runUpgradeTool, Log: m.log,
		VerifyOptions: []string{"-c archive_mode=off"}, VerifyConnect: m.connectDatabase}
	steps := []struct {
		name string
		run  func() error
	}{
		{string(pgupgrade.StepSwapped), func() error { return pgupgrade.Upgrade(ctx, plan) }},
		{"Verified", func() error { return m.verifyUpgrade(ctx, plan) }},
	}
	m.setUpgrade(report, lifecycle.Upgrading)
	m.log.Info("Upgrading the data directory", "from", from, "to", m.opts.MajorVersion, "mode", plan.Mode, "attempt", o.Attempt)
	for _, step := range steps {
		if err := step.run(); err != nil {
			return m.upgradeFailed(report, err)
		}
		report.Step = step.name
		m.setUpgrade(report, lifecycle.Upgrading)
	}
	st, err := pgupgrade.ReadState(m.opts.DataDir)
	if err != nil {
		return err
	}
	if err := pgupgrade.Commit(m.opts.DataDir); err != nil {
		return err
	}
	report.Step = string(pgupgrade.StepCommitted)
	m.setUpgrade(report, lifecycle.Bootstrapping)
	m.log.Info("Upgraded the data directory", "to", m.opts.MajorVersion)
	_ = os.Remove(failedUpgradePath(m.opts.DataDir))
	if st != nil {
		m.mu.Lock()
		m.postUpgradeSQL = st.ExtensionUpdates
		m.mu.Unlock()
	}
	go m.afterUpgrade(ctx)
	return nil
}

// verifyUpgrade writes this instance's configuration into the new data
// directory and starts it there once, privately.
func (m *Manager) verifyUpgrade(ctx context.Context, plan pgupgrade.Plan) error {
	st := m.snapshot()
	st.role = instanceapi.RolePrimary
	if err := m.writeConfig(st); err != nil {
		return errors.Join(err, pgupgrade.Rollback(m.opts.DataDir))
	}
	return pgupgrade.Verify(ctx, plan)
}

// upgradeFailed records a failed attempt beside the data directory (so a
// restarted manager does not run it again) and in the status.
func (m *Manager) upgradeFailed(report *instanceapi.UpgradeStatus, err error) error {
	report.Failed, report.Reason = true, err.Error()
	var failure *pgupgrade.Failure
	if errors.As(err, &failure) {
		report.RolledBack, report.Reason = failure.RolledBack, failure.Step+": "+failure.Reason
	}
	m.log.Error(err, "The major upgrade failed", "rolledBack", report.RolledBack)
	if data, jerr := json.Marshal(report); jerr == nil {
		if werr := writeFileAtomic(failedUpgradePath(m.opts.DataDir), data); werr != nil {
			m.log.Error(werr, "Recording the failed upgrade")
		}
	}
	m.setUpgrade(report, lifecycle.UpgradeFailed)
	m.setError(err)
	return errUpgradeFailed
}

// failedUpgradePath is where the last failed attempt is recorded: beside
// the data directory, on the same volume.
func failedUpgradePath(dataDir string) string { return dataDir + ".upgrade-failed.json" }

func (m *Manager) failedUpgrade() (*instanceapi.UpgradeStatus, bool) {
	data, err := os.ReadFile(failedUpgradePath(m.opts.DataDir))
	if err != nil {
		return nil, false
	}
	var report instanceapi.UpgradeStatus
	if json.Unmarshal(data, &report) != nil {
		return nil, false
	}
	return &report, true
}

// setUpgrade reports the upgrade, and records e in the lifecycle.
func (m *Manager) setUpgrade(report *instanceapi.UpgradeStatus, e lifecycle.Event) {
	copied := *report
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state.upgrade = &copied
	m.recordLocked(e)
}

// runUpgradeTool is pgupgrade's Runner for a manager that is PID 1: its
// reaper waits for the children.
func (m *Manager) runUpgradeTool(ctx context.Context, dir string, env []string, program string, args ...string) (string, error) {
	return m.runToolIn(ctx, dir, append(pgupgrade.CleanEnv(), env...), program, args...)
}

// afterUpgrade runs, once postgres accepts connections after a committed
// upgrade, what pg_upgrade leaves to do: the extension updates it wrote,
// and planner statistics, which pg_upgrade does not carry before 18 and
// carries without extended statistics from 18 on. Failures are logged:
// the cluster serves without them, only slower until autovacuum analyzes.
func (m *Manager) afterUpgrade(ctx context.Context) {
	if err := m.waitStartedAndRunning(ctx); err != nil {
		return
	}
	m.mu.Lock()
	updates := m.postUpgradeSQL
	m.mu.Unlock()
	if updates != "" {
		m.log.Info("Updating extensions to the new image's versions")
		if err := m.runExtensionUpdates(ctx, updates); err != nil {
			m.log.Error(err, "Updating extensions after the upgrade; run the statements by hand", "statements", updates)
		}
	}
	m.log.Info("Analyzing every database after the upgrade")
	if err := m.analyzeAfterUpgrade(ctx); err != nil {
		m.log.Error(err, "Analyzing after the upgrade; autovacuum will analyze in time")
		return
	}
	m.log.Info("Analyzed every database after the upgrade")
}

// runExtensionUpdates runs pg_upgrade's update_extensions.sql, a psql
// script of \connect lines and ALTER EXTENSION statements.
func (m *Manager) runExtensionUpdates(ctx context.Context, script string) error {
	database := "postgres"
	for _, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		if db, ok := strings.CutPrefix(line, `\connect `); ok {
			database = strings.Trim(strings.TrimSpace(db), `"`)
			continue
		}
		if !strings.HasPrefix(line, "ALTER EXTENSION") {
			continue
		}
		conn, err := m.connectDatabase(ctx, database)
		if err != nil {
			return err
		}
		_, err = conn.Exec(ctx, line)
		_ = conn.Close(ctx)
		if err != nil {
			return fmt.Errorf("while running %q in %s: %w", line, database, err)
		}
	}
	return nil
}

// analyzeAfterUpgrade gives every database planner statistics: in three
// passes of growing detail before 18 (vacuumdb --analyze-in-stages: usable
// plans soon, good ones later), only where some are missing from 18 on.
func (m *Manager) analyzeAfterUpgrade(ctx context.Context) error {
	conn, err := m.connect(ctx)
	if err != nil {
		return err
	}
	var databases []string
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname`)
	if err == nil {
		databases, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	_ = conn.Close(ctx)
	if err != nil {
		return err
	}
	for _, db := range databases {
		if err := m.analyzeDatabase(ctx, db); err != nil {
			return fmt.Errorf("while analyzing database %s: %w", db, err)
		}
	}
	return nil
}

// missingStatistics lists the relations of a database that have no
// statistics, or extended statistics objects without data.
const missingStatistics = `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE c.relkind IN ('r', 'm', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
	AND (NOT EXISTS (SELECT 1 FROM pg_statistic s WHERE s.starelid = c.oid)
	  OR EXISTS (SELECT 1 FROM pg_statistic_ext e WHERE e.stxrelid = c.oid
	    AND NOT EXISTS (SELECT 1 FROM pg_statistic_ext_data d WHERE d.stxoid = e.oid)))`

func (m *Manager) analyzeDatabase(ctx context.Context, db string) error {
	conn, err := m.connectDatabase(ctx, db)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	if m.opts.MajorVersion >= 18 {
		rows, err := conn.Query(ctx, missingStatistics)
		if err != nil {
			return err
		}
		relations, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, rel := range relations {
			if _, err := conn.Exec(ctx, "ANALYZE "+rel); err != nil {
				return err
			}
		}
		return nil
	}
	for _, stage := range []string{"SET default_statistics_target = 1", "SET default_statistics_target = 10", "RESET default_statistics_target"} {
		if _, err := conn.Exec(ctx, stage); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
			return err
		}
	}
	return nil
}
