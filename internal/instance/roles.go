package instance

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instance/lifecycle"
	"tusk.dev/tusk/internal/instance/supervisor"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/walarchive"
)

// PromoteResult tells how a promotion went.
type PromoteResult struct {
	// Timeline is the new timeline.
	Timeline uint32 `json:"timeline"`
	// Duration runs from the promote call to the first committed write.
	Duration time.Duration `json:"durationNanos"`
}

// alignExistingDataDir reconciles an existing data directory with the role
// it starts as (startRole): a former primary that starts as a replica is
// rewound first, so it can never come back as a second primary.
func (m *Manager) alignExistingDataDir(ctx context.Context) error {
	role := m.startRole(ctx)
	m.mu.Lock()
	m.state.role = role
	m.mu.Unlock()
	if role == instanceapi.RoleReplica && !isStandbyDataDir(m.opts.DataDir) {
		m.log.Info("The data directory was a primary's; rejoining as a replica", "upstream", m.opts.Upstream.Host)
		if err := m.rejoin(ctx, m.opts.Upstream); err != nil {
			// The new primary may not answer yet (its -rw Service moves
			// after the failover is recorded): keep postgres stopped and
			// retry with the restart backoff, reporting why, rather than
			// exit into the kubelet's growing CrashLoopBackOff.
			m.setError(err)
			m.record(lifecycle.RejoinPending(m.opts.Upstream))
		}
	}
	return nil
}

// startRole is the role an existing data directory starts as (see
// roleAtStart). The Lease is read only when it can change the answer.
func (m *Manager) startRole(ctx context.Context) instanceapi.Role {
	standby := isStandbyDataDir(m.opts.DataDir)
	holds := false
	if !standby && m.opts.Role == instanceapi.RoleReplica && m.lease != nil {
		holder, err := m.lease.holder(ctx)
		if err != nil {
			// The label decides then, and the Lease still protects: a
			// primary-labelled instance takes it before postgres starts
			// or stays fenced; a replica-labelled one rewinds against
			// its upstream and takes no writes.
			m.log.Info("Could not read the primary Lease at start; going by the role label", "role", m.opts.Role, "error", err.Error())
		}
		holds = err == nil && holder == m.opts.Name
	}
	role := roleAtStart(m.opts.Role, standby, holds)
	switch role {
	case m.opts.Role:
	case instanceapi.RolePrimary:
		m.log.Info("Starting as the primary: this instance holds the primary Lease and its data directory is a primary's, whatever its role label says", "label", m.opts.Role)
	default:
		m.log.Info("The data directory is a replica's; starting it as a replica until promoted")
	}
	return role
}

// roleAtStart decides the role of an existing data directory from the role
// asked for (the pod's label), whether the directory is a standby's and
// whether this instance holds the primary Lease:
//   - a standby's data starts as a replica: removing standby.signal would
//     reuse the old timeline; it must be promoted (POST /v1/promote);
//   - a primary's data whose instance holds the Lease starts as the
//     primary. The label reaches the pod through the downward API up to a
//     minute late, so a new primary's container that restarts just after
//     a failover can read the old "replica"; rewinding it would throw away
//     the writes it acknowledged since;
//   - otherwise the label decides. A primary-labelled instance whose Lease
//     another holds stays fenced before it starts (mayStart).
func roleAtStart(asked instanceapi.Role, standby, holdsLease bool) instanceapi.Role {
	switch {
	case standby:
		return instanceapi.RoleReplica
	case holdsLease:
		return instanceapi.RolePrimary
	}
	return asked
}

// Promote makes a replica the primary and returns once it commits writes.
func (m *Manager) Promote(ctx context.Context) (PromoteResult, error) {
	v, err := m.do(ctx, "promote", func(ctx context.Context) (any, error) { return m.promote(ctx) })
	res, _ := v.(PromoteResult)
	return res, err
}

func (m *Manager) promote(ctx context.Context) (PromoteResult, error) {
	if st := m.snapshot(); st.role != instanceapi.RoleReplica {
		return PromoteResult{}, errors.New("this instance is already the primary")
	}
	begin := time.Now()
	if err := m.waitRunning(ctx); err != nil {
		return PromoteResult{}, fmt.Errorf("cannot promote: %w", err)
	}
	conn, leaseHeld, err := m.connectHoldingLease(ctx)
	if err != nil {
		return PromoteResult{}, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	start := time.Now()
	m.log.Info("Promoting", "leaseTook", leaseHeld.String(), "sessionReadyAfter", start.Sub(begin).String())
	var promoted bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(wait => true, wait_seconds => 60)").Scan(&promoted); err != nil || !promoted {
		return PromoteResult{}, fmt.Errorf("pg_promote did not finish (promoted=%v): %w", promoted, err)
	}
	// Writable means a transaction ID can be assigned and committed.
	var res PromoteResult
	if _, err := conn.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		return res, fmt.Errorf("promoted but not writable: %w", err)
	}
	res.Duration = time.Since(start)
	// Records of segments archived ahead and prefetched segments are
	// checked before use, but none from before the promotion needs to
	// survive it.
	if err := walarchive.ClearSpool(filepath.Join(m.opts.DataDir, "pg_wal")); err != nil {
		m.log.Info("Clearing the WAL spool failed", "error", err.Error())
	}
	m.mu.Lock()
	m.state.role = instanceapi.RolePrimary
	st := m.state
	m.mu.Unlock()
	// Drop primary_conninfo from the configuration; PostgreSQL removed
	// standby.signal itself. A primary ignores primary_conninfo, the only
	// setting that differs by role, so the promotion does not wait for
	// the reload (new sessions, which a busy node is slow to start).
	if err := m.writeConfig(st); err != nil {
		return res, err
	}
	if err := m.signalReload(); err != nil {
		return res, err
	}
	var status instanceapi.Status
	if err := queryPrimaryStatus(ctx, conn, &status); err != nil {
		return res, err
	}
	res.Timeline = status.Timeline
	m.opts.LogFields.SetTimeline(res.Timeline)
	m.log.Info("Promoted to primary", "timeline", res.Timeline, "duration", res.Duration.String())
	m.catchUpArchive(res.Timeline)
	return res, nil
}

// connectHoldingLease takes the primary Lease and opens the session for
// pg_promote. The session opens while the Lease is taken: both are round
// trips on the write gap's path, and opening a session changes nothing. A
// new primary takes writes only while it holds the Lease: the operator
// promotes once the former primary's Lease expired or was released, so
// taking it here succeeds, or the promotion is refused. It also returns
// how long the Lease took.
func (m *Manager) connectHoldingLease(ctx context.Context) (*pgx.Conn, time.Duration, error) {
	begin := time.Now()
	conns := make(chan connected, 1)
	go func() {
		conn, err := m.connect(ctx)
		conns <- connected{conn, err}
	}()
	if m.lease != nil {
		if err := m.lease.hold(ctx); err != nil {
			if c := <-conns; c.err == nil {
				_ = c.conn.Close(context.Background())
			}
			return nil, 0, fmt.Errorf("cannot promote: %w", err)
		}
	}
	leaseHeld := time.Since(begin)
	c := <-conns
	return c.conn, leaseHeld, c.err
}

// connected is a session opened in the background, or why it could not be.
type connected struct {
	conn *pgx.Conn
	err  error
}

// Demote turns a primary into a replica of up: it stops postgres cleanly,
// rewinds the data directory to the new primary's history and starts as a
// replica. A primary fenced for want of the Lease (postgres already
// stopped) is demoted the same way: the fence kept it from taking writes
// as a primary, and a replica takes none. A hand fence is refused: it is
// lifted by hand only.
func (m *Manager) Demote(ctx context.Context, up instanceapi.Upstream) error {
	_, err := m.do(ctx, "demote", func(ctx context.Context) (any, error) { return nil, m.demote(ctx, up) })
	return err
}

func (m *Manager) demote(ctx context.Context, up instanceapi.Upstream) error {
	if _, err := m.snapshot().life.Apply(lifecycle.Rejoined); err != nil {
		return err // fenced by hand: lifted by hand only
	}
	if err := m.stopPostgres(supervisor.Fast); err != nil {
		return err
	}
	// A failed rejoin leaves the role and the fence as they were, so it
	// never starts as a primary without the Lease; postgres stays stopped
	// and the run loop tries the rejoin again (finishRejoin).
	if err := m.rejoin(ctx, up); err != nil {
		m.record(lifecycle.RejoinPending(up))
		return err
	}
	m.record(lifecycle.Rejoined)
	return m.startPostgres(ctx)
}

// rejoin makes a stopped former primary's data directory follow up:
// pg_rewind when it can, a fresh pg_basebackup when it cannot.
func (m *Manager) rejoin(ctx context.Context, up instanceapi.Upstream) error {
	m.record(lifecycle.RejoinStarted)
	m.noteStoppedForRejoin(ctx)
	if err := m.writePassfile(); err != nil {
		return err
	}
	m.checkpointUpstream(ctx, up)
	err := m.runTool(ctx, "pg_rewind", nil, "--target-pgdata="+m.opts.DataDir, "--source-server="+m.rewindConnInfo(up), "--progress")
	if err != nil && couldNotConnect(err) {
		// Nothing was touched; a fresh copy would fail the same way, or
		// throw away a data directory that a rewind can still save.
		return fmt.Errorf("cannot rejoin until the primary answers: %w", err)
	}
	if err != nil {
		m.log.Info("pg_rewind could not rejoin this instance; copying the primary afresh with pg_basebackup", "reason", err.Error())
		if err := m.recloneFrom(ctx, up); err != nil {
			return err
		}
	}
	m.becomeReplicaOf(up)
	return nil
}

// checkpointUpstream asks the primary this instance rejoins for a
// CHECKPOINT before pg_rewind compares their timelines, as pg_rewind's
// documentation asks: a just-promoted primary's control file names its
// old timeline until its end-of-recovery checkpoint (a spread one) is
// done, and pg_rewind then finds "no rewind required" and leaves this data
// directory on a history the primary does not have, which it can never
// follow. The replication role may CHECKPOINT from PostgreSQL 15 on
// (pg_checkpoint). Best effort: when it fails, pg_rewind decides as it
// would have.
func (m *Manager) checkpointUpstream(ctx context.Context, up instanceapi.Upstream) {
	ctx, cancel := context.WithTimeout(ctx, upstreamCheckpointTimeout)
	defer cancel()
	conn, err := m.connectUpstream(ctx, up)
	if err != nil {
		m.log.Info("Could not ask the primary for a checkpoint before pg_rewind", "error", err.Error())
		return
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var standby bool
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_is_in_recovery()").Scan(&standby); err != nil || standby {
		return // a standby's control file is its upstream's business
	}
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		m.log.Info("The primary's checkpoint before pg_rewind failed", "error", err.Error())
	}
}

// upstreamCheckpointTimeout bounds checkpointUpstream.
const upstreamCheckpointTimeout = 30 * time.Second

// connectUpstream opens a session on up as pg_rewind's: as the
// replication role, with its password or its client certificate, over
// verified TLS when the cluster has certificates (the name checked is
// up.Host, the address tried first up.HostAddr).
func (m *Manager) connectUpstream(ctx context.Context, up instanceapi.Upstream) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig("sslmode=disable")
	if err != nil {
		return nil, err
	}
	cfg.Host, cfg.Port = cmp.Or(up.HostAddr, up.Host), uint16(up.Port) //nolint:gosec // a port number
	cfg.User, cfg.Password, cfg.Database = replicationUser, m.currentSecrets().replicationPassword, rewindDatabase
	cfg.ConnectTimeout = 5 * time.Second
	cfg.RuntimeParams["application_name"] = m.opts.Name + "-rewind"
	pinSearchPath(cfg)
	if m.serverCerts != nil {
		if cfg.TLSConfig, err = m.upstreamTLS(up.Host); err != nil {
			return nil, err
		}
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// upstreamTLS verifies the upstream's certificate for serverName and
// presents the replication client certificate when replicas use one. The
// replication Secret's ca.crt is the CA of server certificates; the server
// Secret's is the CA this server trusts clients from, which is another
// when the server certificate comes from a user's CA (they are one
// otherwise).
func (m *Manager) upstreamTLS(serverName string) (*tls.Config, error) {
	roots := m.serverCerts.caPath()
	if m.replicationCerts != nil {
		roots = m.replicationCerts.caPath()
	}
	pem, err := os.ReadFile(roots) //nolint:gosec // a mounted Secret's file
	if err != nil {
		return nil, fmt.Errorf("while reading the cluster's CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: serverName}
	if c := m.replicationCerts; c != nil {
		pair, err := tls.LoadX509KeyPair(c.certPath(), c.keyPath())
		if err != nil {
			return nil, fmt.Errorf("while reading the replication client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// reclone makes a stopped replica's data directory a fresh copy of up,
// for a directory postgres refused (planReclone).
func (m *Manager) reclone(ctx context.Context, up instanceapi.Upstream) error {
	m.record(lifecycle.RejoinStarted)
	if err := m.writePassfile(); err != nil {
		return err
	}
	if err := m.recloneFrom(ctx, up); err != nil {
		return err
	}
	m.becomeReplicaOf(up)
	return nil
}

// becomeReplicaOf records that the stopped data directory now follows up.
func (m *Manager) becomeReplicaOf(up instanceapi.Upstream) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state.role = instanceapi.RoleReplica
	m.state.upstream = up
	m.state.stoppedForRejoin = nil
}

// noteStoppedForRejoin keeps, for /status, what pg_control says of the
// stopped data directory of a former primary about to rejoin, unless an
// earlier attempt of the same rejoin did: that one saw the directory as
// postgres left it, before any rewind, which is what bounds the writes
// it took as the primary (instanceapi.Status.StoppedForRejoin). A failure
// is logged only: without it the operator waits for the quorum's rule.
func (m *Manager) noteStoppedForRejoin(ctx context.Context) {
	if m.snapshot().stoppedForRejoin != nil {
		return
	}
	cd, err := m.readControlData(ctx, m.opts.DataDir)
	if err != nil {
		m.log.Error(err, "Reading pg_control of the data directory before rejoining")
		return
	}
	st := m.dataDirState(cd)
	m.mu.Lock()
	m.state.stoppedForRejoin = st
	m.mu.Unlock()
}

// couldNotConnect says a client tool (pg_rewind) failed at its first
// connection to the server, before it did anything: libpq's "connection to
// server at ... failed". A connection lost later says "server closed the
// connection" or similar, and then the data directory may be half-rewound.
func couldNotConnect(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "connection to server at") && strings.Contains(msg, "failed:")
}

// recloneFrom replaces the data directory with a copy of up. The old one is
// kept beside it, named by when it was set aside, rather than deleted: it is
// the only copy of whatever the former primary wrote last. One is kept: an
// older one goes first, to make room. The copy needs about as much space as
// the data directory has; without it, the reclone is refused, with the
// figures, rather than deleting the old data to make room.
func (m *Manager) recloneFrom(ctx context.Context, up instanceapi.Upstream) error {
	building := m.opts.DataDir + bootstrapSuffix
	if err := os.RemoveAll(building); err != nil {
		return err
	}
	if err := removeDiscarded(m.opts.DataDir); err != nil {
		return err
	}
	if err := checkRoomForCopy(m.opts.DataDir); err != nil {
		return err
	}
	if err := m.cloneFrom(ctx, up, building); err != nil {
		return err
	}
	discarded := discardedPath(m.opts.DataDir, time.Now())
	if err := os.Rename(m.opts.DataDir, discarded); err != nil {
		return fmt.Errorf("while setting the old data directory aside: %w", err)
	}
	m.log.Info("Kept the former data directory", "path", discarded)
	return moveIntoPlace(building, m.opts.DataDir)
}

// discardedSuffix starts the name of a data directory set aside by a
// reclone: <pgdata>.discarded-<UTC time>.
const discardedSuffix = ".discarded-"

func discardedPath(dataDir string, at time.Time) string {
	return dataDir + discardedSuffix + at.UTC().Format("20060102T150405Z")
}

// removeDiscarded removes the data directories earlier reclones set aside
// (and one of the name older versions used).
func removeDiscarded(dataDir string) error {
	old, err := filepath.Glob(dataDir + discardedSuffix + "*")
	if err != nil {
		return err
	}
	for _, dir := range append(old, dataDir+".discarded") {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("while removing %s, set aside by an earlier reclone: %w", dir, err)
		}
	}
	return nil
}

// checkRoomForCopy refuses a reclone whose copy would not fit beside the
// data directory it replaces, which is kept (see recloneFrom).
func checkRoomForCopy(dataDir string) error {
	size := dirSize(dataDir)
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(dataDir), &st); err != nil {
		return fmt.Errorf("while reading the free space of the data volume: %w", err)
	}
	return roomForCopy(size, st.Bavail*uint64(st.Bsize)) //nolint:gosec // a block size is positive
}

// roomForCopy: a copy of a data directory of size bytes needs that much
// again, and a tenth more for the WAL written meanwhile.
func roomForCopy(size int64, free uint64) error {
	need := uint64(size) + uint64(size)/10 //nolint:gosec // a size is not negative
	if free < need {
		return fmt.Errorf("not enough space on the data volume to copy the primary beside the data directory it replaces, "+
			"which is kept (the only copy of what this instance wrote last): %d MiB free, about %d MiB needed; "+
			"grow spec.storage.size, or move the old data directory away", free>>20, need>>20)
	}
	return nil
}

// dirSize is the size of the regular files under dir. A file that goes
// while it is walked (postgres runs) is not counted.
func dirSize(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			total += info.Size()
		}
		return nil
	})
	return total
}

// Follow points a replica at another upstream. primary_conninfo is reloaded
// without a restart (PostgreSQL 13 and later).
func (m *Manager) Follow(ctx context.Context, up instanceapi.Upstream) error {
	_, err := m.do(ctx, "follow", func(ctx context.Context) (any, error) {
		m.mu.Lock()
		if m.state.role != instanceapi.RoleReplica {
			m.mu.Unlock()
			return nil, errors.New("a primary cannot follow; demote it instead")
		}
		m.state.upstream = up
		st := m.state
		m.mu.Unlock()
		if err := m.writeConfig(st); err != nil {
			return nil, err
		}
		_, err := m.reload(ctx)
		return nil, err
	})
	return err
}

// Reconnect stops a replica's WAL receiver so that the startup process
// starts another at once, which connects to the upstream afresh: after a
// failover the old one may wait on a connection to the former primary
// that the network dropped.
func (m *Manager) Reconnect(ctx context.Context) (instanceapi.ReconnectResult, error) {
	v, err := m.do(ctx, "reconnect", func(ctx context.Context) (any, error) {
		if m.snapshot().role != instanceapi.RoleReplica {
			return instanceapi.ReconnectResult{}, errors.New("only a replica has a WAL receiver to reconnect")
		}
		return m.stopWALReceiver(ctx)
	})
	res, _ := v.(instanceapi.ReconnectResult)
	return res, err
}

// stopWALReceiver sends SIGTERM to the WAL receiver, a child of the
// postmaster this manager started (so it may signal it).
// pg_terminate_backend cannot: the receiver is an auxiliary process, not a
// backend.
func (m *Manager) stopWALReceiver(ctx context.Context) (instanceapi.ReconnectResult, error) {
	conn, err := m.connect(ctx)
	if err != nil {
		return instanceapi.ReconnectResult{}, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var pid *int32
	if err := conn.QueryRow(ctx, "SELECT (SELECT pid FROM pg_stat_wal_receiver)").Scan(&pid); err != nil {
		return instanceapi.ReconnectResult{}, fmt.Errorf("while looking up the WAL receiver: %w", err)
	}
	if pid == nil || *pid <= 0 {
		return instanceapi.ReconnectResult{}, nil
	}
	if err := syscall.Kill(int(*pid), syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) { // it exited meanwhile
			return instanceapi.ReconnectResult{}, nil
		}
		return instanceapi.ReconnectResult{}, fmt.Errorf("while stopping the WAL receiver (pid %d): %w", *pid, err)
	}
	m.log.Info("Stopped the WAL receiver so that it connects to the upstream afresh", "pid", *pid)
	return instanceapi.ReconnectResult{Restarted: true}, nil
}

// Restart stops postgres cleanly (fast) and starts it again, applying
// settings that need a restart.
func (m *Manager) Restart(ctx context.Context) error {
	_, err := m.do(ctx, "restart", func(ctx context.Context) (any, error) {
		if err := m.stopPostgres(supervisor.Fast); err != nil {
			return nil, err
		}
		return nil, m.startPostgres(ctx)
	})
	return err
}

// errInvalidConfig marks a configuration refused before anything changed.
var errInvalidConfig = errors.New("invalid configuration")

// ApplyConfig writes a new configuration and reloads it, reporting what
// needs a restart and what PostgreSQL refused.
func (m *Manager) ApplyConfig(ctx context.Context, cfg instanceapi.Config) (instanceapi.ConfigResult, error) {
	// Before anything is stored: a configuration that cannot be rendered
	// would break every later start, restart, demote and promote.
	if err := cfg.Validate(); err != nil {
		return instanceapi.ConfigResult{}, fmt.Errorf("%w: %w", errInvalidConfig, err)
	}
	v, err := m.do(ctx, "config", func(ctx context.Context) (any, error) {
		m.mu.Lock()
		m.state.config = cfg
		st := m.state
		m.mu.Unlock()
		if err := m.writeConfig(st); err != nil {
			return instanceapi.ConfigResult{}, err
		}
		return m.reload(ctx)
	})
	res, _ := v.(instanceapi.ConfigResult)
	return res, err
}
