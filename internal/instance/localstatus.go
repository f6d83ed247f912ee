package instance

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
)

// LocalStatusSocket is the name, in the manager's run directory, of the
// Unix socket on which it serves its /status, read only, to processes of
// its own pod: `tusk instance status`, which `kubectl tusk report` runs
// through kubectl exec, as the TCP port takes the operator's client
// certificate only. Whoever may exec in the pod may read its Secrets
// already; the socket (mode 0600, in a directory only the pod mounts)
// gives nobody more.
const LocalStatusSocket = "status.sock"

// serveLocalStatus serves GET /status on the run directory's socket until
// the returned server is shut down. It is a convenience for support: when
// the socket cannot be made the manager runs on and says why (nil server).
func (m *Manager) serveLocalStatus() *http.Server {
	path := filepath.Join(m.opts.RunDir, LocalStatusSocket)
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) { // a previous run's
		m.log.Error(err, "Not serving the status on a local socket")
		return nil
	}
	l, err := net.Listen("unix", path)
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		m.log.Error(err, "Not serving the status on a local socket", "path", path)
		if l != nil {
			_ = l.Close()
		}
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+instanceapi.PathStatus, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, m.Status(r.Context()))
	})
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: log.New(logWriter{m.log.WithName("http")}, "", 0)}
	go func() { _ = server.Serve(l) }()
	return server
}

// ReadLocalStatus asks the manager whose run directory is runDir for its
// /status over the local socket and copies the JSON answer to w.
func ReadLocalStatus(ctx context.Context, runDir string, w io.Writer) error {
	path := filepath.Join(runDir, LocalStatusSocket)
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost"+instanceapi.PathStatus, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("while asking the instance manager on %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the instance manager on %s answered %s", path, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}
