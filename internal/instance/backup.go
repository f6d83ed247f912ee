package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/instance/pgconf"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/postgres"
	"tusk.dev/tusk/internal/walarchive"
)

// Bounds of a base backup the operator asks for.
const (
	// backupTimeout bounds one backup, as `tusk instance backup` does.
	backupTimeout = 24 * time.Hour
	// backupWALPoll is how often a standby's backup looks for its last WAL
	// segment in the archive.
	backupWALPoll = time.Second
	// minBackupWALWait is the least a standby's backup waits for the
	// primary to archive its last segment; at least three archive_timeouts.
	minBackupWALWait = 10 * time.Minute
	// storeLookupTimeout bounds a look in the store for a backup this
	// manager does not know.
	storeLookupTimeout = 10 * time.Second
)

// backups are the base backups this manager took since it started: one
// runs at a time.
type backups struct {
	mu      sync.Mutex
	running string // the name of the running backup, or ""
	known   map[string]*instanceapi.BackupStatus
}

// backupStart is what to do with a request for a backup.
type backupStart int

const (
	// startBackup: a new backup, nothing running.
	startBackup backupStart = iota
	// reportBackup: this backup is known (running or done): report it, so
	// that a request repeated after a lost answer starts nothing new.
	reportBackup
	// refuseBackup: another backup runs.
	refuseBackup
)

// decideBackupStart says what a request for a backup does, given the
// running backup and the phase of the requested one when it is known ("" when
// it is not). A failed backup left nothing in the store: asked again (a
// PostgresBackup created again under its name), it is taken anew.
func decideBackupStart(running string, known instanceapi.BackupPhase) backupStart {
	switch {
	case known == instanceapi.BackupRunning || known == instanceapi.BackupCompleted:
		return reportBackup
	case running != "":
		return refuseBackup
	default:
		return startBackup
	}
}

// maxEndedBackups bounds what the manager remembers of ended backups; a
// completed one it forgot is still found in the store.
const maxEndedBackups = 64

// StartBackup starts a base backup of the instance into the cluster's
// object store in the background, and returns its state. The int is the
// HTTP status: 202 started, 200 known already, 409 another one runs or the
// instance cannot take backups, 400 a bad name.
func (m *Manager) StartBackup(name string) (instanceapi.BackupStatus, int, error) {
	if err := basebackup.ValidateName(name); err != nil {
		return instanceapi.BackupStatus{}, http.StatusBadRequest, err
	}
	if m.opts.WALArchive == nil {
		return instanceapi.BackupStatus{}, http.StatusConflict,
			errors.New("this instance has no object store configured (the cluster has no spec.backup): it cannot take base backups")
	}
	b := &m.backups
	b.mu.Lock()
	defer b.mu.Unlock()
	var phase instanceapi.BackupPhase
	st, known := b.known[name]
	if known {
		phase = st.Phase
	}
	switch decideBackupStart(b.running, phase) {
	case reportBackup:
		return *st, http.StatusOK, nil
	case refuseBackup:
		return instanceapi.BackupStatus{}, http.StatusConflict,
			fmt.Errorf("backup %q is already running on instance %s: one base backup at a time", b.running, m.opts.Name)
	}
	st = &instanceapi.BackupStatus{Name: name, Phase: instanceapi.BackupRunning, StartedAt: time.Now().UTC()}
	if b.known == nil {
		b.known = map[string]*instanceapi.BackupStatus{}
	}
	forgetOldBackups(b.known, maxEndedBackups)
	b.known[name], b.running = st, name
	go m.runBackup(name)
	return *st, http.StatusAccepted, nil
}

// forgetOldBackups drops the ended backups that started first, so that at
// most keep ended ones remain.
func forgetOldBackups(known map[string]*instanceapi.BackupStatus, keep int) {
	var ended []*instanceapi.BackupStatus
	for _, st := range known {
		if st.Phase != instanceapi.BackupRunning {
			ended = append(ended, st)
		}
	}
	if len(ended) <= keep {
		return
	}
	slices.SortFunc(ended, func(a, b *instanceapi.BackupStatus) int { return a.StartedAt.Compare(b.StartedAt) })
	for _, st := range ended[:len(ended)-keep] {
		delete(known, st.Name)
	}
}

// BackupStatus reports a backup: the manager's own, else the store's
// record of it; found is false when neither knows it.
func (m *Manager) BackupStatus(ctx context.Context, name string) (st instanceapi.BackupStatus, found bool, err error) {
	m.backups.mu.Lock()
	known, ok := m.backups.known[name]
	if ok {
		st = *known
	}
	m.backups.mu.Unlock()
	if ok {
		return st, true, nil
	}
	if basebackup.ValidateName(name) != nil || m.opts.WALArchive == nil {
		return st, false, nil
	}
	store, err := m.backupStore()
	if err != nil {
		return st, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, storeLookupTimeout)
	defer cancel()
	if exists, err := store.Exists(ctx, basebackup.RecordKey(name)); err != nil || !exists {
		return st, false, err
	}
	rec, err := basebackup.LoadRecord(ctx, store, name)
	if err != nil {
		return st, false, err
	}
	end := rec.EndTime
	return instanceapi.BackupStatus{Name: name, Phase: instanceapi.BackupCompleted, CompletedAt: &end,
		Location: backupLocation(store, name), Record: apiRecord(rec)}, true, nil
}

// backupStore is the cluster's location, as the archive command sees it;
// made for each backup, so it reads the credentials' files as they are now.
func (m *Manager) backupStore() (*objectstore.Store, error) {
	a, err := walarchive.NewArchiver(m.opts.WALArchive.Config)
	if err != nil {
		return nil, err
	}
	return a.Store, nil
}

func backupLocation(store *objectstore.Store, name string) string {
	return store.Location() + basebackup.Prefix + name + "/"
}

// runBackup takes the backup and records how it ended.
func (m *Manager) runBackup(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), backupTimeout)
	defer cancel()
	go func() {
		select {
		case <-m.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	log := m.log.WithValues("backup", name)
	log.Info("Taking a base backup")
	rec, err := m.takeBackup(ctx, name)
	now := time.Now().UTC()
	b := &m.backups
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.known[name]
	b.running = ""
	st.CompletedAt, st.WaitingForWAL = &now, ""
	if err != nil {
		st.Phase, st.Error, st.ErrorKind = instanceapi.BackupFailed, err.Error(), backupErrorKind(err)
		log.Error(err, "Taking a base backup", "kind", st.ErrorKind)
		return
	}
	st.Phase, st.Record = instanceapi.BackupCompleted, apiRecord(rec)
	log.Info("Took a base backup", "beginLSN", st.Record.BeginLSN, "endLSN", st.Record.EndLSN,
		"timeline", st.Record.Timeline, "compressedSize", st.Record.CompressedSize)
}

// takeBackup runs pg_basebackup as the superuser over the socket (see
// pgconf.PgHBA) through the reaper, into the cluster's location.
func (m *Manager) takeBackup(ctx context.Context, name string) (*basebackup.Record, error) {
	// The configuration archiving uses, which names this data directory's
	// system: a backup claims the location as archiving does.
	cfg, err := walarchive.LoadConfig(m.walArchiveConfigPath())
	if err != nil {
		return nil, err
	}
	a, err := walarchive.NewArchiver(cfg)
	if err != nil {
		return nil, err
	}
	if err := a.Claim(ctx); err != nil {
		return nil, err
	}
	store := a.Store
	m.setBackupField(name, func(st *instanceapi.BackupStatus) { st.Location = backupLocation(store, name) })
	return basebackup.Backup(ctx, basebackup.Options{
		Name:   name,
		BinDir: m.opts.BinDir,
		ConnString: pgconf.LocalConnString(m.opts.SocketDir, m.opts.Port, superuser, m.passfilePath(),
			"tusk-backup"),
		Store:  store,
		Runner: m.reaper,
		BeforeRecord: func(ctx context.Context, rec *basebackup.Record) error {
			return m.waitForBackupWAL(ctx, store, rec)
		},
	})
}

func (m *Manager) setBackupField(name string, set func(*instanceapi.BackupStatus)) {
	m.backups.mu.Lock()
	defer m.backups.mu.Unlock()
	if st, ok := m.backups.known[name]; ok {
		set(st)
	}
}

// waitForBackupWAL waits, on a standby, until the archive holds the WAL
// segment with the backup's last record: PostgreSQL waits for that itself
// only on a primary (or with archive_mode = always), and a backup whose
// WAL is not archived cannot be restored. The primary archives it within
// its archive_timeout.
func (m *Manager) waitForBackupWAL(ctx context.Context, store *objectstore.Store, rec *basebackup.Record) error {
	conn, err := m.connect(ctx)
	if err != nil {
		return fmt.Errorf("while asking whether the instance is a standby: %w", err)
	}
	var standby bool
	err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby)
	_ = conn.Close(context.WithoutCancel(ctx))
	if err != nil || !standby {
		return err
	}
	segment, err := lastBackupSegment(rec)
	if err != nil {
		return err
	}
	key, err := walarchive.Key(segment)
	if err != nil {
		return err
	}
	m.setBackupField(rec.Name, func(st *instanceapi.BackupStatus) { st.WaitingForWAL = segment })
	m.log.Info("Waiting for the primary to archive the backup's last WAL segment", "backup", rec.Name, "segment", segment)
	wait := max(minBackupWALWait, 3*cmpArchiveTimeout(m.opts.WALArchive.Timeout))
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(backupWALPoll)
	defer tick.Stop()
	for {
		exists, err := store.Exists(ctx, key)
		if exists {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the WAL segment %s the backup ends in was not archived within %s (is the primary archiving?): %w",
				segment, wait, errors.Join(err, ctx.Err()))
		case <-tick.C:
		}
	}
}

func cmpArchiveTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return DefaultArchiveTimeout
	}
	return d
}

// lastBackupSegment names the WAL segment holding the backup's last
// record: the one before EndLSN, as PostgreSQL's own wait at the end of a
// backup computes it.
func lastBackupSegment(rec *basebackup.Record) (string, error) {
	if rec.EndLSN == 0 {
		return "", errors.New("the backup has no end LSN")
	}
	seg, err := postgres.SegmentOf(rec.Timeline, rec.EndLSN-1, rec.WALSegmentSize)
	if err != nil {
		return "", err
	}
	return seg.FileName(), nil
}

// backupErrorKind classifies the object store failures a user fixes.
func backupErrorKind(err error) string {
	var se *objectstore.Error
	if !errors.As(err, &se) {
		return ""
	}
	switch se.Kind {
	case objectstore.KindCredentials:
		return instanceapi.BackupErrorWrongCredentials
	case objectstore.KindNoSuchBucket:
		return instanceapi.BackupErrorBucketNotFound
	case objectstore.KindUnreachable:
		return instanceapi.BackupErrorEndpointUnreachable
	case objectstore.KindTLS:
		return instanceapi.BackupErrorTLSFailure
	}
	return ""
}

func apiRecord(rec *basebackup.Record) *instanceapi.BackupRecord {
	return &instanceapi.BackupRecord{
		BeginLSN: rec.BeginLSN.String(), EndLSN: rec.EndLSN.String(), Timeline: rec.Timeline, BeginWAL: rec.BeginWAL,
		StartTime: rec.StartTime, EndTime: rec.EndTime, Size: rec.Size, CompressedSize: rec.CompressedSize,
		PostgreSQLVersion: rec.PostgreSQLVersion, SystemIdentifier: rec.SystemIdentifier,
	}
}

// serveStartBackup is POST /v1/backups.
func (m *Manager) serveStartBackup(w http.ResponseWriter, r *http.Request) {
	var req instanceapi.BackupRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the request needs a backup name: " + err.Error()})
		return
	}
	st, code, err := m.StartBackup(req.Name)
	if err != nil {
		writeJSON(w, code, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, code, st)
}

// serveBackupStatus is GET /v1/backups/{name}.
func (m *Manager) serveBackupStatus(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := basebackup.ValidateName(name); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	st, found, err := m.BackupStatus(r.Context(), name)
	switch {
	case err != nil:
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
	case !found:
		writeJSON(w, http.StatusNotFound, map[string]string{
			"error": fmt.Sprintf("instance %s has taken no backup %q since it started, and the object store has no record of it", m.opts.Name, name)})
	default:
		writeJSON(w, http.StatusOK, st)
	}
}
