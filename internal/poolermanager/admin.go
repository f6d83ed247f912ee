package poolermanager

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"tusk.dev/tusk/internal/poolerapi"
)

// adminTimeout bounds each admin command but PAUSE (whose bound is the
// request's Wait).
const adminTimeout = 5 * time.Second

// adminConsole reaches PgBouncer's admin console over its Unix socket as
// the user pgbouncer: PgBouncer lets that user in without a password from
// a process of its own OS user, which the manager is. The console speaks
// the simple query protocol only: pgconn's Exec is that protocol, and
// returns the text of each value, which is what SHOW's columns are.
type adminConsole struct {
	dir  string
	port int
}

func (a *adminConsole) connect(ctx context.Context) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(fmt.Sprintf("host=%s port=%d user=pgbouncer dbname=pgbouncer sslmode=disable", a.dir, a.port))
	if err != nil {
		return nil, err
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("while connecting to PgBouncer's admin console: %w", err)
	}
	return conn, nil
}

// rows are a SHOW's rows, each a map from column to text.
type rows []map[string]string

// query runs one admin command on a session of its own.
func (a *adminConsole) query(ctx context.Context, command string) (rows, error) {
	conn, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	return run(ctx, conn, command)
}

// run runs command on conn.
func run(ctx context.Context, conn *pgconn.PgConn, command string) (rows, error) {
	results, err := conn.Exec(ctx, command).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", command, err)
	}
	var out rows
	for _, res := range results {
		for _, values := range res.Rows {
			row := make(map[string]string, len(values))
			for i, f := range res.FieldDescriptions {
				row[f.Name] = string(values[i])
			}
			out = append(out, row)
		}
	}
	return out, nil
}

func (a *adminConsole) version(ctx context.Context) (string, error) {
	r, err := a.query(ctx, "SHOW VERSION")
	if err != nil {
		return "", err
	}
	if len(r) == 0 {
		return "", fmt.Errorf("SHOW VERSION returned no row")
	}
	return r[0]["version"], nil
}

// pools are SHOW POOLS' pools, the admin console's own (database
// pgbouncer) left out.
func (a *adminConsole) pools(ctx context.Context) ([]poolerapi.Pool, error) {
	r, err := a.query(ctx, "SHOW POOLS")
	if err != nil {
		return nil, err
	}
	var pools []poolerapi.Pool
	for _, row := range r {
		if row["database"] == "pgbouncer" {
			continue
		}
		pools = append(pools, poolerapi.Pool{
			Database: row["database"], User: row["user"],
			ClientsActive: number(row["cl_active"]), ClientsWaiting: number(row["cl_waiting"]),
			ServersActive: number(row["sv_active"]), ServersIdle: number(row["sv_idle"]),
			MaxWait: time.Duration(number(row["maxwait"]))*time.Second + time.Duration(number(row["maxwait_us"]))*time.Microsecond,
		})
	}
	return pools, nil
}

// number is a SHOW column's integer; 0 when the column is missing (an
// older or newer PgBouncer) or not a number.
func number(s string) int {
	n, _ := strconv.Atoi(strings.TrimSpace(s))
	return n
}
