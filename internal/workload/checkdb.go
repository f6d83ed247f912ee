package workload

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// CheckDatabase reads the ledger at ledgerPath and every row of table
// through dsn, then applies Check. readTimeout (when positive) bounds
// connecting and reading the table, the one step that waits on the
// network: a caller that tries again after a failure can then tell a check
// that cannot reach the server from one that is busy with a long ledger,
// whose reading and comparing take time in proportion to its length.
func CheckDatabase(ctx context.Context, dsn, table, ledgerPath string, readTimeout time.Duration, opts CheckOptions) (*CheckReport, error) {
	recs, info, err := ReadLedgerFile(ledgerPath)
	if err != nil {
		return nil, err
	}
	readCtx, cancel := ctx, context.CancelFunc(func() {})
	if readTimeout > 0 {
		readCtx, cancel = context.WithTimeout(ctx, readTimeout)
	}
	rows, err := ReadRows(readCtx, dsn, table)
	cancel()
	if err != nil {
		return nil, err
	}
	rep := Check(recs, rows, opts)
	rep.Ledger = info
	return rep, nil
}

// ReadRows reads every row of the workload's table.
func ReadRows(ctx context.Context, dsn, table string) ([]Row, error) {
	quoted, err := quoteTable(table)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("while connecting: %w", err)
	}
	defer closeConn(conn)
	res, err := conn.Query(ctx, selectSQL(quoted))
	if err != nil {
		return nil, fmt.Errorf("while reading table %s: %w", table, err)
	}
	var (
		rows []Row
		r    Row
	)
	_, err = pgx.ForEachRow(res, []any{&r.Run, &r.Client, &r.Seq, &r.Server, &r.CommittedAt}, func() error {
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("while reading table %s: %w", table, err)
	}
	return rows, nil
}
