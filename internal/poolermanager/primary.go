package poolermanager

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A switchover resumes a pooler only once a primary answers where
// PgBouncer's server connections go (the -rw Service, through this node's
// Service routing): PgBouncer keeps the server connections it opens, so
// one opened on a former primary that restarted as a replica, before the
// Service routing moved, would fail its clients' writes (read-only) for as
// long as it lives. Measured before this check on the local cluster: 6 to
// 9 s of read_only_sql_transaction errors after a switchover's resume.

// serverCheck is how the manager logs in to the server PgBouncer uses, as
// PgBouncer logs in to look users up: the auth role, with its client
// certificate, verifying the server.
type serverCheck struct {
	connString string
}

// primaryCheckEvery is how often the server is asked while it is not a
// primary yet.
const primaryCheckEvery = 50 * time.Millisecond

// readServerCheck reads from the ini the server of the database "*" and
// the auth role's login: auth_user, auth_dbname and the server_tls_* files.
func readServerCheck(path string) (serverCheck, error) {
	keys, err := readINI(path)
	if err != nil {
		return serverCheck{}, err
	}
	server := keys["databases.*"]
	if server == "" || keys["pgbouncer.auth_user"] == "" {
		return serverCheck{}, fmt.Errorf("PgBouncer's configuration %s names no server for * or no auth_user", path)
	}
	// The database line is a libpq-style list (host=… port=…); the rest
	// are file names and role names Tusk wrote.
	conn := fmt.Sprintf("%s user=%s dbname=%s sslmode=verify-full sslrootcert=%s sslcert=%s sslkey=%s connect_timeout=1",
		server, keys["pgbouncer.auth_user"], keys["pgbouncer.auth_dbname"],
		keys["pgbouncer.server_tls_ca_file"], keys["pgbouncer.server_tls_cert_file"], keys["pgbouncer.server_tls_key_file"])
	return serverCheck{connString: conn}, nil
}

// isPrimary says whether the server answers, and is not in recovery.
func (s serverCheck) isPrimary(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, s.connString)
	if err != nil {
		return false, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	results, err := conn.Exec(ctx, "SELECT pg_catalog.pg_is_in_recovery()").ReadAll()
	if err != nil {
		return false, err
	}
	if len(results) != 1 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) != 1 {
		return false, fmt.Errorf("pg_is_in_recovery() answered %d results", len(results))
	}
	return string(results[0].Rows[0][0]) == "f", nil
}

// waitForPrimary asks the server until it answers as a primary, at most
// for bound; it says whether one did, and how long it took.
func (s serverCheck) waitForPrimary(ctx context.Context, bound time.Duration) (bool, time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var last error
	for {
		primary, err := s.isPrimary(ctx)
		if primary {
			return true, time.Since(start), nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return false, time.Since(start), last
		case <-time.After(primaryCheckEvery):
		}
	}
}
