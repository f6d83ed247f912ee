//go:build integration

package pooler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/pki"
	"tusk.dev/tusk/internal/pooler"
	"tusk.dev/tusk/internal/poolerapi"
	"tusk.dev/tusk/internal/poolermanager"
	"tusk.dev/tusk/internal/testenv"
)

// The pooler API: probes and the scrape open; /status and the commands
// for the operator's certificate only, not for a PostgresRole's of the
// same name (no identity) nor for no certificate.
func TestManagerAPIRequiresTheOperatorsCertificate(t *testing.T) {
	t.Parallel()
	_, m := startManagedPooler(t)
	role, err := pki.IssueClient(m.pki.ca, instanceapi.DefaultAPIClientCN, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	anonymous, asRole := m.client(nil), m.client(&role)
	tests := []struct {
		name         string
		client       *httpClient
		method, path string
		want         int
	}{
		{"healthz without a certificate", anonymous, http.MethodGet, poolerapi.PathHealthz, http.StatusOK},
		{"readyz without a certificate", anonymous, http.MethodGet, poolerapi.PathReadyz, http.StatusOK},
		{"metrics without a certificate", anonymous, http.MethodGet, poolerapi.PathMetrics, http.StatusOK},
		{"status without a certificate", anonymous, http.MethodGet, poolerapi.PathStatus, http.StatusUnauthorized},
		{"pause without a certificate", anonymous, http.MethodPost, poolerapi.PathPause, http.StatusUnauthorized},
		{"status as a role named tusk-operator", asRole, http.MethodGet, poolerapi.PathStatus, http.StatusForbidden},
		{"resume as a role named tusk-operator", asRole, http.MethodPost, poolerapi.PathResume, http.StatusForbidden},
		{"reconnect as a role named tusk-operator", asRole, http.MethodPost, poolerapi.PathReconnect, http.StatusForbidden},
		{"status as the operator", m.operator, http.MethodGet, poolerapi.PathStatus, http.StatusOK},
		{"reconnect as the operator", m.operator, http.MethodPost, poolerapi.PathReconnect, http.StatusOK},
	}
	for _, tt := range tests {
		code, body, err := m.request(context.Background(), tt.client, tt.method, tt.path, nil)
		if err != nil || code != tt.want {
			t.Errorf("%s: %d %s (%v), want %d", tt.name, code, body, err, tt.want)
		}
	}
	// The scrape reports when the certificates of the files the flags
	// name end.
	scrape := m.metrics(t)
	for name, file := range map[string]string{"server": "api.crt", "auth": "auth.crt"} {
		data, err := os.ReadFile(filepath.Join(m.dir, file))
		if err != nil {
			t.Fatal(err)
		}
		cert, err := pki.ParseCertificate(data)
		if err != nil {
			t.Fatal(err)
		}
		if err := hasSample(scrape, `tusk_pooler_certificate_expiry_timestamp_seconds{certificate="`+name+`"}`, float64(cert.NotAfter.Unix())); err != nil {
			t.Errorf("the %s certificate's expiry: %v", name, err)
		}
	}
	var st poolerapi.Status
	m.mustCall(http.MethodGet, poolerapi.PathStatus, nil, &st)
	if !st.Ready || st.Paused || !strings.Contains(st.Version, "1.2") || st.Error != "" {
		t.Errorf("status: %+v; want ready, not paused, PgBouncer's version, no error", st)
	}
	code, body, _ := m.request(context.Background(), m.operator, http.MethodPost, poolerapi.PathPause,
		poolerapi.PauseRequest{Wait: time.Second, ResumeAfter: time.Second})
	if code != http.StatusBadRequest || !strings.Contains(string(body), "must be longer than wait") {
		t.Errorf("a pause whose resumeAfter is not past its wait: %d %s, want 400 saying why", code, body)
	}
}

type httpClient = http.Client

// A pause under a write load of 20 clients takes hold, holds the clients'
// next transactions, and the resume lets them through: no client sees an
// error. /status and /metrics show it.
func TestManagerPausesAndResumesUnderLoad(t *testing.T) {
	t.Parallel()
	const clients = 20
	_, m := startManagedPooler(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var w workload
	for i := range clients {
		conn := m.connect(t)
		w.wg.Add(1)
		go w.run(ctx, conn, i)
	}
	waitAcked(t, &w, 10*clients)

	var paused poolerapi.PauseResult
	m.mustCall(http.MethodPost, poolerapi.PathPause, poolerapi.PauseRequest{Wait: 10 * time.Second, ResumeAfter: time.Minute}, &paused)
	if !paused.Paused || paused.TimedOut {
		t.Fatalf("pause: %+v, want paused", paused)
	}
	var st poolerapi.Status
	m.mustCall(http.MethodGet, poolerapi.PathStatus, nil, &st)
	if !st.Paused || st.PausedSince == nil {
		t.Errorf("status while paused: %+v", st)
	}
	// Once every client waits in the pool, each is blocked in its next
	// transaction: none may be acknowledged until the resume.
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		return waitingIn(m, clients)
	})
	ackedAtPause := w.acked.Load()
	code, body, _ := m.request(context.Background(), m.operator, http.MethodPost, poolerapi.PathPause,
		poolerapi.PauseRequest{Wait: time.Second, ResumeAfter: time.Minute})
	if code != http.StatusConflict || !strings.Contains(string(body), "already paused") {
		t.Errorf("a second pause: %d %s, want 409", code, body)
	}
	if err := waitingIn(m, clients); err != nil {
		t.Errorf("after a refused second pause: %v", err)
	}
	if n := w.acked.Load(); n != ackedAtPause {
		t.Errorf("%d transactions acknowledged while paused", n-ackedAtPause)
	}

	var resumed poolerapi.ResumeResult
	m.mustCall(http.MethodPost, poolerapi.PathResume, nil, &resumed)
	if !resumed.WasPaused || resumed.PausedFor <= 0 {
		t.Errorf("resume: %+v, want the pause ended", resumed)
	}
	waitAcked(t, &w, ackedAtPause+10*clients)
	stop()
	w.wg.Wait()
	t.Logf("%d clients: the pause took hold in %s, held them %s; longest transaction %s; %d acknowledged, %d failed",
		clients, paused.Waited.Round(time.Millisecond), resumed.PausedFor.Round(time.Millisecond),
		w.worst.Round(time.Millisecond), w.acked.Load(), w.failed.Load())
	if w.failed.Load() != 0 {
		t.Errorf("%d transactions failed, the first: %v", w.failed.Load(), w.firstErr)
	}
	scrape := m.metrics(t)
	if os.Getenv(testenv.PrometheusBinDirEnv) != "" {
		testenv.CheckMetrics(t, scrape)
	}
	for _, want := range []struct {
		name  string
		value float64
	}{
		{`tusk_pooler_pauses_total{result="paused"}`, 1},
		{`tusk_pooler_resumes_total{by="request"}`, 1},
		{"tusk_pooler_paused", 0},
		{"tusk_pooler_up", 1},
		{"tusk_pooler_pause_duration_seconds_count", 1},
	} {
		if err := hasSample(scrape, want.name, want.value); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(scrape, `tusk_pooler_clients{database="app",state="active",user="app"}`) ||
		!strings.Contains(scrape, `tusk_pooler_transactions_total{database="app"}`) {
		t.Errorf("the scrape has not the application's pool:\n%s", scrape)
	}
	testenv.CheckCatalogued(t, scrape, poolermanager.MetricsCatalogue, true)
}

func waitAcked(t *testing.T, w *workload, n int64) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		if got := w.acked.Load(); got < n {
			return fmt.Errorf("%d transactions acknowledged, waiting for %d", got, n)
		}
		return nil
	})
}

// waitingIn checks that the application's pool holds n waiting clients.
func waitingIn(m *managed, n int) error {
	var st poolerapi.Status
	if err := m.call(http.MethodGet, poolerapi.PathStatus, nil, &st); err != nil {
		return err
	}
	for _, p := range st.Pools {
		if p.Database == appUser && p.User == appUser && p.ClientsWaiting == n {
			return nil
		}
	}
	return fmt.Errorf("not %d clients waiting: %+v", n, st.Pools)
}

// A transaction that does not end outlasts the pause's Wait: the manager
// resumes PgBouncer, answers TimedOut, and clients flow.
func TestManagerPauseTimesOutOnATransactionThatDoesNotEnd(t *testing.T) {
	t.Parallel()
	_, m := startManagedPooler(t)
	ctx := context.Background()
	long, other := m.connect(t), m.connect(t)
	tx, err := long.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t (client) VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	const wait = 500 * time.Millisecond
	var res poolerapi.PauseResult
	m.mustCall(http.MethodPost, poolerapi.PathPause, poolerapi.PauseRequest{Wait: wait, ResumeAfter: time.Minute}, &res)
	if res.Paused || !res.TimedOut || res.Waited < wait {
		t.Fatalf("pause: %+v, want timed out after %s", res, wait)
	}
	t.Logf("the pause timed out after %s", res.Waited.Round(time.Millisecond))
	queryCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := other.Exec(queryCtx, "INSERT INTO t (client) VALUES (2)"); err != nil {
		t.Errorf("a client after the timed-out pause: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Errorf("the long transaction: %v", err)
	}
	var st poolerapi.Status
	m.mustCall(http.MethodGet, poolerapi.PathStatus, nil, &st)
	if st.Paused {
		t.Errorf("status after a timed-out pause: %+v", st)
	}
	if err := hasSample(m.metrics(t), `tusk_pooler_pauses_total{result="timed_out"}`, 1); err != nil {
		t.Error(err)
	}
	// The pooler pauses again once the transaction is gone.
	m.mustCall(http.MethodPost, poolerapi.PathPause, poolerapi.PauseRequest{Wait: 5 * time.Second, ResumeAfter: time.Minute}, &res)
	if !res.Paused {
		t.Errorf("a pause with no transaction running: %+v", res)
	}
}

// A pause nobody resumes ends by itself at ResumeAfter, and the client
// it held is answered.
func TestManagerPauseEndsAtResumeAfter(t *testing.T) {
	t.Parallel()
	_, m := startManagedPooler(t)
	held := m.connect(t)
	const resumeAfter = 2 * time.Second
	var res poolerapi.PauseResult
	start := time.Now()
	m.mustCall(http.MethodPost, poolerapi.PathPause, poolerapi.PauseRequest{Wait: time.Second, ResumeAfter: resumeAfter}, &res)
	if !res.Paused {
		t.Fatalf("pause: %+v", res)
	}
	answered := make(chan error, 1)
	go func() {
		_, err := held.Exec(context.Background(), "INSERT INTO t (client) VALUES (1)")
		answered <- err
	}()
	if err := receive(t, answered, "the held client"); err != nil {
		t.Fatalf("the client held by the pause: %v", err)
	}
	took := time.Since(start)
	t.Logf("the held client was answered %s after the pause request (resumeAfter %s)", took.Round(time.Millisecond), resumeAfter)
	if took < resumeAfter {
		t.Errorf("the held client was answered after %s, before resumeAfter (%s)", took, resumeAfter)
	}
	var st poolerapi.Status
	m.mustCall(http.MethodGet, poolerapi.PathStatus, nil, &st)
	if st.Paused {
		t.Errorf("status after resumeAfter: %+v", st)
	}
	if err := hasSample(m.metrics(t), `tusk_pooler_resumes_total{by="deadline"}`, 1); err != nil {
		t.Error(err)
	}
	var resumed poolerapi.ResumeResult
	m.mustCall(http.MethodPost, poolerapi.PathResume, nil, &resumed)
	if resumed.WasPaused {
		t.Errorf("a resume after the deadline's: %+v, want nothing to end", resumed)
	}
}

// On SIGTERM the pod is not ready at once, a transaction in flight
// commits, and the manager exits 0 well within the pod's grace period.
func TestManagerShutdownLetsTheTransactionInFlightCommit(t *testing.T) {
	t.Parallel()
	s, m := startManagedPooler(t)
	ctx := context.Background()
	tx, err := m.connect(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t (client) VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		code, body, err := m.request(ctx, nil, http.MethodGet, poolerapi.PathReadyz, nil)
		if err == nil && code != http.StatusServiceUnavailable {
			err = fmt.Errorf("readyz: %d %s", code, body)
		}
		return err
	})
	notReady := time.Since(start)
	select {
	case <-m.exited:
		t.Fatalf("tusk pooler exited (%v) with a transaction in flight", m.exitErr)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the transaction in flight at SIGTERM: %v", err)
	}
	committed := time.Now()
	receive(t, m.exited, "tusk pooler's exit")
	t.Logf("not ready %s after SIGTERM; exited %s after the commit, %s after SIGTERM",
		notReady.Round(time.Millisecond), time.Since(committed).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if m.exitErr != nil {
		t.Errorf("tusk pooler exited with %v, want 0", m.exitErr)
	}
	if took := time.Since(start); took > 25*time.Second {
		t.Errorf("tusk pooler took %s to stop, past the pod's grace", took)
	}
	var n int
	if err := s.superuser(t, appUser).QueryRow(ctx, "SELECT count(*) FROM t WHERE client = 42").Scan(&n); err != nil || n != 1 {
		t.Errorf("rows the transaction in flight wrote: %d, %v; want 1", n, err)
	}
}

// A PgBouncer that dies is started again by the manager, which counts it.
func TestManagerRestartsPgBouncer(t *testing.T) {
	t.Parallel()
	_, m := startManagedPooler(t)
	first := m.pgbouncerPID(t)
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		if pid := m.pgbouncerPID(t); pid == first || pid == 0 {
			return fmt.Errorf("PgBouncer not started again (pid %d)", pid)
		}
		code, body, err := m.request(ctx, nil, http.MethodGet, poolerapi.PathReadyz, nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("readyz: %d %s", code, body)
		}
		return err
	})
	t.Logf("PgBouncer ready again %s after it was killed", time.Since(start).Round(time.Millisecond))
	if _, err := m.connect(t).Exec(context.Background(), "INSERT INTO t (client) VALUES (1)"); err != nil {
		t.Errorf("a client after the restart: %v", err)
	}
	if err := hasSample(m.metrics(t), "tusk_pooler_pgbouncer_restarts_total", 1); err != nil {
		t.Error(err)
	}
}

// A PgBouncer that cannot start is not started for ever: past five quick
// deaths in a row the manager exits with an error naming the last, and
// the kubelet's restarts show the fault.
func TestManagerGivesUpOnAPgBouncerThatCannotStart(t *testing.T) {
	t.Parallel()
	p := newClusterPKI(t)
	dir := workDir(t)
	c := poolerConfig(t, p, dir, "127.0.0.1", testenv.FreePort(t))
	c.SocketDir = dir + "/missing"
	ini, err := pooler.INI(c)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	m := launchManaged(t, p, dir, ini)
	receive(t, m.exited, "tusk pooler's exit")
	t.Logf("tusk pooler gave up after %s: %v", time.Since(start).Round(time.Millisecond), m.exitErr)
	var exit *exec.ExitError
	if !errors.As(m.exitErr, &exit) || exit.ExitCode() == 0 {
		t.Errorf("tusk pooler exited with %v, want a failure", m.exitErr)
	}
	if out := m.output(); !strings.Contains(out, "PgBouncer exited 6 times in a row within 30s of starting") {
		t.Errorf("tusk pooler's output does not say why it gave up:\n%s", out)
	}
}

// A resume that comes while a pause still waits for its transactions (an
// operator that gave up on its pause request) abandons it: PgBouncer
// resumes at once, the pause request is refused (409), and the pause never
// takes hold afterwards.
func TestManagerResumeAbandonsAPauseStillWaiting(t *testing.T) {
	t.Parallel()
	_, m := startManagedPooler(t)
	ctx := context.Background()
	long, other := m.connect(t), m.connect(t)
	tx, err := long.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t (client) VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		code int
		body []byte
		err  error
	}
	pauseAnswer := make(chan answer, 1)
	go func() {
		code, body, err := m.request(ctx, m.operator, http.MethodPost, poolerapi.PathPause,
			poolerapi.PauseRequest{Wait: 30 * time.Second, ResumeAfter: time.Minute})
		pauseAnswer <- answer{code, body, err}
	}()
	// Another client's query must come once PAUSE is pending: one sent
	// before could get a server connection of its own while PgBouncer
	// pauses (seen in CI: PgBouncer then closed that server for the pause
	// and the client was neither served nor counted waiting).
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		if state := m.admin(t, m.dir, "SHOW STATE"); !strings.Contains(state, "paused|yes") {
			return fmt.Errorf("SHOW STATE: %s", state)
		}
		return nil
	})
	// The pause is pending once PgBouncer holds that client's query.
	held := make(chan error, 1)
	go func() {
		_, err := other.Exec(ctx, "INSERT INTO t (client) VALUES (2)")
		held <- err
	}()
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		return waitingIn(m, 1)
	})
	start := time.Now()
	var resumed poolerapi.ResumeResult
	m.mustCall(http.MethodPost, poolerapi.PathResume, nil, &resumed)
	if resumed.WasPaused {
		t.Errorf("resume of a pause that never took hold: %+v", resumed)
	}
	if err := receive(t, held, "the held client"); err != nil {
		t.Errorf("the client held by the pending pause: %v", err)
	}
	a := receive(t, pauseAnswer, "the pause request")
	t.Logf("the pause request answered %s after the resume: %d %s", time.Since(start).Round(time.Millisecond), a.code, a.body)
	if a.err != nil || a.code != http.StatusConflict || !strings.Contains(string(a.body), "ended by a resume before it took hold") {
		t.Errorf("the abandoned pause request: %d %s %v, want 409", a.code, a.body, a.err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Errorf("the long transaction: %v", err)
	}
	var st poolerapi.Status
	m.mustCall(http.MethodGet, poolerapi.PathStatus, nil, &st)
	if st.Paused {
		t.Errorf("status after the abandoned pause: %+v", st)
	}
	if _, err := other.Exec(ctx, "INSERT INTO t (client) VALUES (3)"); err != nil {
		t.Errorf("a client after the abandoned pause: %v", err)
	}
}

// SIGHUP to the manager makes PgBouncer read its configuration again: a
// client's next transaction runs on the server the file names now, and
// no client is dropped.
func TestManagerReloadsOnSIGHUP(t *testing.T) {
	t.Parallel()
	p, a, b := startServers(t)
	dir := workDir(t)
	c := poolerConfig(t, p, dir, "127.0.0.1", a.port)
	m := startManaged(t, p, dir, c)
	conn := m.connect(t)
	ctx := context.Background()
	if name, err := clusterName(ctx, conn); err != nil || name != "a" {
		t.Fatalf("before the reload: %q, %v; want a", name, err)
	}
	c.ServerPort = b.port
	ini, err := pooler.INI(c)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "pgbouncer.ini", []byte(ini))
	if err := m.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// PgBouncer closes the server connection to a once the client
	// releases it; the client's next transaction goes to b.
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		name, err := clusterName(ctx, conn)
		if err != nil {
			t.Fatalf("the client across the reload: %v", err)
		}
		if name != "b" {
			return fmt.Errorf("still on %s", name)
		}
		return nil
	})
}

// TestManagerResumeWaitsForAPrimary: a resume asked to wait for a primary
// logs in where PgBouncer's server connections go, as the auth role with
// its certificate (verify-full), and resumes once the server answers as a
// primary; where none answers it resumes anyway at the bound, and says
// so. (On the local cluster, a switchover's resume without this check
// left PgBouncer with server connections on the former primary, restarted
// as a replica: 6 to 9 s of read-only errors.)
func TestManagerResumeWaitsForAPrimary(t *testing.T) {
	t.Parallel()
	p := newClusterPKI(t)
	a := startServer(t, p, "a")
	a.prepare(t, "")
	dir := workDir(t)
	c := poolerConfig(t, p, dir, "127.0.0.1", a.port)
	m := startManaged(t, p, dir, c)

	pauseAndResume := func(wait time.Duration) poolerapi.ResumeResult {
		var paused poolerapi.PauseResult
		m.mustCall(http.MethodPost, poolerapi.PathPause, poolerapi.PauseRequest{Wait: time.Second, ResumeAfter: time.Minute}, &paused)
		if !paused.Paused {
			t.Fatalf("pause: %+v", paused)
		}
		var resumed poolerapi.ResumeResult
		m.mustCall(http.MethodPost, poolerapi.PathResume, poolerapi.ResumeRequest{WaitForPrimary: wait}, &resumed)
		var st poolerapi.Status
		m.mustCall(http.MethodGet, poolerapi.PathStatus, nil, &st)
		if !resumed.WasPaused || st.Paused {
			t.Fatalf("resume: %+v, status %+v; want the pause ended", resumed, st)
		}
		return resumed
	}
	if res := pauseAndResume(5 * time.Second); !res.PrimaryFound || res.PrimaryWaited > 2*time.Second {
		t.Errorf("resume in front of a primary: %+v, want it found at once", res)
	}

	// Nothing listens where the configuration now sends PgBouncer.
	c.ServerPort = testenv.FreePort(t)
	ini, err := pooler.INI(c)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "pgbouncer.ini", []byte(ini))
	const bound = 700 * time.Millisecond
	res := pauseAndResume(bound)
	t.Logf("resume with no server: %+v", res)
	if res.PrimaryFound || res.PrimaryWaited < bound {
		t.Errorf("resume with no server: %+v, want no primary found after %s", res, bound)
	}
}
