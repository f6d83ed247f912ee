package sqlobjects

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// sqlApplyLock is the advisory lock key (transaction scoped) that makes
// the declarative applies of this instance run one at a time: each
// observes the catalogs and changes them as one step.
const sqlApplyLock = 0x7475736b // "tusk"

// applyLockWait bounds the wait for the apply lock. Tusk's own applies
// hold it well under a second; any user who may connect can take the
// same advisory key and keep it, and a wait without bound would stall
// every role apply behind that session (and the operator's worker with
// it). Past the bound the apply answers ErrBusy, which the operator
// retries.
const applyLockWait = 5 * time.Second

// applyLockPoll is how often the lock is tried again while another
// session holds it.
const applyLockPoll = 50 * time.Millisecond

// takeApplyLock takes the apply lock in tx with pg_try_advisory_xact_lock,
// trying again until applyLockWait has passed; then it fails with
// ErrBusy, naming the session that holds the lock.
func takeApplyLock(ctx context.Context, tx pgx.Tx) error {
	deadline := time.Now().Add(applyLockWait)
	for {
		var taken bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", int64(sqlApplyLock)).Scan(&taken); err != nil {
			return fmt.Errorf("while taking the apply lock: %w", classifyPostgresError(err))
		}
		if taken {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s held it for more than %s", ErrBusy, applyLockHolder(ctx, tx), applyLockWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(applyLockPoll):
		}
	}
}

// applyLockHolder says which session holds the apply lock, for the
// error: an administrator ends it with pg_terminate_backend.
func applyLockHolder(ctx context.Context, tx pgx.Tx) string {
	var pid int32
	var user, app string
	err := tx.QueryRow(ctx, `SELECT l.pid, coalesce(a.usename::text, ''), coalesce(a.application_name, '')
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.classid = 0 AND l.objid::bigint = $1 AND l.objsubid = 1 LIMIT 1`, int64(sqlApplyLock)).Scan(&pid, &user, &app)
	if err != nil {
		return "another session"
	}
	return fmt.Sprintf("session %d (user %q, application %q)", pid, user, app)
}
