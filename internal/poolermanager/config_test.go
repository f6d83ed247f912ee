package poolermanager

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tusk.dev/tusk/internal/poolerapi"
)

func TestListenPort(t *testing.T) {
	tests := []struct {
		name, ini string
		want      int
		wantErr   string
	}{
		{"the builder's", "[databases]\n* = host=db-rw port=6000\n\n[pgbouncer]\nlisten_addr = *\nlisten_port = 6432\n", 6432, ""},
		{"none: PgBouncer's default", "[pgbouncer]\nlisten_addr = *\n", poolerapi.PgBouncerPort, ""},
		{"another section's is not PgBouncer's", "[users]\nlisten_port = 7000\n[pgbouncer]\n", poolerapi.PgBouncerPort, ""},
		{"not a port", "[pgbouncer]\nlisten_port = 70000\n", 0, `listen_port "70000" is not a port`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "pgbouncer.ini")
			if err := os.WriteFile(path, []byte(tt.ini), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := listenPort(path)
			if got != tt.want || (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("listenPort: %d, %v; want %d, %q", got, err, tt.want, tt.wantErr)
			}
		})
	}
	if _, err := listenPort(filepath.Join(t.TempDir(), "missing.ini")); err == nil {
		t.Error("a missing configuration: no error")
	}
}

func TestValidatePause(t *testing.T) {
	tests := []struct {
		req     poolerapi.PauseRequest
		wantErr string
	}{
		{poolerapi.PauseRequest{Wait: 10 * time.Second, ResumeAfter: time.Minute}, ""},
		{poolerapi.PauseRequest{ResumeAfter: time.Minute}, "wait must be positive"},
		{poolerapi.PauseRequest{Wait: -time.Second, ResumeAfter: time.Minute}, "wait must be positive"},
		{poolerapi.PauseRequest{Wait: time.Minute, ResumeAfter: time.Minute}, "must be longer than wait"},
		{poolerapi.PauseRequest{Wait: time.Second}, "must be longer than wait"},
	}
	for _, tt := range tests {
		err := validatePause(tt.req)
		if (err == nil) != (tt.wantErr == "") || (err != nil && (!strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, errInvalidPause))) {
			t.Errorf("%+v: %v, want %q", tt.req, err, tt.wantErr)
		}
	}
}
