package workload

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// sqlstateNames names the SQLSTATEs a failover or a fence produces.
var sqlstateNames = map[string]string{
	"23505": "unique_violation",
	"25006": "read_only_sql_transaction",
	"40001": "serialization_failure",
	"53300": "too_many_connections",
	"57014": "query_canceled",
	"57P01": "admin_shutdown",
	"57P02": "crash_shutdown",
	"57P03": "cannot_connect_now",
	"08006": "connection_failure",
	"42P01": "undefined_table",
	"28P01": "invalid_password",
}

// uniqueViolation is the kind of error of a rejected attempt.
const uniqueViolation = "unique_violation"

// ErrorKind classifies an error for the report: a SQLSTATE name for errors
// the server sent, otherwise timeout, canceled, connection_lost or network.
func ErrorKind(err error) string {
	var pgErr *pgconn.PgError
	var netErr net.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &pgErr):
		if name, ok := sqlstateNames[pgErr.Code]; ok {
			return name
		}
		return "sqlstate_" + pgErr.Code
	case errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "conn closed"):
		return "connection_lost"
	case errors.As(err, &netErr):
		return "network"
	}
	return "other"
}
