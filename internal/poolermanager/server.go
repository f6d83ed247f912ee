package poolermanager

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/netutil"

	"tusk.dev/tusk/internal/apiauth"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/poolerapi"
)

// serve serves the API on Options.Addr over HTTPS until the returned
// server is shut down; it fails at once when the address cannot be bound
// or the certificates cannot be read.
func (m *Manager) serve() (*http.Server, error) {
	files := &tlsFiles{cert: m.opts.TLSCert, key: m.opts.TLSKey, clientCA: m.opts.ClientCA}
	if _, err := files.config(); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", m.opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("while listening for API requests: %w", err)
	}
	gate := apiauth.Gate{
		OpenPaths:            []string{poolerapi.PathHealthz, poolerapi.PathReadyz, poolerapi.PathMetrics},
		OpenPathWriteTimeout: 10 * time.Second,
		CommonName:           instanceapi.DefaultAPIClientCN,
		Identity:             instanceapi.OperatorIdentity,
	}
	server := &http.Server{
		Handler:           gate.Wrap(m.routes()),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          log.New(logWriter{m.log.WithName("http")}, "", 0),
	}
	// The port is open to any pod where no NetworkPolicy is enforced:
	// however many connections they open, the manager (PID 1: its end is
	// the pod's) serves a bounded number at once.
	l = netutil.LimitListener(l, maxConnections)
	l = tls.NewListener(l, &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Each handshake takes the files as they are then: the operator
		// renews the certificates in the mounted Secret.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return files.config() },
	})
	m.log.Info("Serving the pooler API", "address", l.Addr().String())
	go func() {
		if err := server.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.log.Error(err, "The pooler API stopped")
		}
	}()
	return server, nil
}

// maxConnections bounds the API's connections served at once; more wait
// to be accepted. A connection that sends no request is closed after 5 s.
const maxConnections = 256

func (m *Manager) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+poolerapi.PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"alive": true})
	})
	mux.HandleFunc("GET "+poolerapi.PathReadyz, func(w http.ResponseWriter, r *http.Request) {
		ready, why := m.ready(r.Context())
		code := http.StatusOK
		if !ready {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]any{"ready": ready, "reason": why})
	})
	mux.Handle("GET "+poolerapi.PathMetrics, m.metrics.handler())
	mux.HandleFunc("GET "+poolerapi.PathStatus, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, m.Status(r.Context()))
	})
	mux.HandleFunc("POST "+poolerapi.PathPause, m.servePause)
	mux.HandleFunc("POST "+poolerapi.PathResume, m.serveResume)
	mux.HandleFunc("POST "+poolerapi.PathReconnect, func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
		defer cancel()
		_, err := m.admin.query(ctx, "RECONNECT")
		reply(w, map[string]string{"result": "reconnecting"}, err)
	})
	return mux
}

func (m *Manager) servePause(w http.ResponseWriter, r *http.Request) {
	var req poolerapi.PauseRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid pause request: " + err.Error()})
		return
	}
	res, err := m.pause.Pause(r.Context(), req)
	switch {
	case errors.Is(err, errInvalidPause):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
	case errors.Is(err, errBusy), errors.Is(err, errResumedWhileWaiting):
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
	default:
		reply(w, res, err)
	}
}

// serveResume ends the pause, once a primary answers when the request
// asks to wait for one (no body: at once).
func (m *Manager) serveResume(w http.ResponseWriter, r *http.Request) {
	var req poolerapi.ResumeRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid resume request: " + err.Error()})
		return
	}
	var found bool
	var waited time.Duration
	if req.WaitForPrimary > 0 {
		found, waited = m.waitForPrimary(r.Context(), req.WaitForPrimary)
	}
	res, err := m.pause.Resume(r.Context())
	res.PrimaryFound, res.PrimaryWaited = found, waited
	reply(w, res, err)
}

// waitForPrimary waits, at most bound, until the server PgBouncer uses
// answers as a primary; a failure to check is logged, and the resume goes
// on.
func (m *Manager) waitForPrimary(ctx context.Context, bound time.Duration) (bool, time.Duration) {
	check, err := readServerCheck(m.opts.Config)
	if err != nil {
		m.log.Error(err, "Cannot check the server before resuming; resuming at once")
		return false, 0
	}
	found, waited, err := check.waitForPrimary(ctx, bound)
	if !found {
		m.log.Info("No primary answered before the resume; resuming anyway", "waited", waited, "lastError", fmt.Sprint(err))
	}
	return found, waited
}

// reply answers value, or 500 with the error: PgBouncer failed a command.
func reply(w http.ResponseWriter, value any, err error) {
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, value)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

// tlsFiles is the API's TLS configuration, read again when a file
// changes.
type tlsFiles struct {
	cert, key, clientCA string

	mu      sync.Mutex
	stamp   string
	current *tls.Config
}

func (f *tlsFiles) config() (*tls.Config, error) {
	stamp, err := f.modified()
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if stamp == f.stamp && f.current != nil {
		return f.current, nil
	}
	pair, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("while loading the pooler API's certificate: %w", err)
	}
	caPEM, err := os.ReadFile(f.clientCA)
	if err != nil {
		return nil, fmt.Errorf("while loading the client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("the client CA %s holds no PEM certificate", f.clientCA)
	}
	f.stamp = stamp
	f.current = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{pair},
		// Verified when given; the gate then requires it on every path
		// but the probes' and the scrape's.
		ClientAuth: tls.VerifyClientCertIfGiven,
		ClientCAs:  pool,
	}
	return f.current, nil
}

// modified is the files' modification times and sizes: a renewed Secret
// changes them.
func (f *tlsFiles) modified() (string, error) {
	var b strings.Builder
	for _, name := range []string{f.cert, f.key, f.clientCA} {
		st, err := os.Stat(name)
		if err != nil {
			return "", fmt.Errorf("while reading the pooler API's TLS files: %w", err)
		}
		fmt.Fprintf(&b, "%d/%d;", st.ModTime().UnixNano(), st.Size())
	}
	return b.String(), nil
}
