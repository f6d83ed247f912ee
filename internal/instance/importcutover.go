package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instance/sqlobjects"
	"tusk.dev/tusk/internal/instanceapi"
)

// cutoverDB is one database of a cutover: the local session, the
// source's (opened with the subscription's own connection string), and
// the subscription.
type cutoverDB struct {
	name, subscription string
	local, source      *pgx.Conn
}

// serveImportCutover starts a cutover in the background and answers 202;
// the status follows it. A cutover already done for the request, or one
// running, is not started again.
func (m *Manager) serveImportCutover(w http.ResponseWriter, r *http.Request) {
	var req instanceapi.ImportCutoverRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Cutover == "" {
		http.Error(w, "a cutover request names the cutover", http.StatusBadRequest)
		return
	}
	st, err := readImportState(m.opts.DataDir)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	case st == nil:
		http.Error(w, "this instance follows no logical import", http.StatusConflict)
		return
	case m.snapshot().role != instanceapi.RolePrimary:
		http.Error(w, "only the primary cuts over", http.StatusConflict)
		return
	}
	if !st.CutOver && m.cutoverRunning.CompareAndSwap(false, true) {
		// Reported before the answer: the operator's next look sees it.
		m.mu.Lock()
		m.state.logicalImport = &instanceapi.ImportStatus{Phase: importCuttingOver, Cutover: req.Cutover,
			Message: "making the source read-only and applying its last changes"}
		m.mu.Unlock()
		go func() {
			defer m.cutoverRunning.Store(false)
			m.cutover(context.WithoutCancel(r.Context()), st, req.Cutover)
		}()
	}
	w.WriteHeader(http.StatusAccepted)
}

// cutover makes the source's databases read-only and ends their client
// sessions, waits until every subscription has applied the source's WAL
// up to that point, copies the sequences' values, and drops the
// subscriptions (and so the slots on the source). A failure before the
// drops gives the source its writes back.
func (m *Manager) cutover(ctx context.Context, st *importState, request string) {
	dbs, err := m.openCutover(ctx, st)
	defer closeCutover(dbs)
	var (
		gap   time.Duration
		steps string
	)
	if err == nil {
		gap, steps, err = m.runCutover(ctx, dbs)
	}
	st.Cutover = request
	if err != nil {
		m.log.Error(err, "The logical import's cutover failed")
		m.reportImport(st, "the cutover failed: "+err.Error())
		return
	}
	// No subscription left to drop: an earlier primary cut over, and
	// its measure is not in this state file.
	st.CutOver, st.WriteGapSeconds = true, 0
	if len(dbs) > 0 {
		st.WriteGapSeconds, st.Steps = gap.Seconds(), steps
	}
	if err := writeImportState(m.opts.DataDir, st); err != nil {
		m.log.Error(err, "Recording the cutover")
	}
	m.log.Info("Cut over from the logical import's source", "writeGapSeconds", gap.Seconds(), "steps", steps)
	m.reportImport(st, "")
}

// openCutover opens, for each database whose subscription is still
// there, a local session and one to the source with the subscription's
// own connection string. A subscription already gone was dropped by a
// cutover on an earlier primary (this data directory's state file was
// copied before it).
func (m *Manager) openCutover(ctx context.Context, st *importState) ([]cutoverDB, error) {
	var dbs []cutoverDB
	for _, db := range slices.Sorted(maps.Keys(st.Subscriptions)) {
		local, err := m.connectDatabase(ctx, db)
		if err != nil {
			return dbs, err
		}
		var conninfo string
		err = local.QueryRow(ctx, "SELECT subconninfo FROM pg_subscription WHERE subname = $1 AND subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
			st.Subscriptions[db]).Scan(&conninfo)
		if errors.Is(err, pgx.ErrNoRows) {
			_ = local.Close(ctx)
			continue
		}
		dbs = append(dbs, cutoverDB{name: db, subscription: st.Subscriptions[db], local: local}) // closeCutover closes it
		if err != nil {
			return dbs, fmt.Errorf("while reading the subscription %s of %s: %w", st.Subscriptions[db], db, err)
		}
		// pgx loads sslcert and sslkey when it parses them; the import
		// names a file that does not exist, to present none.
		cfg, err := pgx.ParseConfig(clientCertParams.ReplaceAllString(conninfo, ""))
		if err != nil {
			return dbs, fmt.Errorf("while reading the connection string of the subscription %s", st.Subscriptions[db])
		}
		if dbs[len(dbs)-1].source, err = pgx.ConnectConfig(ctx, cfg); err != nil {
			return dbs, fmt.Errorf("while connecting to the source's database %s: %s", db, sqlobjects.RedactConnInfo(err.Error(), conninfo))
		}
	}
	return dbs, nil
}

// clientCertParams are the sslcert and sslkey of a subscription's
// connection string, as prepareLogicalImport wrote them.
var clientCertParams = regexp.MustCompile(` ssl(cert|key)='[^']*'`)

func closeCutover(dbs []cutoverDB) {
	for _, c := range dbs {
		for _, conn := range []*pgx.Conn{c.local, c.source} {
			if conn != nil {
				_ = conn.Close(context.Background())
			}
		}
	}
}

func (m *Manager) runCutover(ctx context.Context, dbs []cutoverDB) (time.Duration, string, error) {
	// The source still takes writes while its subscribers close in: the
	// less is left to apply once it is read-only, the shorter the gap.
	for _, c := range dbs {
		if err := waitSlotNear(ctx, c); err != nil {
			return 0, "", err
		}
	}
	start := time.Now()
	steps := &stepTimer{last: start}
	ends := make([]string, len(dbs))
	var err error
	for i, c := range dbs {
		if ends[i], err = stopSourceWrites(ctx, c); err != nil {
			return 0, "", errors.Join(err, resumeSourceWrites(ctx, dbs))
		}
	}
	steps.done("sessions ended")
	m.log.Info("The source is read-only; waiting for the subscriptions to apply its last changes")
	for i, c := range dbs {
		if err := waitSlotConfirmed(ctx, c, ends[i]); err != nil {
			return 0, "", errors.Join(err, resumeSourceWrites(ctx, dbs))
		}
	}
	steps.done("caught up")
	for _, c := range dbs {
		if err := copySequences(ctx, c); err != nil {
			return 0, "", errors.Join(err, resumeSourceWrites(ctx, dbs))
		}
	}
	steps.done("sequences copied")
	for _, c := range dbs {
		// Drops the slot on the source too, through the subscription's
		// connection.
		if _, err := c.local.Exec(ctx, "DROP SUBSCRIPTION "+ident(c.subscription)); err != nil {
			return 0, "", fmt.Errorf("while dropping the subscription %s of %s (the source stays read-only): %w", c.subscription, c.name, err)
		}
	}
	steps.done("subscriptions dropped")
	return time.Since(start), steps.String(), nil
}

// stepTimer says how long each step of a cutover took: what a DBA looks
// at when the write gap is longer than it should be.
type stepTimer struct {
	last  time.Time
	steps []string
}

func (s *stepTimer) done(step string) {
	now := time.Now()
	s.steps = append(s.steps, fmt.Sprintf("%s %.2fs", step, now.Sub(s.last).Seconds()))
	s.last = now
}

func (s *stepTimer) String() string { return strings.Join(s.steps, ", ") }

// stopSourceWrites makes a source database read-only for new sessions and
// ends its client sessions (the import's own aside), then returns the
// source's WAL position: every commit they made is before it.
func stopSourceWrites(ctx context.Context, c cutoverDB) (string, error) {
	if _, err := c.source.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s SET default_transaction_read_only = on", ident(c.name))); err != nil {
		return "", fmt.Errorf("while making the source's database %s read-only (the import's user must own it or be a superuser): %w", c.name, err)
	}
	// Only a superuser may end a superuser's session: an import's user
	// that is none leaves them (on a Tusk source, the instance manager's
	// own sessions, which do not write).
	// The sessions are chosen first, then ended: in one statement the
	// planner may end a session before it filtered it out.
	rows, err := c.source.Query(ctx, `SELECT a.pid FROM pg_stat_activity a JOIN pg_roles r ON r.oid = a.usesysid
 WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'
   AND (NOT r.rolsuper OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user))`)
	var pids []int32
	if err == nil {
		pids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	}
	if err == nil {
		_, err = c.source.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", pids)
	}
	if err != nil {
		return "", fmt.Errorf("while ending the client sessions of the source's database %s: %w", c.name, err)
	}
	// pg_terminate_backend only signals: a session in the middle of its
	// commit finishes it, and acknowledges it, before it exits. The WAL
	// position is read once they all are gone, so it is past every
	// commit they made.
	if err := waitSessionsGone(ctx, c, pids); err != nil {
		return "", err
	}
	return markSourceEnd(ctx, c)
}

// markSourceEnd returns a WAL position of the source past every commit
// made so far, and makes sure the source's WAL is flushed up to it: a
// logical message committed in a transaction of the import's own
// (synchronously, past the database's read-only default). The walsender
// decodes flushed WAL only, and a position read with
// pg_current_wal_insert_lsn() may lie past the flushed WAL of a source
// that, read-only now, writes nothing that would flush it. (Slow cutovers
// seen in e2e turned out to be the subscriber's lag, not this.) A user
// allowed to make no logical message (PostgreSQL asks for REPLICATION,
// which the import's user has) falls back to the insert position.
func markSourceEnd(ctx context.Context, c cutoverDB) (string, error) {
	var end string
	err := pgx.BeginTxFunc(ctx, c.source, pgx.TxOptions{AccessMode: pgx.ReadWrite}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT pg_logical_emit_message(true, 'tusk_import_cutover', '')::text").Scan(&end)
	})
	if err == nil {
		return end, nil
	}
	if !isInsufficientPrivilege(err) {
		return "", fmt.Errorf("while marking the end of the source's WAL in %s: %w", c.name, err)
	}
	err = c.source.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&end)
	return end, err
}

// sessionsExitTimeout bounds the wait for the ended sessions to exit.
const sessionsExitTimeout = 30 * time.Second

// waitSessionsGone waits until none of pids runs on the source.
func waitSessionsGone(ctx context.Context, c cutoverDB, pids []int32) error {
	if len(pids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, sessionsExitTimeout)
	defer cancel()
	for {
		var left int
		if err := c.source.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)", pids).Scan(&left); err != nil {
			return fmt.Errorf("while waiting for the ended sessions of the source's database %s to exit (%d of them): %w", c.name, len(pids), err)
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d sessions of the source's database %s did not exit within %s of being ended", left, c.name, sessionsExitTimeout)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// resumeSourceWrites undoes stopSourceWrites after a failed cutover.
func resumeSourceWrites(ctx context.Context, dbs []cutoverDB) error {
	var errs []error
	for _, c := range dbs {
		if _, err := c.source.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RESET default_transaction_read_only", ident(c.name))); err != nil {
			errs = append(errs, fmt.Errorf("the source's database %s stays read-only: %w", c.name, err))
		}
	}
	return errors.Join(errs...)
}

// waitSlotConfirmed waits until the subscriber confirmed, as flushed, the
// source's WAL up to end.
func waitSlotConfirmed(ctx context.Context, c cutoverDB, end string) error {
	ctx, cancel := context.WithTimeout(ctx, cutoverTimeout)
	defer cancel()
	for {
		var done bool
		err := c.source.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1", c.subscription, end).Scan(&done)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("the source has no slot %s for the database %s", c.subscription, c.name)
		case err != nil:
			return fmt.Errorf("while waiting for the subscription %s to catch up: %w", c.subscription, err)
		case done:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the subscription %s of %s did not apply the source's changes up to %s within %s", c.subscription, c.name, end, cutoverTimeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Before the source turns read-only, the cutover waits up to
// nearTimeout for each subscription to be within nearLag bytes of the
// source's WAL, and refuses, the source untouched, when one is not: the
// rest would have to be applied with the source read-only. One apply
// worker commits each of the source's transactions in turn, each waiting
// for this cluster's synchronous standbys, so a source whose many clients
// commit together (sharing each flush) can write faster than it applies.
const (
	nearLag     = 1 << 20
	nearTimeout = 30 * time.Second
)

// waitSlotNear waits, while the source takes writes, until the slot of c
// lags by less than nearLag; it fails after nearTimeout.
func waitSlotNear(ctx context.Context, c cutoverDB) error {
	ctx, cancel := context.WithTimeout(ctx, nearTimeout)
	defer cancel()
	var lag int64 // the last read, for the refusal
	for {
		err := c.source.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1",
			c.subscription).Scan(&lag)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("the source has no slot %s for the database %s", c.subscription, c.name)
		case ctx.Err() != nil:
			return fmt.Errorf("the subscription %s of %s lags the source by %.1f MB and did not come within %d MB of it in %s: "+
				"the source writes faster than this cluster applies; it was not made read-only. Cut over when it writes less",
				c.subscription, c.name, float64(lag)/(1<<20), nearLag>>20, nearTimeout)
		case err != nil:
			return fmt.Errorf("while reading how far the subscription %s lags: %w", c.subscription, err)
		case lag < nearLag:
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// copySequences sets every sequence of the database to the source's value:
// logical replication carries rows, not sequences.
func copySequences(ctx context.Context, c cutoverDB) error {
	rows, err := c.source.Query(ctx, "SELECT format('%I.%I', schemaname, sequencename), last_value FROM pg_sequences WHERE last_value IS NOT NULL")
	if err != nil {
		return fmt.Errorf("while reading the source's sequences in %s: %w", c.name, err)
	}
	type seq struct {
		name  string
		value int64
	}
	seqs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (seq, error) {
		var s seq
		err := row.Scan(&s.name, &s.value)
		return s, err
	})
	if err != nil {
		return fmt.Errorf("while reading the source's sequences in %s: %w", c.name, err)
	}
	for _, s := range seqs {
		if _, err := c.local.Exec(ctx, "SELECT setval($1::regclass, $2, true)", s.name, s.value); err != nil {
			return fmt.Errorf("while setting the sequence %s of %s: %w", s.name, c.name, err)
		}
	}
	return nil
}
