// Package workload is the writer and the checker that prove no acknowledged
// write is lost, and that two primaries never accepted writes at once. It
// imports nothing of the operator or the instance manager: it talks to
// PostgreSQL through a DSN (in a cluster, the `<cluster>-rw` Service) and
// keeps its evidence in a local ledger file.
//
// # Writer
//
// Write runs N clients. Each appends one row per autocommit transaction,
// (run, client, seq) with seq = 1, 2, 3… per client; the server fills in
// who committed it (host(inet_server_addr())), when (clock_timestamp()) and
// the WAL position (pg_current_wal_lsn()), and returns them. Before each
// INSERT the client appends a "try" record to the ledger; after it, an
// "ack" record (the commit returned without error) or an "unknown" record
// (an error: the commit may or may not have happened, since a failover can
// cut the acknowledgement). After an error the client reconnects with a
// short backoff and goes on with the NEXT seq: a seq is never retried, so a
// unique violation on the primary key is a bug, recorded as "rejected" and
// reported by both the writer and the checker.
//
// # Ledger
//
// The ledger is append-only JSON lines, one record per line, each written
// with a single write(2) (so a killed writer leaves complete lines, at most
// the last one cut short, which readers skip) and fsync'ed every second and
// on exit. See Record for the fields.
//
// # Checker rules
//
// Check reads every row of the run(s) in the ledger back and compares:
//
//   - LOST: acknowledged in the ledger, absent from the table. A failure
//     (in asynchronous mode, expected and bounded by the lag; see MaxLost).
//   - DUPLICATE: the same (run, client, seq) present twice (only possible in
//     a table without the primary key) or rejected by the key constraint.
//     A failure.
//   - PHANTOM: present in the table but never attempted according to the
//     ledger. A failure.
//   - unknown-present / unknown-absent: attempts whose outcome the writer
//     does not know (an error, or the writer stopped mid-INSERT); either way
//     is fine, both are counted.
//   - rows of runs the ledger does not name are counted and ignored.
//
// # Split brain
//
// With a window W > 0, the checker also looks for interleavings: every
// commit it knows of (rows in the table, and the acknowledgements in the
// ledger, which survive even when the table lost the rows of a deposed
// primary) is put in order of server commit time and cut into runs of
// consecutive commits by the same server. A clean handover is A…A B…B. An
// interleaving is a run of server A that resumes less than W after an
// earlier run of A ended, with another server's run in between:
// A…A B…B A…A within W. That means A and B both accepted writes within W of
// each other, which a failover (fence, then promote) and even a switchover
// back and forth cannot do faster than W when W is chosen below the fastest
// legitimate A→B→A round trip and above the clock skew between the
// servers' hosts (server times come from each server's clock).
//
// # Incremental checks
//
// CheckDatabaseSince is the live check of a caller that checks again and
// again while the writer runs (after every fault of a chaos run). It keeps
// a checkpoint of what it proved: the ledger's offset read, for each client
// the seq up to which every attempt has its outcome and was checked, and
// the count and hash sum of those rows. The next check reads only the
// ledger from there and the rows above those seqs, and proves with one
// aggregate query that the verified rows are all there, unchanged. What
// it cannot place exactly (a verified row lost or changed, a record out
// of place) sends it back to the start: its report is always Check's.
package workload
