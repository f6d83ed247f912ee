package supervisor

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// syncBuffer collects a logger's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("a log line is not one JSON object: %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// jsonLogger is a zap logger writing JSON records into buf, as the
// manager's is, at debug level.
func jsonLogger(buf *syncBuffer) logr.Logger {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	return zapr.NewLogger(zap.New(zapcore.NewCore(enc, zapcore.AddSync(buf), zapcore.DebugLevel)))
}

// writeAsCollector appends lines to a pipe as PostgreSQL's logging
// collector does: a separate open for appending.
func writeAsCollector(t *testing.T, path string, lines ...string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, l := range lines {
		if _, err := f.WriteString(l + "\n"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLogPipesForwardJSONLogInTheManagersSchema(t *testing.T) {
	var buf syncBuffer
	dir := filepath.Join(t.TempDir(), "log")
	pipes, err := OpenLogPipes(dir, jsonLogger(&buf))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pipes.Close() }()
	for _, name := range []string{JSONLogFileName, LogFileName} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Fatalf("%s is not a named pipe: %v %v", name, fi, err)
		}
	}
	p := &Postmaster{log: logr.Discard(), out: logr.Discard()}
	pipes.attach(p)

	writeAsCollector(t, filepath.Join(dir, JSONLogFileName),
		`{"timestamp":"2026-11-27 10:00:00.000 UTC","user":"app","dbname":"app","pid":42,"remote_host":"10.0.0.7","remote_port":5000,"session_id":"6566a0.2a","line_num":3,"ps":"SELECT","session_start":"2026-11-27 09:59:00 UTC","vxid":"3/7","txid":0,"error_severity":"LOG","message":"duration: 1503.210 ms  statement: SELECT pg_sleep(1.5)","application_name":"psql","backend_type":"client backend","query_id":0}`,
		`{"timestamp":"2026-11-27 10:00:01.000 UTC","pid":43,"error_severity":"WARNING","state_code":"01000","message":"careful","backend_type":"client backend"}`,
		`{"timestamp":"2026-11-27 10:00:02.000 UTC","pid":44,"error_severity":"FATAL","state_code":"XX000","message":"requested timeline 2 is not a child of this server's history","detail":"Latest checkpoint is at 0/5000060 on timeline 1.","backend_type":"startup"}`)
	writeAsCollector(t, filepath.Join(dir, LogFileName), "tusk: warning: archiving 000000010000000000000003 ahead failed")
	pipes.flush(5 * time.Second)

	if got, want := p.HistoryMismatch(), "FATAL:  requested timeline 2 is not a child of this server's history"; got != want {
		t.Errorf("HistoryMismatch() through jsonlog = %q, want %q", got, want)
	}
	deadline := time.Now().Add(5 * time.Second)
	var recs []map[string]any
	for recs = buf.records(t); len(recs) < 4 && time.Now().Before(deadline); recs = buf.records(t) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(recs) != 4 {
		t.Fatalf("got %d records, want 4: %v", len(recs), recs)
	}
	// The two pipes are read side by side: find each record by its message.
	find := func(part string) map[string]any {
		for _, r := range recs {
			if msg, _ := r["msg"].(string); strings.Contains(msg, part) {
				return r
			}
		}
		t.Fatalf("no record with %q: %v", part, recs)
		return nil
	}
	slow := find("pg_sleep(1.5)")
	for k, want := range map[string]any{
		"logger": "postgres", "level": "info", "msg": "duration: 1503.210 ms  statement: SELECT pg_sleep(1.5)",
		"severity": "LOG", "pid": 42.0, "user": "app", "database": "app", "backendType": "client backend",
		"applicationName": "psql", "sessionID": "6566a0.2a", "remoteHost": "10.0.0.7", "vxid": "3/7",
	} {
		if slow[k] != want {
			t.Errorf("slow statement record: %s = %v, want %v (%v)", k, slow[k], want, slow)
		}
	}
	if _, ok := slow["txid"]; ok {
		t.Errorf("a zero txid is left out: %v", slow)
	}
	if r := find("careful"); r["level"] != "warn" || r["sqlstate"] != "01000" {
		t.Errorf("WARNING record: %v, want level warn and the sqlstate", r)
	}
	if r := find("not a child"); r["level"] != "error" || r["detail"] == nil || r["stacktrace"] != nil {
		t.Errorf("FATAL record: %v, want level error, its detail and no Go stack trace", r)
	}
	if r := find("archiving"); r["logger"] != "postgres" || r["level"] != "info" {
		t.Errorf("stderr-format record: %v", r)
	}
}

func TestReadLinesCutsLongLinesAndKeepsReading(t *testing.T) {
	long := strings.Repeat("x", maxLogLine+100)
	var got []int
	_ = readLines(strings.NewReader("a\n"+long+"\nb"), func(line []byte) { got = append(got, len(line)) })
	if want := []int{1, maxLogLine, 1}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("line lengths %v, want %v", got, want)
	}
}
