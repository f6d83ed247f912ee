package instanceapi

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // a part of the error; "" for valid
	}{
		{"empty", Config{}, ""},
		{"ordinary settings", Config{Parameters: map[string]string{"work_mem": "4MB", "pg_stat_statements.max": "1000", "search_path": `"$user", public`}}, ""},
		{"a line break", Config{Parameters: map[string]string{"work_mem": "4MB\nshared_preload_libraries = evil"}}, "work_mem contains a line break"},
		{"a carriage return", Config{Parameters: map[string]string{"work_mem": "4MB\r"}}, "line break or NUL"},
		{"NUL", Config{Parameters: map[string]string{"work_mem": "4MB\x00"}}, "line break or NUL"},
		{"too long", Config{Parameters: map[string]string{"search_path": strings.Repeat("x", MaxParameterValue+1)}}, "longer than 4096"},
		{"a name in capitals", Config{Parameters: map[string]string{"Port": "1"}}, "not a PostgreSQL setting name"},
		{"a name with a space", Config{Parameters: map[string]string{"work mem": "1"}}, "not a PostgreSQL setting name"},
		{"a line break in the standby names", Config{SynchronousStandbyNames: "ANY 1 (a)\nport = 1"}, "synchronousStandbyNames"},
		{"logging", Config{Logging: &Logging{SlowStatementThresholdMillis: ptr(int64(0)), LockWaits: ptr(true), LockWaitThresholdMillis: ptr(int64(1000))}}, ""},
		{"a negative slow statement threshold", Config{Logging: &Logging{SlowStatementThresholdMillis: ptr(int64(-1))}}, "slowStatementThresholdMillis -1"},
		{"no lock wait threshold", Config{Logging: &Logging{LockWaitThresholdMillis: ptr(int64(0))}}, "lockWaitThresholdMillis 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestPasswordLosesTheLineBreaksThatEndIt(t *testing.T) {
	for raw, want := range map[string]string{"s3cret\n": "s3cret", "s3cret\r\n": "s3cret", "a\nb\n\n": "a\nb", " pad ": " pad ", "": ""} {
		if got := Password([]byte(raw)); got != want {
			t.Errorf("Password(%q) = %q, want %q", raw, got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
