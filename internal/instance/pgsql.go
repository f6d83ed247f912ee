package instance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instance/pgconf"
	"tusk.dev/tusk/internal/instanceapi"
)

// Roles the instance manager creates and uses.
const (
	superuser       = pgconf.Superuser
	replicationUser = "tusk_replication"
	// monitorRole holds pg_monitor; metrics queries run under it (SET ROLE)
	// so they have no superuser rights.
	monitorRole = "tusk_monitor"
)

// queryStatus fills what PostgreSQL itself knows into st.
func queryStatus(ctx context.Context, conn *pgx.Conn, st *instanceapi.Status) error {
	var inRecovery bool
	if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery(), current_setting('server_version'),
		(SELECT system_identifier::text FROM pg_control_system())`).
		Scan(&inRecovery, &st.PostgresVersion, &st.SystemIdentifier); err != nil {
		return fmt.Errorf("while reading the server's identity: %w", err)
	}
	var err error
	if inRecovery {
		st.Role = instanceapi.RoleReplica
		err = queryReplicaStatus(ctx, conn, st)
	} else {
		st.Role = instanceapi.RolePrimary
		err = queryPrimaryStatus(ctx, conn, st)
	}
	if err != nil {
		return err
	}
	return querySettingsStatus(ctx, conn, st)
}

func queryPrimaryStatus(ctx context.Context, conn *pgx.Conn, st *instanceapi.Status) error {
	var walfile string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, pg_walfile_name(pg_current_wal_lsn())`).
		Scan(&st.CurrentLSN, &walfile); err != nil {
		return fmt.Errorf("while reading the WAL position: %w", err)
	}
	// The WAL file name starts with the current timeline, in hex.
	tli, err := strconv.ParseUint(walfile[:8], 16, 32)
	if err != nil {
		return fmt.Errorf("while reading the timeline from %q: %w", walfile, err)
	}
	st.Timeline = uint32(tli)
	st.Ready = true
	return queryStandbys(ctx, conn, st, "pg_current_wal_lsn()")
}

// queryStandbys lists the standbys streaming from this instance: a
// primary's replicas, or a replica's cascading ones. Lag is measured from
// position, this instance's own WAL position.
func queryStandbys(ctx context.Context, conn *pgx.Conn, st *instanceapi.Status, position string) error {
	rows, err := conn.Query(ctx, `SELECT application_name, state, coalesce(sync_state, ''),
		coalesce(flush_lsn::text, ''), coalesce(replay_lsn::text, ''),
		greatest(coalesce(pg_wal_lsn_diff(`+position+`, replay_lsn), 0), 0)::bigint,
		coalesce(extract(epoch FROM replay_lag), 0)::float8
		FROM pg_stat_replication ORDER BY application_name`)
	if err != nil {
		return fmt.Errorf("while reading the connected standbys: %w", err)
	}
	st.Replicas, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (instanceapi.ReplicaConnection, error) {
		var r instanceapi.ReplicaConnection
		err := row.Scan(&r.Name, &r.State, &r.SyncState, &r.FlushLSN, &r.ReplayLSN, &r.LagBytes, &r.ReplayLagSeconds)
		return r, err
	})
	return err
}

func queryReplicaStatus(ctx context.Context, conn *pgx.Conn, st *instanceapi.Status) error {
	var receiverTLI *int32
	var streaming bool
	err := conn.QueryRow(ctx, `SELECT coalesce(pg_last_wal_receive_lsn()::text, ''),
		coalesce(pg_last_wal_replay_lsn()::text, ''),
		coalesce(pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()), 0)::bigint,
		CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
		     ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0) END::float8,
		(SELECT received_tli FROM pg_stat_wal_receiver),
		coalesce((SELECT status = 'streaming' FROM pg_stat_wal_receiver), false),
		(SELECT timeline_id FROM pg_control_checkpoint())`).
		Scan(&st.ReceivedLSN, &st.ReplayedLSN, &st.ReplayLagBytes, &st.ReplayLagSeconds, &receiverTLI, &streaming, &st.Timeline)
	if err != nil {
		return fmt.Errorf("while reading the replication position: %w", err)
	}
	if receiverTLI != nil && uint32(*receiverTLI) > st.Timeline { //nolint:gosec // timelines are positive
		st.Timeline = uint32(*receiverTLI) //nolint:gosec // timelines are positive
	}
	st.Streaming = streaming
	// A replica serves reads while it streams, or replays WAL it has (for
	// example from the archive) even without a live connection.
	st.Ready = streaming || st.ReplayedLSN != ""
	return queryStandbys(ctx, conn, st, "pg_last_wal_replay_lsn()")
}

func querySettingsStatus(ctx context.Context, conn *pgx.Conn, st *instanceapi.Status) error {
	var err error
	st.PendingRestart, err = queryStrings(ctx, conn, `SELECT name FROM pg_settings WHERE pending_restart ORDER BY name`)
	if err != nil {
		return fmt.Errorf("while reading settings pending a restart: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT s.name, s.setting, f.setting FROM pg_settings s
		JOIN LATERAL (SELECT setting FROM pg_file_settings f WHERE f.name = s.name ORDER BY seqno DESC LIMIT 1) f ON true
		WHERE s.pending_restart ORDER BY s.name`)
	if err == nil {
		st.PendingValues, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (instanceapi.PendingValue, error) {
			var v instanceapi.PendingValue
			return v, row.Scan(&v.Name, &v.Running, &v.Pending)
		})
	}
	if err != nil {
		return fmt.Errorf("while reading the values pending a restart: %w", err)
	}
	// A restart-only setting removed from the file is reported with no
	// name and no file ("parameter ... cannot be changed without
	// restarting the server"): concat_ws skips what is NULL.
	st.ConfigErrors, err = queryStrings(ctx, conn, `SELECT concat_ws(': ', coalesce(name, sourcefile || ':' || sourceline), error)
		FROM pg_file_settings WHERE error IS NOT NULL ORDER BY seqno`)
	if err != nil {
		return fmt.Errorf("while reading configuration errors: %w", err)
	}
	return nil
}

func queryStrings(ctx context.Context, conn *pgx.Conn, sql string) ([]string, error) {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// waitUntilAccepting retries a connection until postgres accepts it, the
// postmaster exits, or ctx ends.
func (m *Manager) waitUntilAccepting(ctx context.Context, exited <-chan struct{}) error {
	for {
		conn, err := m.connect(ctx)
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-exited:
			return fmt.Errorf("postgres exited while starting: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
