package instance

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/netutil"

	"tusk.dev/tusk/internal/apiauth"
	"tusk.dev/tusk/internal/instanceapi"
)

// startHTTP serves status, probes, metrics and the operator's commands:
// over HTTPS with the server certificate when the cluster has one (see
// requireClientCert), plain HTTP otherwise. It fails at once when the
// address cannot be bound: an instance nobody can see must not run.
func (m *Manager) startHTTP() (*http.Server, error) {
	l, err := net.Listen("tcp", m.opts.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("while listening for status requests: %w", err)
	}
	return m.serveHTTP(l), nil
}

// HTTPLimits bound what the clients of the manager's port may hold. The
// port is open to the operator and, where no NetworkPolicy is enforced,
// to any pod: whatever they do, the manager (PID 1 of the pod: its end is
// the instance's) must not run out of memory serving them.
type HTTPLimits struct {
	// MaxConnections is how many connections are served at once
	// (DefaultMaxHTTPConnections when zero); more wait to be accepted. A
	// connection that sends no request is closed after 5 s (the header
	// timeout).
	MaxConnections int
	// MaxConnectionsPerSource is how many of them one address may hold
	// (DefaultMaxHTTPConnectionsPerSource when zero); one more is closed at
	// once. So one hostile pod cannot take every connection, and the
	// kubelet's probes (from the node's address) and the operator's
	// commands (from its pod's) are still served.
	MaxConnectionsPerSource int
	// IdleTimeout closes a kept-alive connection that sent nothing for
	// that long (DefaultHTTPIdleTimeout when zero).
	IdleTimeout time.Duration
}

// Defaults of HTTPLimits: the operator and a Prometheus hold a few
// connections each, the kubelet's probes one at a time.
const (
	DefaultMaxHTTPConnections          = 1024
	DefaultMaxHTTPConnectionsPerSource = 32
	DefaultHTTPIdleTimeout             = 90 * time.Second
	// openPathWriteTimeout bounds writing a probe's or a scrape's answer to
	// a client that does not read it. The commands have no such bound:
	// some (a demote's rewind) take minutes, and only the operator may
	// send them.
	openPathWriteTimeout = 10 * time.Second
)

// serveHTTP serves the API on l until the returned server is shut down.
func (m *Manager) serveHTTP(l net.Listener) *http.Server {
	limits := m.opts.HTTPLimits
	server := &http.Server{
		Handler:           m.requireClientCert(m.routes()),
		ReadHeaderTimeout: 5 * time.Second, // the TLS handshake's bound too
		IdleTimeout:       cmp.Or(limits.IdleTimeout, DefaultHTTPIdleTimeout),
		// Such as refused TLS handshakes, as JSON records like the rest.
		ErrorLog: log.New(logWriter{m.log.WithName("http")}, "", 0),
	}
	l = netutil.LimitListener(l, cmp.Or(limits.MaxConnections, DefaultMaxHTTPConnections))
	l = limitPerSource(l, cmp.Or(limits.MaxConnectionsPerSource, DefaultMaxHTTPConnectionsPerSource), m.log)
	scheme := "http"
	if m.serverCerts != nil {
		// Each handshake takes the certificate in use at that moment.
		l = tls.NewListener(l, &tls.Config{
			MinVersion:         tls.VersionTLS12,
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return m.https.Load(), nil },
		})
		scheme = "https"
	}
	m.log.Info("Serving status", "address", l.Addr().String(), "scheme", scheme)
	go func() {
		if err := server.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.setError(err)
		}
	}()
	return server
}

// logWriter turns the HTTP server's log lines into records.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

// openPaths are served without a client certificate: the kubelet's HTTPS
// probes present none, and metrics hold nothing a scrape may not see.
var openPaths = []string{instanceapi.PathHealthz, instanceapi.PathReadyz, instanceapi.PathMetrics}

// requireClientCert lets through to /status and the commands only requests
// with a client certificate from the cluster's CA (verified in the
// handshake) whose CommonName is the operator's and that names the
// operator's identity (apiauth.Gate). Without TLS it lets everything
// through.
func (m *Manager) requireClientCert(next http.Handler) http.Handler {
	return apiauth.Gate{
		NoTLS:                m.serverCerts == nil,
		OpenPaths:            openPaths,
		OpenPathWriteTimeout: openPathWriteTimeout,
		CommonName:           cmp.Or(m.opts.TLS.APIClientCN, instanceapi.DefaultAPIClientCN),
		Identity:             instanceapi.OperatorIdentity,
	}.Wrap(next)
}

// routes are the HTTP API's handlers.
func (m *Manager) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+instanceapi.PathStatus, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, m.Status(r.Context()))
	})
	mux.HandleFunc("GET "+instanceapi.PathHealthz, m.serveHealthz)
	mux.HandleFunc("GET "+instanceapi.PathReadyz, func(w http.ResponseWriter, r *http.Request) {
		st := m.ObservedStatus(r.Context())
		code := http.StatusOK
		if !st.Ready {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]any{"ready": st.Ready, "phase": st.Phase, "role": st.Role})
	})
	mux.Handle("GET "+instanceapi.PathMetrics, m.metrics.handler())
	mux.HandleFunc("POST "+instanceapi.PathPromote, func(w http.ResponseWriter, r *http.Request) {
		res, err := m.Promote(r.Context())
		reply(w, res, err)
	})
	mux.HandleFunc("POST "+instanceapi.PathDemote, m.withUpstream(m.Demote))
	mux.HandleFunc("POST "+instanceapi.PathFollow, m.withUpstream(m.Follow))
	mux.HandleFunc("POST "+instanceapi.PathReconnect, func(w http.ResponseWriter, r *http.Request) {
		res, err := m.Reconnect(r.Context())
		reply(w, res, err)
	})
	mux.HandleFunc("POST "+instanceapi.PathStepDown, withUpstreamResult(m.StepDown))
	mux.HandleFunc("POST "+instanceapi.PathRestart, func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"result": "restarted"}, m.Restart(r.Context()))
	})
	mux.HandleFunc("POST "+instanceapi.PathFence, func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"result": "fenced"}, m.Fence(r.Context()))
	})
	mux.HandleFunc("POST "+instanceapi.PathUnfence, func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"result": "unfenced"}, m.Unfence(r.Context()))
	})
	mux.HandleFunc("POST "+instanceapi.PathBackups, m.serveStartBackup)
	mux.HandleFunc("GET "+instanceapi.PathBackups+"/{name}", m.serveBackupStatus)
	mux.HandleFunc("POST "+instanceapi.PathWALSwitch, m.serveWALSwitch)
	mux.HandleFunc("POST "+instanceapi.PathCheckpoint, serveResult(m.Checkpoint))
	mux.HandleFunc("PUT "+instanceapi.PathConfig, func(w http.ResponseWriter, r *http.Request) {
		var cfg instanceapi.Config
		if err := json.NewDecoder(r.Body).Decode(&cfg); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid configuration: " + err.Error()})
			return
		}
		res, err := m.ApplyConfig(r.Context(), cfg)
		if errors.Is(err, errInvalidConfig) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		reply(w, res, err)
	})
	sql := m.sqlObjects()
	mux.HandleFunc("PUT "+instanceapi.PathSQLRoles, serveApply(sql.ApplyRole))
	mux.HandleFunc("PUT "+instanceapi.PathSQLDatabases, serveApply(sql.ApplyDatabase))
	mux.HandleFunc("PUT "+instanceapi.PathSQLPublications, serveApply(sql.ApplyPublication))
	mux.HandleFunc("PUT "+instanceapi.PathSQLSubscriptions, serveApply(sql.ApplySubscription))
	mux.HandleFunc("GET "+instanceapi.PathSQLSlots, m.serveSlots)
	mux.HandleFunc("POST "+instanceapi.PathImportCutover, m.serveImportCutover)
	mux.HandleFunc("POST "+instanceapi.PathUpgradePrecheck, serveResult(m.UpgradePrecheck))
	mux.HandleFunc("POST "+instanceapi.PathImportAbandon, serveResult(m.AbandonImport))
	mux.HandleFunc("POST "+instanceapi.PathEndSessions, serveResult(m.EndClientSessions))
	return mux
}

// serveResult answers a request with fn's result, or its error.
func serveResult[T any](fn func(context.Context) (T, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		res, err := fn(r.Context())
		reply(w, res, err)
	}
}

// serveHealthz answers the liveness probe. It reflects the manager, not
// postgres: the manager restarts postgres itself, and a long crash recovery
// must not get the pod killed and the recovery started over.
func (m *Manager) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	st := m.snapshot()
	writeJSON(w, http.StatusOK, map[string]any{"phase": st.life.Phase()})
}

func (m *Manager) withUpstream(fn func(context.Context, instanceapi.Upstream) error) http.HandlerFunc {
	return withUpstreamResult(func(ctx context.Context, up instanceapi.Upstream) (map[string]string, error) {
		return map[string]string{"result": "ok"}, fn(ctx, up)
	})
}

// withUpstreamResult decodes a FollowRequest and replies with fn's result.
func withUpstreamResult[T any](fn func(context.Context, instanceapi.Upstream) (T, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req instanceapi.FollowRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Upstream.Host == "" || req.Upstream.Port == 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the request needs upstream.host and upstream.port"})
			return
		}
		res, err := fn(r.Context(), req.Upstream)
		reply(w, res, err)
	}
}

func reply(w http.ResponseWriter, value any, err error) {
	if err != nil {
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, value)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
