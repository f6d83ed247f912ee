//go:build integration

package instance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/pki"
	"tusk.dev/tusk/internal/probe"
	"tusk.dev/tusk/internal/testenv"
)

// TestProbeWritesAndReadsAsItsOwnRole runs the SLI probe against a primary
// and a replica with the cluster's TLS: the primary's manager made the
// probe's role and table, the probe writes through one and reads through
// the other with only its client certificate, and counts each attempt. The
// role reaches nothing else, and a certificate of another CA is refused.
func TestProbeWritesAndReadsAsItsOwnRole(t *testing.T) {
	p := newClusterPKI(t)
	primary := startNode(t, "probe-1", nodeOptions{role: instanceapi.RolePrimary, tls: p})
	primary.waitReady(instanceapi.RolePrimary)
	replica := startNode(t, "probe-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port, tls: p})
	replica.waitReady(instanceapi.RoleReplica)

	certDir := t.TempDir()
	mountCerts(t, certDir, p.issueClient(instanceapi.ProbeRole), p.ca)
	o := probe.Options{
		Targets: []probe.Target{
			{Name: probe.TargetWrite, Host: "127.0.0.1", Port: primary.port},
			{Name: probe.TargetRead, Host: "127.0.0.1", Port: replica.port},
		},
		Database: instanceapi.ProbeDatabase, CertDir: certDir,
		Interval: 5 * time.Second, Timeout: 5 * time.Second, Objective: 0.999, Log: logr.Discard(),
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	reg := probe.Registry(o)
	before := probeCounts(t, reg)

	// The manager grants the role at bootstrap; the write reaches the
	// replica before the read.
	if err := probe.Attempt(t.Context(), o, o.Targets[0]); err != nil {
		t.Fatalf("the write probe failed: %v", err)
	}
	replica.waitReplayed(primary.lsn())
	if err := probe.Attempt(t.Context(), o, o.Targets[1]); err != nil {
		t.Fatalf("the read probe failed: %v", err)
	}
	var age time.Duration
	replica.withConn("postgres", superuserPassword, "postgres", func(conn *pgx.Conn) error {
		return conn.QueryRow(t.Context(), "SELECT now() - written_at FROM "+instanceapi.ProbeTable+" WHERE id = 1").Scan(&age)
	})
	if age < 0 || age > time.Minute {
		t.Errorf("the probe's row on the replica is %s old, want the write just made", age)
	}

	// A target that does not answer is a failure, counted.
	closed := probe.Target{Name: probe.TargetWrite, Host: "127.0.0.1", Port: testenv.FreePort(t)}
	if err := probe.Attempt(t.Context(), o, closed); err == nil {
		t.Error("an attempt on a closed port succeeded")
	}
	after := probeCounts(t, reg)
	for key, want := range map[string]float64{"rw/success": 1, "ro/success": 1, "rw/failure": 1, "ro/failure": 0} {
		if got := after[key] - before[key]; got != want {
			t.Errorf("tusk_probe_requests_total %s rose by %v, want %v", key, got, want)
		}
	}

	// The role's certificate opens the probe's database only, and the role
	// may not make objects there.
	other := o
	other.Database = "template1"
	if err := probe.Attempt(t.Context(), other, o.Targets[0]); err == nil || !strings.Contains(err.Error(), "pg_hba.conf rejects") {
		t.Errorf("the probe's certificate opened another database: %v", err)
	}
	if err := asProbe(t, o, primary.port, "CREATE TABLE tusk_probe.mine (id int)"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("the probe's role made a table: %v", err)
	}
	if err := asProbe(t, o, primary.port, "DELETE FROM "+instanceapi.ProbeTable); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("the probe's role deleted rows: %v", err)
	}

	// A certificate for the role from another CA is refused.
	stranger, err := pki.NewCA("another CA", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	forged := o
	forged.CertDir = t.TempDir()
	mountCerts(t, forged.CertDir, newClusterPKIFrom(t, stranger, stranger).issueClient(instanceapi.ProbeRole), p.ca)
	if err := probe.Attempt(t.Context(), forged, o.Targets[0]); err == nil {
		t.Error("a probe certificate from another CA logged in")
	}
}

// asProbe runs sql on the server at port as the probe's role.
func asProbe(t *testing.T, o probe.Options, port int, sql string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, probe.ConnString(o, probe.Target{Host: "127.0.0.1", Port: port}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, sql)
	return err
}

// probeCounts reads tusk_probe_requests_total by "target/result".
func probeCounts(t *testing.T, reg interface {
	Gather() ([]*dto.MetricFamily, error)
}) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "tusk_probe_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			var target, result string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "target":
					target = l.GetValue()
				case "result":
					result = l.GetValue()
				}
			}
			counts[target+"/"+result] = m.GetCounter().GetValue()
		}
	}
	return counts
}
