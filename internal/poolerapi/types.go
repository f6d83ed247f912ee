// Package poolerapi is the wire contract between the operator and the
// pooler manager (`tusk pooler`, PID 1 of every PgBouncer pod): what GET
// /status returns and what the operator may ask of a pooler. A leaf
// package (standard library only), like instanceapi, so that neither side
// imports the other.
//
// The pooler manager serves HTTPS on one port (DefaultPort, named
// "status" in the pod). /healthz, /readyz and /metrics are open (the
// kubelet's probes and a scrape present no certificate); every other path
// needs the operator's client certificate: signed by the cluster's client
// CA, with the operator's identity (instanceapi.OperatorIdentity).
package poolerapi

import "time"

// DefaultPort is the pooler manager's HTTPS port; PgBouncer listens on
// PgBouncerPort.
const (
	DefaultPort   = 8000
	PgBouncerPort = 5432
)

// Paths served by the pooler manager.
const (
	PathStatus  = "/status"
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
	PathMetrics = "/metrics"
	// PathPause pauses PgBouncer (POST, PauseRequest; PauseResult):
	// clients' new transactions wait in the pool while those running
	// finish, then PgBouncer closes its server connections, so that the
	// next ones, after PathResume, reach whatever the server's address
	// then names (the new primary, behind the -rw Service).
	PathPause = "/v1/pause"
	// PathResume ends a pause (POST, no body; ResumeResult). It succeeds
	// when PgBouncer is not paused, too.
	PathResume = "/v1/resume"
	// PathReconnect closes PgBouncer's server connections as each is
	// released (RECONNECT; POST, no body): after an unplanned failover,
	// no client keeps talking to a primary that fenced itself.
	PathReconnect = "/v1/reconnect"
)

// PauseRequest asks for a bounded pause.
type PauseRequest struct {
	// Wait bounds how long the pause may wait for running transactions to
	// finish: past it, the manager resumes PgBouncer and answers with
	// PauseResult.TimedOut (the switchover then goes on without a pause,
	// and its clients may see errors, rather than hang).
	Wait time.Duration `json:"wait"`
	// ResumeAfter bounds the whole pause, counted from the request: the
	// manager resumes PgBouncer by itself when no PathResume came by then
	// (an operator that died in a switchover never leaves clients
	// waiting for ever).
	ResumeAfter time.Duration `json:"resumeAfter"`
}

// PauseResult is what a pause did.
type PauseResult struct {
	// Paused says PgBouncer is paused: every server connection closed,
	// new transactions held.
	Paused bool `json:"paused"`
	// TimedOut says the running transactions outlasted Wait: PgBouncer was
	// resumed, and is not paused.
	TimedOut bool `json:"timedOut,omitempty"`
	// Waited is how long the pause took to take hold (or to time out).
	Waited time.Duration `json:"waited"`
}

// ResumeRequest (POST /v1/resume; no body is the zero request).
type ResumeRequest struct {
	// WaitForPrimary, when set, holds the resume until the server
	// PgBouncer connects to answers as a primary (not in recovery), at
	// most this long: PgBouncer keeps the server connections it opens, so
	// one opened on a former primary before the Service routing moved would
	// fail writes for as long as it lives. Past the bound the pooler
	// resumes anyway (PrimaryFound false).
	WaitForPrimary time.Duration `json:"waitForPrimary,omitempty"`
}

// ResumeResult is what a resume did.
type ResumeResult struct {
	// WasPaused says a pause was ended; PausedFor is how long it lasted.
	WasPaused bool          `json:"wasPaused"`
	PausedFor time.Duration `json:"pausedFor,omitempty"`
	// PrimaryFound says a primary answered before the resume (with
	// WaitForPrimary), after PrimaryWaited.
	PrimaryFound  bool          `json:"primaryFound,omitempty"`
	PrimaryWaited time.Duration `json:"primaryWaited,omitempty"`
}

// Status is the pooler manager's report (GET /status).
type Status struct {
	// Ready says PgBouncer accepts clients and the pod is not stopping.
	Ready bool `json:"ready"`
	// Paused says a pause holds clients now; PausedSince when it took
	// hold.
	Paused      bool       `json:"paused"`
	PausedSince *time.Time `json:"pausedSince,omitempty"`
	// Version is PgBouncer's (SHOW VERSION).
	Version string `json:"version,omitempty"`
	// Pools are PgBouncer's pools (SHOW POOLS).
	Pools []Pool `json:"pools,omitempty"`
	// Error says why the report is partial (PgBouncer's admin console did
	// not answer).
	Error string `json:"error,omitempty"`
}

// Pool is one of PgBouncer's pools: a database and user pair.
type Pool struct {
	Database      string `json:"database"`
	User          string `json:"user"`
	ClientsActive int    `json:"clientsActive"`
	// ClientsWaiting wait for a server connection; MaxWait is how long
	// the oldest has waited.
	ClientsWaiting int           `json:"clientsWaiting"`
	ServersActive  int           `json:"serversActive"`
	ServersIdle    int           `json:"serversIdle"`
	MaxWait        time.Duration `json:"maxWait"`
}
