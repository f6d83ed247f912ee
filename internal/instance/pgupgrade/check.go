package pgupgrade

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instance/pgbin"
)

// Runner runs program with args in dir, with env added to a clean
// environment, and returns its combined output. An error quotes the end
// of that output.
type Runner func(ctx context.Context, dir string, env []string, program string, args ...string) (string, error)

// RunCommand is the Runner of a process that reaps its own children.
func RunCommand(ctx context.Context, dir string, env []string, program string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, program, args...) //nolint:gosec // PostgreSQL's own programs
	cmd.Dir = dir
	cmd.Env = append(CleanEnv(), env...)
	out, err := cmd.CombinedOutput() //nolint:forbidigo // RunCommand is for a process without a reaper
	if err != nil {
		return string(out), fmt.Errorf("%s failed (%w): %s", filepath.Base(program), err, lastLines(string(out), 5))
	}
	return string(out), nil
}

// CleanEnv is this process's environment without what would steer
// PostgreSQL's programs elsewhere: libpq's and pg_upgrade's PG* variables,
// and a library path meant for other programs.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LD_LIBRARY_PATH=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// oldCluster is what the pre-checks read from the old server.
type oldCluster struct {
	major                     int
	superuser                 string
	encoding, collate, ctype  string
	localeProvider, icuLocale string
	checksums                 bool
	walSegmentBytes           int64
}

// check runs the pre-checks and pg_upgrade --check, leaving the new data
// directory initialised beside the old one.
func (p *Plan) check(ctx context.Context) (State, error) {
	from, to, err := p.majors(ctx)
	if err != nil {
		return State{}, err
	}
	old, err := p.inspectOld(ctx, from)
	if err != nil {
		return State{}, err
	}
	p.Superuser = old.superuser
	if err := p.checkSpace(); err != nil {
		return State{}, err
	}
	st := State{From: from, To: to, Mode: p.Mode, Step: StepChecking, Started: time.Now().UTC()}
	if err := writeState(p.DataDir, st); err != nil {
		return State{}, err
	}
	if err := os.RemoveAll(newDir(p.DataDir)); err != nil {
		return State{}, err
	}
	if err := p.initNew(ctx, old, to); err != nil {
		return State{}, err
	}
	if err := p.pgUpgradeCommand(ctx, "--check"); err != nil {
		return State{}, err
	}
	st.Step = StepChecked
	return st, writeState(p.DataDir, st)
}

// majors reads the data directory's major and the two programs' majors.
func (p *Plan) majors(ctx context.Context) (from, to int, err error) {
	version, err := os.ReadFile(filepath.Join(p.DataDir, "PG_VERSION"))
	if err != nil {
		return 0, 0, fmt.Errorf("%s is not a PostgreSQL data directory: %w", p.DataDir, err)
	}
	from, err = strconv.Atoi(strings.TrimSpace(string(version)))
	if err != nil {
		return 0, 0, fmt.Errorf("cannot read PG_VERSION of %s: %w", p.DataDir, err)
	}
	oldMajor, err := p.programMajor(ctx, p.OldBinDir)
	if err != nil {
		return 0, 0, fmt.Errorf("the old server's programs in %s do not run here: %w", p.OldBinDir, err)
	}
	to, err = p.programMajor(ctx, p.NewBinDir)
	if err != nil {
		return 0, 0, err
	}
	switch {
	case oldMajor != from:
		return 0, 0, fmt.Errorf("the old programs are PostgreSQL %d but the data directory is %d", oldMajor, from)
	case to <= from:
		return 0, 0, fmt.Errorf("PostgreSQL %d is not newer than the data directory's %d", to, from)
	}
	for _, signal := range []string{"standby.signal", "recovery.signal"} {
		if _, err := os.Stat(filepath.Join(p.DataDir, signal)); err == nil {
			return 0, 0, fmt.Errorf("%s has %s: only a primary's data directory is upgraded, replicas are cloned again", p.DataDir, signal)
		}
	}
	return from, to, nil
}

// programMajor asks the server in binDir for its major version through
// p.Run, as every child of the upgrade is started: in the instance manager,
// a child started any other way can be reaped by its reaper before it is
// waited for.
func (p *Plan) programMajor(ctx context.Context, binDir string) (int, error) {
	out, err := p.Run(ctx, filepath.Dir(p.DataDir), nil, filepath.Join(binDir, "postgres"), "--version")
	if err != nil {
		return 0, fmt.Errorf("while asking postgres for its version: %w", err)
	}
	return pgbin.ParseMajorVersion(out)
}

// inspectOld starts the old server privately (which also finishes a crash
// recovery, as pg_upgrade needs a clean shutdown), reads what the new data
// directory must match, runs the pre-checks pg_upgrade lacks, and stops it.
func (p *Plan) inspectOld(ctx context.Context, major int) (old oldCluster, err error) {
	if err := writeUpgradeConfig(p.DataDir); err != nil {
		return old, err
	}
	// Prepared transactions are recovered at start and need their slots:
	// the setting they were made with is in pg_control.
	prepared, err := p.controlDataField(ctx, p.OldBinDir, p.DataDir, "max_prepared_xacts setting")
	if err != nil {
		return old, err
	}
	if err := p.startServer(ctx, p.OldBinDir, p.DataDir, "-c max_prepared_transactions="+prepared); err != nil {
		return old, fmt.Errorf("the old server does not start: %w", err)
	}
	defer func() { err = errors.Join(err, p.stopServer(context.WithoutCancel(ctx), p.OldBinDir, p.DataDir)) }()
	conn, err := p.connect(ctx, "template1")
	if err != nil {
		return old, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	old.major = major
	if err := readOldCluster(ctx, conn, &old); err != nil {
		return old, err
	}
	return old, p.preChecks(ctx, conn, old)
}

func readOldCluster(ctx context.Context, conn *pgx.Conn, old *oldCluster) error {
	icuColumn := "''"
	switch {
	case old.major >= 17:
		icuColumn = "coalesce(datlocale, '')"
	case old.major >= 15:
		icuColumn = "coalesce(daticulocale, '')"
	}
	provider := "'c'"
	if old.major >= 15 {
		provider = "datlocprovider::text"
	}
	row := conn.QueryRow(ctx, `SELECT pg_encoding_to_char(encoding), datcollate, datctype, `+provider+`, `+icuColumn+`,
		(SELECT rolname FROM pg_roles WHERE oid = 10), current_setting('data_checksums') = 'on',
		(SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size')
		FROM pg_database WHERE datname = 'template0'`)
	if err := row.Scan(&old.encoding, &old.collate, &old.ctype, &old.localeProvider, &old.icuLocale,
		&old.superuser, &old.checksums, &old.walSegmentBytes); err != nil {
		return fmt.Errorf("while reading the old cluster's settings: %w", err)
	}
	return nil
}

// preChecks refuses, before anything changes, what would make pg_upgrade
// fail late or lose something quietly.
func (p *Plan) preChecks(ctx context.Context, conn *pgx.Conn, old oldCluster) error {
	if err := OnlineChecks(ctx, conn, old.major); err != nil {
		return err
	}
	return p.checkExtensions(ctx, conn)
}

// OnlineChecks are the pre-checks a running server of major can answer
// by itself: the instance manager runs them on the serving primary before
// the operator stops anything, and again on the stopped data directory.
func OnlineChecks(ctx context.Context, conn *pgx.Conn, major int) error {
	var prepared []string
	if err := collect(ctx, conn, &prepared, `SELECT gid || ' (database ' || database || ')' FROM pg_prepared_xacts`); err != nil {
		return err
	}
	if len(prepared) > 0 {
		return fmt.Errorf("prepared transactions are open: %s; commit or roll them back (COMMIT PREPARED / ROLLBACK PREPARED) first",
			strings.Join(prepared, ", "))
	}
	if major < 17 {
		var slots []string
		if err := collect(ctx, conn, &slots, `SELECT slot_name FROM pg_replication_slots WHERE slot_type = 'logical'`); err != nil {
			return err
		}
		if len(slots) > 0 {
			return fmt.Errorf("logical replication slots %s exist: pg_upgrade from PostgreSQL %d does not carry them, and their subscribers "+
				"would stop; drop the subscriptions that read from this cluster first, or upgrade by logical replication", strings.Join(slots, ", "), major)
		}
	}
	return nil
}

// checkExtensions refuses an extension of any database that the new
// image does not have.
func (p *Plan) checkExtensions(ctx context.Context, conn *pgx.Conn) error {
	var databases []string
	if err := collect(ctx, conn, &databases, `SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname`); err != nil {
		return err
	}
	shareDir, err := p.newShareDir(ctx)
	if err != nil {
		return err
	}
	var missing []string
	for _, db := range databases {
		dbConn, err := p.connect(ctx, db)
		if err != nil {
			return err
		}
		var extensions []string
		err = collect(ctx, dbConn, &extensions, `SELECT extname FROM pg_extension ORDER BY extname`)
		_ = dbConn.Close(ctx)
		if err != nil {
			return err
		}
		for _, ext := range extensions {
			if _, err := os.Stat(filepath.Join(shareDir, "extension", ext+".control")); err != nil {
				missing = append(missing, fmt.Sprintf("%s (database %s)", ext, db))
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the new image lacks extensions in use: %s; use an image that has them, or drop them first", strings.Join(missing, ", "))
	}
	return nil
}

// newShareDir is the new server's share directory (extension control
// files), by the same layouts CopyServer knows.
func (p *Plan) newShareDir(ctx context.Context) (string, error) {
	major, err := p.programMajor(ctx, p.NewBinDir)
	if err != nil {
		return "", err
	}
	binDir := p.NewBinDir
	if server, err := filepath.EvalSymlinks(filepath.Join(p.NewBinDir, "postgres")); err == nil {
		binDir = filepath.Dir(server)
	}
	dirs := serverDirs(binDir, major)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "extension")); err == nil {
			return dirs[i], nil
		}
	}
	return filepath.Join(filepath.Dir(p.NewBinDir), "share"), nil
}

func collect(ctx context.Context, conn *pgx.Conn, out *[]string, query string) error {
	rows, err := conn.Query(ctx, query)
	if err != nil {
		return err
	}
	values, err := pgx.CollectRows(rows, pgx.RowTo[string])
	*out = values
	return err
}

// checkSpace refuses an upgrade the volume has no room for: the new
// catalogs and WAL, and in copy mode every data file again.
func (p *Plan) checkSpace() error {
	total, userFiles, err := dataSize(p.DataDir)
	if err != nil {
		return err
	}
	need := total - userFiles + spaceMargin
	if p.Mode == ModeCopy {
		need = total + spaceMargin
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(p.DataDir), &fs); err != nil {
		return err
	}
	free := int64(fs.Bavail) * fs.Bsize //nolint:gosec // block counts fit
	if free < need {
		return fmt.Errorf("the volume has %d MiB free and a %s upgrade needs about %d MiB; grow the volume (spec.storage.size) first",
			free>>20, p.Mode, need>>20)
	}
	return nil
}

// spaceMargin covers the new cluster's WAL and pg_upgrade's own files.
const spaceMargin = 256 << 20

// dataSize is the size of the data directory and of the part of it that is
// user relation files (which link and clone modes do not copy).
func dataSize(dir string) (total, userFiles int64, err error) {
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		total += info.Size()
		if isUserRelationFile(dir, path) {
			userFiles += info.Size()
		}
		return nil
	})
	return total, userFiles, err
}

// isUserRelationFile says whether path is a user relation's file under
// base/<database>/: its relfilenode (before any _fsm/_vm/.segment suffix)
// is at least FirstNormalObjectId, 16384.
func isUserRelationFile(dataDir, path string) bool {
	rel, err := filepath.Rel(filepath.Join(dataDir, "base"), path)
	if err != nil || strings.HasPrefix(rel, "..") || strings.Count(rel, string(filepath.Separator)) != 1 {
		return false
	}
	name := filepath.Base(rel)
	name, _, _ = strings.Cut(name, "_")
	name, _, _ = strings.Cut(name, ".")
	n, err := strconv.ParseUint(name, 10, 32)
	return err == nil && n >= 16384
}

// initNew creates the new data directory with what pg_upgrade requires to
// match the old one.
func (p *Plan) initNew(ctx context.Context, old oldCluster, to int) error {
	args := []string{"-D", newDir(p.DataDir), "--username=" + old.superuser, "--auth=trust", "--no-instructions",
		"--encoding=" + old.encoding, "--lc-collate=" + old.collate, "--lc-ctype=" + old.ctype,
		fmt.Sprintf("--wal-segsize=%d", old.walSegmentBytes>>20)}
	switch {
	case old.checksums:
		args = append(args, "--data-checksums")
	case to >= 18:
		args = append(args, "--no-data-checksums") // on by default from 18
	}
	switch old.localeProvider {
	case "i":
		args = append(args, "--locale-provider=icu", "--icu-locale="+old.icuLocale)
	case "b":
		args = append(args, "--locale-provider=builtin", "--builtin-locale="+old.icuLocale)
	}
	if _, err := p.Run(ctx, filepath.Dir(p.DataDir), nil, filepath.Join(p.NewBinDir, "initdb"), args...); err != nil {
		return err
	}
	return writeUpgradeConfig(newDir(p.DataDir))
}

// writeUpgradeConfig gives a data directory the configuration the servers
// pg_upgrade starts need: no TCP listener, local connections trusted (the
// socket directory is private), none of the instance's own settings (its
// archive command, TLS files and log pipes are not there during an
// upgrade). The instance manager writes the real files again before the
// next start, whichever major it is.
func writeUpgradeConfig(dir string) error {
	files := map[string]string{
		"postgresql.conf":      "# Written by Tusk for pg_upgrade.\nlisten_addresses = ''\n",
		"pg_hba.conf":          "# Written by Tusk for pg_upgrade: the socket directory is private.\nlocal all all trust\n",
		"postgresql.auto.conf": "",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// pgUpgradeCommand runs the new major's pg_upgrade from the volume's
// directory (where it leaves its scripts); an error carries pg_upgrade's
// own explanation.
func (p *Plan) pgUpgradeCommand(ctx context.Context, extra ...string) error {
	args := []string{"--old-bindir=" + p.OldBinDir, "--new-bindir=" + p.NewBinDir,
		"--old-datadir=" + p.DataDir, "--new-datadir=" + newDir(p.DataDir),
		"--username=" + p.Superuser, "--socketdir=" + p.SocketDir,
		"--old-port=" + strconv.Itoa(p.Port), "--new-port=" + strconv.Itoa(p.Port),
		"--jobs=" + strconv.Itoa(p.Jobs)}
	out, err := p.Run(ctx, filepath.Dir(p.DataDir), nil, filepath.Join(p.NewBinDir, "pg_upgrade"), append(args, extra...)...)
	if err != nil {
		return errors.New(pgUpgradeReason(out, err))
	}
	return nil
}

// pgUpgradeReason is what pg_upgrade printed from its first failed check
// on (that line ends in "fatal" or says "failed check", then come the
// reasons), with the lists of problem objects it writes into files quoted
// inline; or, when a program it ran failed, the end of the log it names.
// Both files are in the new data directory, so they are read here, before
// a rollback removes it.
func pgUpgradeReason(out string, err error) string {
	if m := consultLog.FindStringSubmatch(out); m != nil {
		return fmt.Sprintf("pg_upgrade: %s; the end of %s: %s", lastLines(strings.ReplaceAll(out, m[0], ""), 3), filepath.Base(m[1]), tailFile(m[1], 5))
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i, line := range lines {
		if !strings.HasSuffix(strings.TrimSpace(line), "fatal") && !strings.Contains(line, "failed check") {
			continue
		}
		var why []string
		for _, l := range lines[i:] {
			l = strings.Join(strings.Fields(l), " ")
			switch {
			case l == "" || l == "Failure, exiting":
			case problemList.MatchString(l):
				why = append(why, "("+strings.ReplaceAll(headFile(l, 10), "\n", "; ")+")")
			default:
				why = append(why, l)
			}
		}
		return "pg_upgrade: " + strings.Join(why, " ")
	}
	return err.Error()
}

// problemList is a file of problem objects pg_upgrade names on a line of
// its own.
var problemList = regexp.MustCompile(`^/\S+\.txt$`)

func headFile(path string, n int) string {
	data, err := os.ReadFile(path) //nolint:gosec // a file pg_upgrade named
	if err != nil {
		return path
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("and %d more", len(lines)-n))
	}
	return strings.Join(lines, "\n")
}

var consultLog = regexp.MustCompile(`Consult the last few lines of "([^"]+)"[^\n]*`)

// pgUpgrade runs pg_upgrade for real after the checks passed.
func (p *Plan) pgUpgrade(ctx context.Context, st State) error {
	st.Step = StepUpgrading
	if err := writeState(p.DataDir, st); err != nil {
		return err
	}
	if err := p.pgUpgradeCommand(ctx, "--"+string(p.Mode)); err != nil {
		return err
	}
	// pg_upgrade leaves a script to delete the old cluster (Commit does
	// that) and, from 16 on, one to update extensions (the caller runs it
	// once the new server is up).
	work := filepath.Dir(p.DataDir)
	_ = os.Remove(filepath.Join(work, "delete_old_cluster.sh"))
	if sql, err := os.ReadFile(filepath.Join(work, "update_extensions.sql")); err == nil { //nolint:gosec // pg_upgrade's own output
		st.ExtensionUpdates = string(sql)
		_ = os.Remove(filepath.Join(work, "update_extensions.sql"))
	}
	st.Step = StepUpgraded
	return writeState(p.DataDir, st)
}

// startServer starts the server of binDir on dir, privately, and waits
// until it accepts connections.
func (p *Plan) startServer(ctx context.Context, binDir, dir string, options ...string) error {
	opts := fmt.Sprintf("-c listen_addresses='' -c unix_socket_directories='%s' -c port=%d", p.SocketDir, p.Port)
	logFile := dir + ".server.log"
	_, err := p.Run(ctx, filepath.Dir(dir), nil, filepath.Join(binDir, "pg_ctl"), "start", "--wait", "--timeout=600",
		"-D", dir, "-l", logFile, "-o", strings.Join(append([]string{opts}, options...), " "))
	if err != nil {
		err = fmt.Errorf("%w; the server's log: %s", err, tailFile(logFile, 5))
	}
	_ = os.Remove(logFile)
	return err
}

// controlDataField reads one field of pg_controldata's report on dir.
func (p *Plan) controlDataField(ctx context.Context, binDir, dir, field string) (string, error) {
	out, err := p.Run(ctx, filepath.Dir(dir), []string{"LC_ALL=C"}, filepath.Join(binDir, "pg_controldata"), "-D", dir)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if name, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == field {
			return strings.TrimSpace(value), nil
		}
	}
	return "", fmt.Errorf("pg_controldata does not report %q for %s", field, dir)
}

func (p *Plan) stopServer(ctx context.Context, binDir, dir string) error {
	_, err := p.Run(ctx, filepath.Dir(dir), nil, filepath.Join(binDir, "pg_ctl"), "stop", "--wait", "--timeout=600", "-m", "fast", "-D", dir)
	return err
}

func tailFile(path string, n int) string {
	data, err := os.ReadFile(path) //nolint:gosec // a log this package asked for
	if err != nil {
		return "(none: " + err.Error() + ")"
	}
	return lastLines(string(data), n)
}

// connect opens a session on the private server as the install user.
func (p *Plan) connect(ctx context.Context, database string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Database = p.SocketDir, uint16(p.Port), p.Superuser, database //nolint:gosec // a port number
	cfg.RuntimeParams = map[string]string{"application_name": "tusk-upgrade"}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("while connecting to the server started for the upgrade: %w", err)
	}
	return conn, nil
}
