package instance

import (
	"context"
	"fmt"

	"tusk.dev/tusk/internal/instanceapi"
)

// EndClientSessions ends every session of an ordinary (not superuser)
// role on this instance. The operator asks the old primary once its
// cluster's Services send clients to the cluster that imported it
// logically: a client that connected in the moment between the
// cutover's end of sessions and the switch of the Services would
// otherwise stay there, read-only, for as long as its pool keeps the
// connection. Superusers' sessions (the instance manager's, a DBA's),
// Tusk's own roles' (tusk_monitor's metrics) and replication connections
// are left.
func (m *Manager) EndClientSessions(ctx context.Context) (instanceapi.EndSessionsResult, error) {
	conn, err := m.connect(ctx)
	if err != nil {
		return instanceapi.EndSessionsResult{}, fmt.Errorf("while connecting to end the client sessions: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	// pg_terminate_backend runs on the rows the WHERE clause kept: the
	// select list is evaluated after it.
	var ended int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(a.pid))
		FROM pg_catalog.pg_stat_activity a JOIN pg_catalog.pg_roles r ON r.oid = a.usesysid
		WHERE a.backend_type = 'client backend' AND a.pid <> pg_catalog.pg_backend_pid() AND NOT r.rolsuper
		  AND r.rolname NOT LIKE 'tusk\_%'`).Scan(&ended); err != nil {
		return instanceapi.EndSessionsResult{}, fmt.Errorf("while ending the client sessions: %w", err)
	}
	m.log.Info("Ended the client sessions", "sessions", ended)
	return instanceapi.EndSessionsResult{Ended: ended}, nil
}
