package instance

import (
	"context"
	"errors"
	"fmt"

	"tusk.dev/tusk/internal/instance/pgupgrade"
	"tusk.dev/tusk/internal/instanceapi"
)

// UpgradePrecheck runs on the serving primary the major upgrade's
// pre-checks a running server can answer (prepared transactions, logical
// slots before 17): the operator asks before it stops anything, so that a
// refusal costs no downtime. The same checks run again on the stopped
// data directory, with those only the new image can answer.
func (m *Manager) UpgradePrecheck(ctx context.Context) (instanceapi.UpgradePrecheckResult, error) {
	if st := m.snapshot(); st.role != instanceapi.RolePrimary {
		return instanceapi.UpgradePrecheckResult{}, errors.New("this instance is not the primary")
	}
	conn, err := m.connect(ctx)
	if err != nil {
		return instanceapi.UpgradePrecheckResult{}, fmt.Errorf("while connecting for the upgrade's pre-checks: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return instanceapi.UpgradePrecheckResult{}, err
	}
	if err := pgupgrade.OnlineChecks(ctx, conn, version/10000); err != nil {
		return instanceapi.UpgradePrecheckResult{Problem: err.Error()}, nil
	}
	return instanceapi.UpgradePrecheckResult{}, nil
}
