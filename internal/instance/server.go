package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
)

// startHTTP serves status, probes, metrics and the operator's commands.
// Plain HTTP for now; TLS with client certificates comes with the cluster
// lifecycle, and nothing here assumes plain HTTP. It fails at once when the
// address cannot be bound: an instance nobody can see must not run.
func (m *Manager) startHTTP() (*http.Server, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+instanceapi.PathStatus, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, m.Status(r.Context()))
	})
	mux.HandleFunc("GET "+instanceapi.PathHealthz, m.serveHealthz)
	mux.HandleFunc("GET "+instanceapi.PathReadyz, func(w http.ResponseWriter, r *http.Request) {
		st := m.Status(r.Context())
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
	mux.HandleFunc("POST "+instanceapi.PathStepDown, withUpstreamResult(m.StepDown))
	mux.HandleFunc("POST "+instanceapi.PathRestart, func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"result": "restarted"}, m.Restart(r.Context()))
	})
	mux.HandleFunc("PUT "+instanceapi.PathConfig, func(w http.ResponseWriter, r *http.Request) {
		var cfg instanceapi.Config
		if err := json.NewDecoder(r.Body).Decode(&cfg); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid configuration: " + err.Error()})
			return
		}
		res, err := m.ApplyConfig(r.Context(), cfg)
		reply(w, res, err)
	})
	server := &http.Server{Addr: m.opts.HTTPAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	l, err := net.Listen("tcp", server.Addr)
	if err != nil {
		return nil, fmt.Errorf("while listening for status requests: %w", err)
	}
	m.log.Info("Serving status", "address", l.Addr().String())
	go func() {
		if err := server.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.setError(err)
		}
	}()
	return server, nil
}

// serveHealthz answers the liveness probe. It reflects the manager, not
// postgres: the manager restarts postgres itself, and a long crash recovery
// must not get the pod killed and the recovery started over.
func (m *Manager) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	st := m.snapshot()
	writeJSON(w, http.StatusOK, map[string]any{"phase": st.phase})
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
