package supervisor

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"strconv"

	"github.com/go-logr/logr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// LoggerName is the logger (the "logger" key of each JSON record) of what
// PostgreSQL itself logs; the instance manager's own records are "manager".
const LoggerName = "postgres"

// jsonRecord is one record of PostgreSQL's jsonlog (PostgreSQL 15 and
// later; src/backend/utils/error/jsonlog.c). Keys PostgreSQL leaves out
// (no session, no transaction) stay empty.
type jsonRecord struct {
	Timestamp       string `json:"timestamp"`
	User            string `json:"user"`
	DBName          string `json:"dbname"`
	PID             int    `json:"pid"`
	RemoteHost      string `json:"remote_host"`
	SessionID       string `json:"session_id"`
	VXID            string `json:"vxid"`
	TXID            uint64 `json:"txid"`
	Severity        string `json:"error_severity"`
	StateCode       string `json:"state_code"`
	Message         string `json:"message"`
	Detail          string `json:"detail"`
	Hint            string `json:"hint"`
	InternalQuery   string `json:"internal_query"`
	Context         string `json:"context"`
	Statement       string `json:"statement"`
	ApplicationName string `json:"application_name"`
	BackendType     string `json:"backend_type"`
	LeaderPID       int    `json:"leader_pid"`
	QueryID         int64  `json:"query_id"`
}

// fields are the record's keys and values in the manager's log schema
// (camelCase, empty ones left out), after msg and severity.
func (r *jsonRecord) fields() []any {
	kv := []any{"severity", r.Severity, "pid", r.PID}
	for _, f := range []struct {
		key, value string
	}{
		{"backendType", r.BackendType}, {"sqlstate", r.StateCode},
		{"user", r.User}, {"database", r.DBName}, {"applicationName", r.ApplicationName},
		{"remoteHost", r.RemoteHost}, {"sessionID", r.SessionID}, {"vxid", r.VXID},
		{"detail", r.Detail}, {"hint", r.Hint}, {"context", r.Context},
		{"statement", r.Statement}, {"internalQuery", r.InternalQuery},
	} {
		if f.value != "" {
			kv = append(kv, f.key, f.value)
		}
	}
	if r.TXID != 0 {
		kv = append(kv, "txid", r.TXID)
	}
	if r.LeaderPID != 0 {
		kv = append(kv, "leaderPID", r.LeaderPID)
	}
	if r.QueryID != 0 {
		kv = append(kv, "queryID", r.QueryID)
	}
	return append(kv, "pgTimestamp", r.Timestamp)
}

// levelOf maps PostgreSQL's severity onto the manager's log levels:
// DEBUG1-5 debug; LOG, INFO and NOTICE info; WARNING warn; ERROR, FATAL
// and PANIC error. Anything else (a line without a severity) is info.
func levelOf(severity string) zapcore.Level {
	switch severity {
	case "DEBUG1", "DEBUG2", "DEBUG3", "DEBUG4", "DEBUG5":
		return zapcore.DebugLevel
	case "WARNING":
		return zapcore.WarnLevel
	case "ERROR", "FATAL", "PANIC":
		return zapcore.ErrorLevel
	default:
		return zapcore.InfoLevel
	}
}

// emitter writes PostgreSQL's records into the manager's log. With a zap
// logger underneath (the manager's) it writes at the mapped zap level,
// without the Go stack trace zap adds to errors: a PostgreSQL ERROR is no
// fault of the manager's code. Any other logr.Logger gets Info (V(1) for
// debug) and Error.
type emitter struct {
	log logr.Logger
	zl  *zap.Logger // nil when log is not zap
}

// zapUnderlier is what zapr's logr sink offers (zapr.Underlier).
type zapUnderlier interface {
	GetUnderlying() *zap.Logger
}

func newEmitter(log logr.Logger) emitter {
	e := emitter{log: log}
	if u, ok := log.GetSink().(zapUnderlier); ok {
		e.zl = u.GetUnderlying().WithOptions(zap.AddStacktrace(zapcore.FatalLevel))
	}
	return e
}

func (e emitter) emit(level zapcore.Level, msg string, kv []any) {
	if e.zl != nil {
		if ce := e.zl.Check(level, msg); ce != nil {
			fields := make([]zap.Field, 0, len(kv)/2)
			for i := 0; i+1 < len(kv); i += 2 {
				fields = append(fields, zap.Any(kv[i].(string), kv[i+1])) //nolint:forcetypeassert // keys are strings
			}
			ce.Write(fields...)
		}
		return
	}
	switch {
	case level <= zapcore.DebugLevel:
		e.log.V(1).Info(msg, kv...)
	case level >= zapcore.ErrorLevel:
		e.log.Error(nil, msg, kv...)
	default:
		e.log.Info(msg, kv...)
	}
}

// maxLogLine bounds one line of PostgreSQL's output; the rest of a longer
// one (a huge statement) is dropped, never the reading: a reader that
// stopped would leave postgres blocked on a full pipe.
const maxLogLine = 1 << 20

// readLines calls fn with each line of r, without its newline, cut at
// maxLogLine, until r ends or fails.
func readLines(r io.Reader, fn func(line []byte)) error {
	br := bufio.NewReaderSize(r, 64*1024)
	var long []byte
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if len(long) < maxLogLine {
				long = append(long, chunk[:min(len(chunk), maxLogLine-len(long))]...)
			}
			continue
		case err != nil && len(chunk) == 0 && long == nil:
			return err
		}
		line := chunk
		if long != nil {
			if len(long) < maxLogLine {
				long = append(long, chunk[:min(len(chunk), maxLogLine-len(long))]...)
			}
			line, long = long, nil
		}
		if n := len(line); n > 0 && line[n-1] == '\n' {
			line = line[:n-1]
		}
		fn(line)
		if err != nil {
			return err
		}
	}
}

// parseJSONRecord decodes one jsonlog line.
func parseJSONRecord(line []byte) (*jsonRecord, error) {
	var r jsonRecord
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// pidText is a PID as the stderr lines' prefix writes it, for matching
// records of one process.
func pidText(pid int) string {
	if pid == 0 {
		return ""
	}
	return strconv.Itoa(pid)
}
