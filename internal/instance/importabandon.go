package instance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
)

// AbandonImport drops the subscriptions of a logical import that will
// never be cut over: the operator asks before it deletes a cluster whose
// import still follows its source. DROP SUBSCRIPTION drops the slot on
// the source too; a slot left there would keep the source's WAL without
// end and fill its disk. When the source cannot be reached, the
// subscription is detached from its slot and dropped anyway, and the
// answer names the slot left for the source's DBA to drop.
func (m *Manager) AbandonImport(ctx context.Context) (instanceapi.ImportAbandonResult, error) {
	var res instanceapi.ImportAbandonResult
	st, err := readImportState(m.opts.DataDir)
	if err != nil || st == nil || st.CutOver {
		return res, err
	}
	if m.snapshot().role != instanceapi.RolePrimary {
		return res, errors.New("only the primary drops the import's subscriptions")
	}
	for _, db := range slices.Sorted(maps.Keys(st.Subscriptions)) {
		sub := st.Subscriptions[db]
		dropped, err := m.dropImportSubscription(ctx, db, sub)
		switch {
		case err != nil:
			return res, err
		case dropped:
			res.Dropped = append(res.Dropped, sub)
		default:
			res.Left = append(res.Left, sub)
		}
	}
	m.log.Info("Abandoned the logical import", "slotsDropped", res.Dropped, "slotsLeftOnTheSource", res.Left)
	return res, nil
}

// dropImportSubscription drops one database's subscription with its slot
// on the source (true), or, when the source refuses or cannot be
// reached, without it (false). A subscription already gone counts as
// dropped.
func (m *Manager) dropImportSubscription(ctx context.Context, db, sub string) (bool, error) {
	conn, err := m.connectDatabase(ctx, db)
	if err != nil {
		return false, fmt.Errorf("while connecting to %s to drop its subscription: %w", db, err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_subscription WHERE subname = $1)", sub).Scan(&exists); err != nil {
		return false, err
	}
	if !exists {
		return true, nil
	}
	_, dropErr := conn.Exec(ctx, "DROP SUBSCRIPTION "+ident(sub))
	if dropErr == nil {
		return true, nil
	}
	m.log.Info("Could not drop the import's slot on the source; detaching the subscription from it", "subscription", sub, "error", dropErr.Error())
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, stmt := range []string{"ALTER SUBSCRIPTION %s DISABLE", "ALTER SUBSCRIPTION %s SET (slot_name = NONE)"} {
			if _, err := tx.Exec(ctx, fmt.Sprintf(stmt, ident(sub))); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		_, err = conn.Exec(ctx, "DROP SUBSCRIPTION "+ident(sub))
	}
	if err != nil {
		return false, fmt.Errorf("while dropping the subscription %s of %s: %w", sub, db, err)
	}
	return false, nil
}
