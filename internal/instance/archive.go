package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instance/pgconf"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/walarchive"
)

// DefaultArchiveTimeout is archive_timeout when archiving: a quiet
// primary's last commits reach the archive within a minute, at the cost of
// one (mostly empty, well compressed) segment per minute.
const DefaultArchiveTimeout = 60 * time.Second

// WALArchiveOptions turn continuous WAL archiving on.
type WALArchiveOptions struct {
	// Config is where the archive is; the manager writes it into its run
	// directory for the archive command to read. Its credentials stay in
	// the files it names (a mounted Secret).
	Config walarchive.Config
	// Binary is the tusk binary postgres runs as archive_command
	// (`<Binary> instance wal-archive --config <file> %p`): in a pod, the
	// copy the init container made, which is also what runs the manager.
	Binary string
	// Timeout is archive_timeout; DefaultArchiveTimeout when zero.
	Timeout time.Duration
}

func (o *WALArchiveOptions) validate() error {
	if o == nil {
		return nil
	}
	var errs []error
	if !filepath.IsAbs(o.Binary) {
		errs = append(errs, fmt.Errorf("WAL archiving needs the tusk binary's absolute path, got %q", o.Binary))
	}
	if o.Config.ObjectStore.Endpoint == "" || o.Config.ObjectStore.Bucket == "" {
		errs = append(errs, errors.New("WAL archiving needs an object store endpoint and bucket"))
	}
	if o.Config.Cluster == "" {
		errs = append(errs, errors.New("WAL archiving needs the cluster's name"))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("archive timeout %s is negative", o.Timeout))
	}
	return errors.Join(errs...)
}

// walArchiveConfigPath is the archive command's configuration file.
func (m *Manager) walArchiveConfigPath() string {
	return filepath.Join(m.opts.RunDir, "wal-archive.json")
}

// configureArchiving writes the archive command's configuration (0600, in
// the run directory) and sets archive_command and archive_timeout in conf.
// Replicas get the same settings: archive_mode needs a restart to change,
// so a replica ready to archive is one a promotion makes archive at once.
// A standby itself archives nothing with archive_mode = on, and gets no
// restore_command: it streams from the primary, and a restore_command
// whose store is unreachable would stop its recovery (see docs/backup.md).
func (m *Manager) configureArchiving(conf *pgconf.ServerConfig, dataDir string) error {
	wa := m.opts.WALArchive
	if wa == nil {
		return nil
	}
	cfg := wa.Config
	var err error
	if cfg.SystemIdentifier, err = m.systemIdentifier(dataDir); err != nil {
		return fmt.Errorf("while reading the system identifier the archive's location is claimed for: %w", err)
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("while encoding the WAL archive configuration: %w", err)
	}
	if err := writeFileAtomic(m.walArchiveConfigPath(), data); err != nil {
		return err
	}
	// The manager archives ahead (walWatcher); archive_command waits for
	// its record, and archives the file itself only when the manager could
	// not, one file at a time: archiving ahead is the manager's job.
	archive := shellQuote(wa.Binary) + " instance wal-archive --config " + shellQuote(m.walArchiveConfigPath()) + " --parallel 1 %p"
	conf.ArchiveCommand = walarchive.WaitingArchiveCommand(archive, walarchive.DefaultWaitForWatcher)
	timeout := wa.Timeout
	if timeout == 0 {
		timeout = DefaultArchiveTimeout
	}
	conf.ArchiveTimeout = strconv.FormatInt(int64(timeout/time.Second), 10) + "s"
	return nil
}

// systemIdentifier is the database system identifier of the data
// directory dir, from pg_control.
func (m *Manager) systemIdentifier(dir string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cd, err := m.readControlData(ctx, dir)
	if err != nil {
		return "", err
	}
	id := cd.systemID
	if id == "" {
		return "", fmt.Errorf("pg_controldata -D %s printed no database system identifier", dir)
	}
	return id, nil
}

// shellQuote quotes s for the shell PostgreSQL runs archive_command with,
// when it needs quoting. '%' is doubled: PostgreSQL replaces %p and %f in
// the command before the shell sees it.
func shellQuote(s string) string {
	s = strings.ReplaceAll(s, "%", "%%")
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// queryArchiveStatus reads pg_stat_archiver.
func queryArchiveStatus(ctx context.Context, conn *pgx.Conn) (*instanceapi.ArchiveStatus, error) {
	var a instanceapi.ArchiveStatus
	var archivedWAL, failedWAL *string
	err := conn.QueryRow(ctx, `SELECT archived_count, last_archived_wal, last_archived_time,
		failed_count, last_failed_wal, last_failed_time FROM pg_stat_archiver`).
		Scan(&a.ArchivedCount, &archivedWAL, &a.LastArchivedTime, &a.FailedCount, &failedWAL, &a.LastFailedTime)
	if err != nil {
		return nil, fmt.Errorf("while reading the archiver's statistics: %w", err)
	}
	if archivedWAL != nil {
		a.LastArchivedWAL = *archivedWAL
	}
	if failedWAL != nil {
		a.LastFailedWAL = *failedWAL
	}
	for _, t := range []*time.Time{a.LastArchivedTime, a.LastFailedTime} {
		if t != nil {
			*t = t.UTC()
		}
	}
	a.Failing = instanceapi.ArchiveFailing(a.LastArchivedTime, a.LastFailedTime)
	return &a, nil
}
