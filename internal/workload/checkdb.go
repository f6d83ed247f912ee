package workload

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// CheckDatabase reads the ledger at ledgerPath and every row of table
// through dsn, then applies Check.
func CheckDatabase(ctx context.Context, dsn, table, ledgerPath string, opts CheckOptions) (*CheckReport, error) {
	recs, info, err := ReadLedgerFile(ledgerPath)
	if err != nil {
		return nil, err
	}
	rows, err := ReadRows(ctx, dsn, table)
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
