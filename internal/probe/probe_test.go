package probe

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	return port
}

func options(t *testing.T) Options {
	return Options{
		Targets:  []Target{{Name: TargetWrite, Host: "127.0.0.1", Port: closedPort(t)}},
		Database: "postgres", CertDir: t.TempDir(),
		Interval: time.Second, Timeout: time.Second, Objective: 0.999, Log: logr.Discard(),
	}
}

// TestAttemptCountsOutcomesOnly: an attempt that fails is counted as a
// failure; one cut short because the probe stops is not counted at all.
func TestAttemptCountsOutcomesOnly(t *testing.T) {
	o := options(t)
	Registry(o)
	failures := requests.WithLabelValues(TargetWrite, ResultFailure)
	before := testutil.ToFloat64(failures)
	if err := Attempt(t.Context(), o, o.Targets[0]); err == nil {
		t.Fatal("an attempt on a closed port succeeded")
	}
	if got := testutil.ToFloat64(failures) - before; got != 1 {
		t.Errorf("a failed attempt counted %v failures, want 1", got)
	}
	stopped, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Attempt(stopped, o, o.Targets[0]); err == nil {
		t.Fatal("an attempt of a stopped probe succeeded")
	}
	if got := testutil.ToFloat64(failures) - before; got != 1 {
		t.Errorf("after an attempt of a stopped probe %v failures, want still 1", got)
	}
}

func TestValidate(t *testing.T) {
	if err := options(t).Validate(); err != nil {
		t.Errorf("valid options refused: %v", err)
	}
	for name, change := range map[string]func(*Options){
		"no target":          func(o *Options) { o.Targets = nil },
		"timeout > interval": func(o *Options) { o.Timeout = 2 * o.Interval },
		"objective 1":        func(o *Options) { o.Objective = 1 },
		"objective percent":  func(o *Options) { o.Objective = 99.9 },
		"no certificates":    func(o *Options) { o.CertDir = "" },
	} {
		o := options(t)
		change(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestConnStringVerifiesTheServer: every attempt verifies the server's
// certificate and name and presents the client certificate; no password.
func TestConnStringVerifiesTheServer(t *testing.T) {
	s := ConnString(Options{Database: "postgres", CertDir: "/c"}, Target{Host: "pg-rw.ns.svc", Port: 5432})
	for _, want := range []string{"host=pg-rw.ns.svc", "port=5432", "user=tusk_probe", "sslmode=verify-full", "sslrootcert=/c/ca.crt", "sslcert=/c/tls.crt", "sslkey=/c/tls.key"} {
		if !strings.Contains(s, want) {
			t.Errorf("%q lacks %q", s, want)
		}
	}
	if strings.Contains(s, "password") {
		t.Errorf("%q holds a password", s)
	}
}
