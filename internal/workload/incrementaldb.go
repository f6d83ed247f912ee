package workload

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// CheckDatabaseSince is CheckDatabase for a live check that comes back
// again and again while the writer runs (the chaos test's, after every
// fault), at a cost in proportion to what was written since the last one.
// It keeps in the file at statePath what it proved: how far it read the
// ledger, and for each client the seq up to which every attempt has its
// outcome and was checked, with the count and hash sum of those rows. The
// next check reads only the ledger from there and the rows above those
// seqs, and proves with one aggregate query that the verified rows are all
// still there, unchanged. When that proof fails (an old row was lost), or
// anything else is not as it expects, it checks from the start, so its
// report is always the one CheckDatabase would give. opts.Live must be
// set: the final check, once the writer stopped, is CheckDatabase's.
func CheckDatabaseSince(ctx context.Context, dsn, table, ledgerPath, statePath string, readTimeout time.Duration, opts CheckOptions) (*CheckReport, error) {
	if !opts.Live {
		return nil, errors.New("an incremental check is a live check (CheckOptions.Live)")
	}
	setDefault(&opts.GapThreshold, time.Second)
	in := incrementalCheck{dsn: dsn, table: table, ledger: ledgerPath, readTimeout: readTimeout, opts: opts}
	st, fromStart := loadCheckState(statePath, table, opts)
	rep, next, why, err := in.since(ctx, st)
	if err == nil && why != "" && !st.fresh() {
		fromStart = why
		rep, next, why, err = in.since(ctx, newCheckState(table, opts))
	}
	if err != nil {
		return nil, err
	}
	if why != "" {
		return in.full(ctx, statePath, why)
	}
	rep.Incremental.FromStartBecause = fromStart
	if err := next.save(statePath); err != nil {
		return nil, err
	}
	return rep, nil
}

// incrementalCheck is one CheckDatabaseSince's arguments.
type incrementalCheck struct {
	dsn, table, ledger string
	readTimeout        time.Duration
	opts               CheckOptions
}

// since checks from st on; why says why it could not, if so.
func (in incrementalCheck) since(ctx context.Context, st *checkState) (*CheckReport, *checkState, string, error) {
	recs, mark, info, why, err := readLedgerSince(in.ledger, st.Ledger)
	if err != nil || why != "" {
		return nil, nil, why, err
	}
	if why := st.validate(recs); why != "" {
		return nil, nil, why, nil
	}
	readCtx, cancel := ctx, context.CancelFunc(func() {})
	if in.readTimeout > 0 {
		readCtx, cancel = context.WithTimeout(ctx, in.readTimeout)
	}
	snap, err := readSnapshot(readCtx, in.dsn, in.table, st, st.runsWith(recs))
	cancel()
	if err != nil {
		return nil, nil, "", err
	}
	rep, next, why := st.advance(recs, snap, in.opts)
	if why != "" {
		return nil, nil, why, nil
	}
	rep.Ledger = info
	rep.Incremental.LedgerFrom = st.Ledger.Offset
	next.Ledger = mark
	return rep, next, "", nil
}

// full is CheckDatabase, for when an incremental check cannot decide even
// from the start; it keeps no checkpoint.
func (in incrementalCheck) full(ctx context.Context, statePath, why string) (*CheckReport, error) {
	if err := os.Remove(statePath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("while removing the check's state: %w", err)
	}
	rep, err := CheckDatabase(ctx, in.dsn, in.table, in.ledger, in.readTimeout, in.opts)
	if err != nil {
		return nil, err
	}
	rep.Incremental = &IncrementalInfo{FullBecause: why}
	return rep, nil
}

// loadCheckState reads the state an earlier check kept at path. When there
// is none, or it cannot be used, it returns a fresh state and why.
func loadCheckState(path, table string, opts CheckOptions) (*checkState, string) {
	b, err := os.ReadFile(path) //nolint:gosec // the path the user chose
	if errors.Is(err, fs.ErrNotExist) {
		return newCheckState(table, opts), "no checkpoint yet"
	}
	if err != nil {
		return newCheckState(table, opts), fmt.Sprintf("the checkpoint could not be read: %v", err)
	}
	st := &checkState{}
	if err := json.Unmarshal(b, st); err != nil {
		return newCheckState(table, opts), fmt.Sprintf("the checkpoint does not parse: %v", err)
	}
	fresh := newCheckState(table, opts)
	if st.Version != fresh.Version || st.Table != table || st.SplitBrainWindow != fresh.SplitBrainWindow || st.GapThreshold != fresh.GapThreshold {
		return fresh, "the checkpoint is of another version, table, split-brain window or gap threshold"
	}
	for _, m := range st.Clients {
		if _, ok := new(big.Int).SetString(cmp.Or(m.Sum, "0"), 10); !ok {
			return fresh, fmt.Sprintf("the checkpoint's hash sum %q is not a number", m.Sum)
		}
	}
	return st, ""
}

// save writes the state at path, replacing the file at once.
func (st *checkState) save(path string) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("while encoding the check's state: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("while writing the check's state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("while writing the check's state: %w", err)
	}
	return nil
}

// ledgerMark is how far a check read the ledger, with a fingerprint of
// the bytes before: a ledger replaced or rewritten since does not match.
type ledgerMark struct {
	Offset int64 `json:"offset"`
	// Head and Tail are the SHA-256 sums of the first and of the last
	// fingerprintBytes (or fewer) before Offset.
	Head string `json:"head,omitempty"`
	Tail string `json:"tail,omitempty"`
}

const fingerprintBytes = 4096

func markLedger(f io.ReaderAt, offset int64) (ledgerMark, error) {
	m := ledgerMark{Offset: offset}
	var err error
	if m.Head, err = sumRange(f, 0, min(offset, fingerprintBytes)); err != nil {
		return m, err
	}
	m.Tail, err = sumRange(f, max(0, offset-fingerprintBytes), offset)
	return m, err
}

func sumRange(f io.ReaderAt, from, to int64) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, from, to-from)); err != nil {
		return "", fmt.Errorf("while reading the ledger: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// readLedgerSince reads the ledger's complete lines from mark on, and
// returns their records and where the next read starts. why says why it
// cannot: the ledger is not the one mark was taken of.
func readLedgerSince(path string, mark ledgerMark) (recs []Record, next ledgerMark, info LedgerInfo, why string, err error) {
	f, err := os.Open(path) //nolint:gosec // the path the user chose
	if err != nil {
		return nil, next, info, "", fmt.Errorf("while opening the ledger: %w", err)
	}
	defer func() { _ = f.Close() }()
	if mark.Offset > 0 {
		fi, err := f.Stat()
		if err != nil {
			return nil, next, info, "", fmt.Errorf("while reading the ledger: %w", err)
		}
		if fi.Size() < mark.Offset {
			return nil, next, info, fmt.Sprintf("the ledger is shorter (%d bytes) than the %d bytes checked", fi.Size(), mark.Offset), nil
		}
		if now, err := markLedger(f, mark.Offset); err != nil || now != mark {
			return nil, next, info, "the ledger's bytes checked before changed", err
		}
	}
	var piece strings.Builder // its String is not a copy
	if _, err := io.Copy(&piece, io.NewSectionReader(f, mark.Offset, 1<<62)); err != nil {
		return nil, next, info, "", fmt.Errorf("while reading the ledger: %w", err)
	}
	tail := ResumeLedgerTail(mark.Offset)
	if err := tail.Feed(piece.String()); err != nil {
		return nil, next, info, "", err
	}
	info.TruncatedTail = strings.TrimSpace(piece.String()[tail.Offset()-mark.Offset:]) != ""
	next, err = markLedger(f, tail.Offset())
	return tail.Records(), next, info, "", err
}

// rowHashSQL is a row's hash: its seq, server and commit time (in UTC, so
// no session setting changes it); the aggregate query sums it per client.
const rowHashSQL = `(hashtextextended(t.server, t.seq) # timestamp_hash_extended(t.committed_at AT TIME ZONE 'UTC', t.seq))`

// groupsSQL counts the rows of every (run, client) of the table, and
// counts and sums the hashes of those at or below its verified seq: one
// pass over the table, in the server.
func groupsSQL(table string) string {
	return `SELECT t.run, t.client, count(*), count(*) FILTER (WHERE t.seq <= v.verified),
	coalesce(sum(` + rowHashSQL + `) FILTER (WHERE t.seq <= v.verified), 0)::text
	FROM ` + table + ` t LEFT JOIN unnest($1::text[], $2::int[], $3::bigint[]) AS v(run, client, verified)
	ON v.run = t.run AND v.client = t.client
	GROUP BY t.run, t.client`
}

// rowsAboveSQL reads a client's rows above a seq, through the primary key.
func rowsAboveSQL(table string) string {
	return `SELECT t.run, t.client, t.seq, t.server, t.committed_at, ` + rowHashSQL + `
	FROM ` + table + ` t WHERE t.run = $1 AND t.client = $2 AND t.seq > $3`
}

// readSnapshot reads, in one repeatable-read transaction, the counts and
// sums of every client's rows and the rows of the ledger's runs above the
// verified seqs. Each statement is planned with its values (not a generic
// plan), so a client's new rows are read through the primary key.
func readSnapshot(ctx context.Context, dsn, table string, st *checkState, runs map[string]bool) (*snapshot, error) {
	quoted, err := quoteTable(table)
	if err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("while parsing the DSN: %w", err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("while connecting: %w", err)
	}
	defer closeConn(conn)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("while reading table %s: %w", table, err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // it only read
	snap := &snapshot{}
	if snap.groups, err = readGroups(ctx, tx, quoted, st.verifiedMarks()); err != nil {
		return nil, fmt.Errorf("while counting the rows of table %s: %w", table, err)
	}
	if snap.rows, err = readRowsAbove(ctx, tx, quoted, st.rowsToRead(snap.groups, runs)); err != nil {
		return nil, fmt.Errorf("while reading table %s: %w", table, err)
	}
	return snap, nil
}

func readGroups(ctx context.Context, tx pgx.Tx, table string, verified []clientMark) ([]groupCount, error) {
	var (
		runs    []string
		clients []int32
		seqs    []int64
	)
	for _, m := range verified {
		runs, clients, seqs = append(runs, m.Run), append(clients, int32(m.Client)), append(seqs, m.Verified) //nolint:gosec // client numbers are small
	}
	res, err := tx.Query(ctx, groupsSQL(table), runs, clients, seqs)
	if err != nil {
		return nil, err
	}
	var (
		out []groupCount
		g   groupCount
		sum string
	)
	_, err = pgx.ForEachRow(res, []any{&g.id.run, &g.id.client, &g.rows, &g.verified, &sum}, func() error {
		var ok bool
		if g.sum, ok = new(big.Int).SetString(sum, 10); !ok {
			return fmt.Errorf("a hash sum %q that is not an integer", sum)
		}
		out = append(out, g)
		return nil
	})
	return out, err
}

func readRowsAbove(ctx context.Context, tx pgx.Tx, table string, above []clientMark) ([]hashedRow, error) {
	batch := &pgx.Batch{}
	for _, m := range above {
		batch.Queue(rowsAboveSQL(table), m.Run, m.Client, m.Verified)
	}
	results := tx.SendBatch(ctx, batch)
	var out []hashedRow
	for range above {
		res, err := results.Query()
		if err != nil {
			_ = results.Close()
			return nil, err
		}
		var r hashedRow
		_, err = pgx.ForEachRow(res, []any{&r.Run, &r.Client, &r.Seq, &r.Server, &r.CommittedAt, &r.hash}, func() error {
			out = append(out, r)
			return nil
		})
		if err != nil {
			_ = results.Close()
			return nil, err
		}
	}
	return out, results.Close()
}
