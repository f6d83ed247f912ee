package sqlobjects

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgconn"

	"tusk.dev/tusk/internal/instanceapi"
)

func sqls(steps []logicalStep) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.sql
	}
	return out
}

func mustTables(t *testing.T, in ...string) []qualifiedTable {
	t.Helper()
	tables, err := parseTables(in)
	if err != nil {
		t.Fatal(err)
	}
	return tables
}

func TestParseTables(t *testing.T) {
	got := mustTables(t, "b", "public.a", "sales.Orders", "a")
	want := []qualifiedTable{{"public", "a"}, {"public", "b"}, {"sales", "Orders"}}
	if !slices.Equal(got, want) {
		t.Errorf("parseTables = %v, want %v", got, want)
	}
	for _, bad := range []string{"", ".t", "s.", "a.b.c"} {
		if _, err := parseTables([]string{bad}); err == nil {
			t.Errorf("parseTables(%q) accepted it", bad)
		}
	}
}

func TestPlanPublication(t *testing.T) {
	list := func(tables ...string) instanceapi.PublicationRequest {
		return instanceapi.PublicationRequest{Name: "pub", Database: "app", Tables: tables}
	}
	all := instanceapi.PublicationRequest{Name: "pub", Database: "app", AllTables: true}
	absent := instanceapi.PublicationRequest{Name: "pub", Database: "app", Ensure: instanceapi.EnsureAbsent}
	existing := func(tables ...string) publicationState {
		return publicationState{exists: true, tables: mustTables(t, tables...)}
	}
	tests := []struct {
		name    string
		req     instanceapi.PublicationRequest
		current publicationState
		want    []string
	}{
		{"create a list", list("t", "s.u"), publicationState{}, []string{`CREATE PUBLICATION "pub" FOR TABLE "public"."t", "s"."u"`}},
		{"create for all tables", all, publicationState{}, []string{`CREATE PUBLICATION "pub" FOR ALL TABLES`}},
		{"same list, t is public.t", list("t", "s.u"), existing("s.u", "public.t"), nil},
		{"same all tables", all, publicationState{exists: true, allTables: true}, nil},
		{"list changed", list("t", "v"), existing("t"), []string{`ALTER PUBLICATION "pub" SET TABLE "public"."t", "public"."v"`}},
		{"all tables to a list", list("t"), publicationState{exists: true, allTables: true},
			[]string{`DROP PUBLICATION "pub"`, `CREATE PUBLICATION "pub" FOR TABLE "public"."t"`}},
		{"a list to all tables", all, existing("t"), []string{`DROP PUBLICATION "pub"`, `CREATE PUBLICATION "pub" FOR ALL TABLES`}},
		{"same list, a schema added by hand", list("t"), publicationState{exists: true, tables: mustTables(t, "t"), schemas: true},
			[]string{`ALTER PUBLICATION "pub" SET TABLE "public"."t"`}},
		{"absent, exists", absent, existing("t"), []string{`DROP PUBLICATION "pub"`}},
		{"absent, gone", absent, publicationState{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tables := mustTables(t, tt.req.Tables...)
			steps := planPublication(tt.req, tables, tt.current)
			if got := sqls(steps); !slices.Equal(got, tt.want) {
				t.Errorf("planPublication =\n%q\nwant\n%q", got, tt.want)
			}
			for _, s := range steps {
				if !strings.Contains(s.change, "pub") {
					t.Errorf("change %q does not name the publication", s.change)
				}
			}
		})
	}
}

func TestValidatePublication(t *testing.T) {
	for _, req := range []instanceapi.PublicationRequest{
		{Database: "app", AllTables: true},
		{Name: "p", AllTables: true},
		{Name: "p", Database: "app"},
		{Name: "p", Database: "app", AllTables: true, Tables: []string{"t"}},
		{Name: "p", Database: "app", AllTables: true, Ensure: "maybe"},
		{Name: strings.Repeat("p", 64), Database: "app", AllTables: true},
	} {
		if err := validatePublication(req); httpStatus(err) != http.StatusUnprocessableEntity {
			t.Errorf("validatePublication(%+v) = %v, want a refusal", req, err)
		}
	}
	if err := validatePublication(instanceapi.PublicationRequest{Name: "p", Database: "app", Ensure: instanceapi.EnsureAbsent}); err != nil {
		t.Errorf("an absent publication needs no tables: %v", err)
	}
}

func TestPlanSubscription(t *testing.T) {
	const conn = "host=a password=secret"
	off, on := false, true
	req := func(enabled *bool, pubs ...string) instanceapi.SubscriptionRequest {
		return instanceapi.SubscriptionRequest{Name: "sub", Database: "app", Publications: pubs, ConnInfo: conn, Enabled: enabled}
	}
	existing := func(enabled bool, connInfo string, pubs ...string) subscriptionState {
		return subscriptionState{exists: true, enabled: enabled, connInfo: connInfo, publications: pubs, slot: "sub"}
	}
	asOwner := func(s subscriptionState) subscriptionState {
		s.runAsOwner = true
		return s
	}
	tests := []struct {
		name    string
		req     instanceapi.SubscriptionRequest
		current subscriptionState
		want    []string
	}{
		{"create", req(nil, "p1", "p2"), subscriptionState{},
			[]string{`CREATE SUBSCRIPTION "sub" CONNECTION 'host=a password=secret' PUBLICATION "p1", "p2" WITH (run_as_owner = false)`}},
		{"create disabled", req(&off, "p1"), subscriptionState{},
			[]string{`CREATE SUBSCRIPTION "sub" CONNECTION 'host=a password=secret' PUBLICATION "p1" WITH (run_as_owner = false, enabled = false)`}},
		{"run as its owner", req(nil, "p1"), asOwner(existing(true, conn, "p1")),
			[]string{`ALTER SUBSCRIPTION "sub" SET (run_as_owner = false)`}},
		{"run as its owner, and disable", req(&off, "p1"), asOwner(existing(true, conn, "p1")),
			[]string{`ALTER SUBSCRIPTION "sub" SET (run_as_owner = false)`, `ALTER SUBSCRIPTION "sub" DISABLE`}},
		{"same", req(&on, "p1", "p2"), existing(true, conn, "p1", "p2"), nil},
		{"same disabled", req(&off, "p1"), existing(false, conn, "p1"), nil},
		{"publications", req(nil, "p1", "p3"), existing(true, conn, "p1", "p2"),
			[]string{`ALTER SUBSCRIPTION "sub" SET PUBLICATION "p1", "p3"`}},
		{"publications, disabled", req(&off, "p3"), existing(false, conn, "p1"),
			[]string{`ALTER SUBSCRIPTION "sub" SET PUBLICATION "p3" WITH (refresh = false)`}},
		{"publications, then disable", req(&off, "p3"), existing(true, conn, "p1"),
			[]string{`ALTER SUBSCRIPTION "sub" SET PUBLICATION "p3"`, `ALTER SUBSCRIPTION "sub" DISABLE`}},
		{"enable, then publications", req(nil, "p3"), existing(false, conn, "p1"),
			[]string{`ALTER SUBSCRIPTION "sub" ENABLE`, `ALTER SUBSCRIPTION "sub" SET PUBLICATION "p3"`}},
		{"connection", req(nil, "p1"), existing(true, "host=b password=old", "p1"),
			[]string{`ALTER SUBSCRIPTION "sub" CONNECTION 'host=a password=secret'`}},
		{"drop", instanceapi.SubscriptionRequest{Name: "sub", Ensure: instanceapi.EnsureAbsent}, existing(true, conn, "p1"),
			[]string{`DROP SUBSCRIPTION "sub"`}},
		{"dropped", instanceapi.SubscriptionRequest{Name: "sub", Ensure: instanceapi.EnsureAbsent}, subscriptionState{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps := planSubscription(tt.req, conn, tt.req.Publications, tt.current)
			if got := sqls(steps); !slices.Equal(got, tt.want) {
				t.Errorf("planSubscription =\n%q\nwant\n%q", got, tt.want)
			}
			for _, s := range steps {
				if strings.Contains(s.change, "secret") || strings.Contains(logMessage(s.change), "secret") {
					t.Errorf("change %q shows the connection string", s.change)
				}
			}
		})
	}
}

func TestValidateSubscription(t *testing.T) {
	good := instanceapi.SubscriptionRequest{Name: "sub", Database: "app", Publications: []string{"b", "a", "b"}, ConnInfo: "host=x"}
	pubs, err := validateSubscription(good)
	if err != nil || !slices.Equal(pubs, []string{"a", "b"}) {
		t.Errorf("validateSubscription = %q, %v; want [a b] sorted without duplicates", pubs, err)
	}
	const ca = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
	bad := map[string]func(*instanceapi.SubscriptionRequest){
		"no database":        func(r *instanceapi.SubscriptionRequest) { r.Database = "" },
		"not a slot name":    func(r *instanceapi.SubscriptionRequest) { r.Name = "Sub-1" },
		"no publication":     func(r *instanceapi.SubscriptionRequest) { r.Publications = nil },
		"no connection":      func(r *instanceapi.SubscriptionRequest) { r.ConnInfo = "" },
		"$CA without a CA":   func(r *instanceapi.SubscriptionRequest) { r.ConnInfo = "host=x sslrootcert=$CA" },
		"a CA without $CA":   func(r *instanceapi.SubscriptionRequest) { r.CAPEM = ca },
		"a CA that is not":   func(r *instanceapi.SubscriptionRequest) { r.ConnInfo, r.CAPEM = "sslrootcert=$CA", "nope" },
		"an unknown ensure":  func(r *instanceapi.SubscriptionRequest) { r.Ensure = "gone" },
		"a name of 64 bytes": func(r *instanceapi.SubscriptionRequest) { r.Name = strings.Repeat("s", 64) },
		// What would make the subscriber read or write its pod's files.
		"the manager's passfile": func(r *instanceapi.SubscriptionRequest) { r.ConnInfo = "host=evil passfile=/run/tusk/passfile" },
		"a service file":         func(r *instanceapi.SubscriptionRequest) { r.ConnInfo = "service='x' host=evil" },
		"the pod's key, in a URI": func(r *instanceapi.SubscriptionRequest) {
			r.ConnInfo = "postgresql://evil/app?sslcert=/etc/tusk/tls/tls.crt&sslkey=/etc/tusk/tls/tls.key"
		},
		"a TLS key log":       func(r *instanceapi.SubscriptionRequest) { r.ConnInfo = "host=evil sslkeylogfile=/tmp/k" },
		"a password in clear": func(r *instanceapi.SubscriptionRequest) { r.ConnInfo = "host=evil require_auth=password" },
		"an unclosed quote":   func(r *instanceapi.SubscriptionRequest) { r.ConnInfo = "host='evil" },
	}
	for name, change := range bad {
		r := good
		change(&r)
		if _, err := validateSubscription(r); httpStatus(err) != http.StatusUnprocessableEntity {
			t.Errorf("%s: validateSubscription = %v, want a refusal", name, err)
		}
	}
	withCA := good
	withCA.ConnInfo, withCA.CAPEM = "host=x sslmode=verify-full sslrootcert=$CA", ca
	if _, err := validateSubscription(withCA); err != nil {
		t.Errorf("a CA with $CA: %v", err)
	}
	scram := good
	scram.ConnInfo = `host=x password='it\'s a \\ b' require_auth=scram-sha-256 dbname=app`
	if _, err := validateSubscription(scram); err != nil {
		t.Errorf("SCRAM asked for, a quoted password: %v", err)
	}
}

// TestWithSCRAMOnly: a subscription's connection asks libpq for SCRAM
// only, in either form, unless it says so already.
func TestWithSCRAMOnly(t *testing.T) {
	for in, want := range map[string]string{
		"host=x password=p":                          "host=x password=p require_auth=scram-sha-256",
		"host=x require_auth=scram-sha-256":          "host=x require_auth=scram-sha-256",
		"postgresql://u:p@x/app":                     "postgresql://u:p@x/app?require_auth=scram-sha-256",
		"postgresql://u:p@x/app?sslmode=verify-full": "postgresql://u:p@x/app?sslmode=verify-full&require_auth=scram-sha-256",
	} {
		if got := withSCRAMOnly(in); got != want {
			t.Errorf("withSCRAMOnly(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSubscriptionCA checks the CA file: in the run directory, 0600,
// rewritten only when its content changes, its path in place of $CA.
func TestSubscriptionCA(t *testing.T) {
	run := t.TempDir()
	o := New(Port{RunDir: run, Log: logr.Discard()})
	req := instanceapi.SubscriptionRequest{Name: "sub", Database: "app", CAPEM: "one",
		ConnInfo: "host=pub sslmode=verify-full sslrootcert=$CA password=x"}
	path := o.subscriptionCAPath(req.Database, req.Name)
	if want := filepath.Join(run, "subscriptions", "app.sub.ca.crt"); path != want {
		t.Errorf("path = %s, want %s", path, want)
	}
	if odd := o.subscriptionCAPath("my db's", "sub"); strings.ContainsAny(filepath.Base(odd), " '/") {
		t.Errorf("path %s needs quoting in a connection string", odd)
	}
	if got := strings.ReplaceAll(req.ConnInfo, caPlaceholder, path); got != "host=pub sslmode=verify-full sslrootcert="+path+" password=x" {
		t.Errorf("substituted = %s", got)
	}
	write := func(pem string) []string {
		req.CAPEM = pem
		res, err := o.writeSubscriptionCA(path, req)
		if err != nil {
			t.Fatal(err)
		}
		return res.Changes
	}
	if changes := write("one"); len(changes) != 1 {
		t.Errorf("first write: changes %q", changes)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("CA file: %v, %v; want mode 0600", info, err)
	}
	if changes := write("one"); len(changes) != 0 {
		t.Errorf("same CA again: changes %q, want none", changes)
	}
	if after, _ := os.Stat(path); !after.ModTime().Equal(info.ModTime()) {
		t.Errorf("the same CA rewrote the file")
	}
	if changes := write("two"); len(changes) != 1 {
		t.Errorf("new CA: changes %q", changes)
	}
	if data, _ := os.ReadFile(path); string(data) != "two" {
		t.Errorf("CA file holds %q, want two", data)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

func TestRedactConnInfo(t *testing.T) {
	for _, tt := range []struct{ conn, msg string }{
		{"host=a user=u password=s3cr3t dbname=app", `ERROR: bad "host=a user=u password=s3cr3t dbname=app" and s3cr3t`},
		{`host=a password='it\'s q x' port=1`, `ERROR: near "password='it\'s q x'", and it's q x`},
		{"postgres://u:p4ss@h/db?sslmode=disable", "could not connect: postgres://u:p4ss@h/db (p4ss)"},
		{"host=a", "ERROR: password=leak&x from elsewhere"},
	} {
		got := RedactConnInfo(tt.msg, tt.conn)
		for _, secret := range []string{"s3cr3t", "s q x", "p4ss", "leak"} {
			if strings.Contains(got, secret) {
				t.Errorf("RedactConnInfo(%q) = %q: shows %q", tt.msg, got, secret)
			}
		}
	}
}

func TestExplainSubscriptionError(t *testing.T) {
	drop := instanceapi.SubscriptionRequest{Name: "sub", Database: "app", Ensure: instanceapi.EnsureAbsent}
	unreachable := &pgconn.PgError{Code: "08006", Message: "could not connect to publisher when attempting to drop replication slot \"sub\": password=hunter2"}
	err := explainSubscriptionError(unreachable, drop, subscriptionState{exists: true, slot: "sub"}, "host=p password=hunter2")
	if httpStatus(err) != http.StatusUnprocessableEntity {
		t.Errorf("unreachable publisher on drop: %v, want a refusal", err)
	}
	for _, want := range []string{"not dropped", "SET (slot_name = NONE)", "pg_drop_replication_slot('sub')"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("%q shows the password", err)
	}
	other := explainSubscriptionError(errors.New("conn closed"), drop, subscriptionState{}, "")
	if httpStatus(other) != http.StatusInternalServerError {
		t.Errorf("a broken session: %v, want an internal error", other)
	}
}

func TestLogicalStatusCode(t *testing.T) {
	for err, want := range map[error]int{
		ErrNotWritable: http.StatusConflict,
		fmt.Errorf("while applying: %w", &refusal{reason: "no"}):     http.StatusUnprocessableEntity,
		fmt.Errorf("%w: %w", ErrPostgresDown, errors.New("refused")): http.StatusServiceUnavailable,
		classifyPostgresError(&pgconn.PgError{Code: "42P01"}):        http.StatusUnprocessableEntity,
		classifyPostgresError(&pgconn.PgError{Code: "57P01"}):        http.StatusServiceUnavailable,
		classifyPostgresError(&pgconn.PgError{Code: "53100"}):        http.StatusInternalServerError,
		classifyPostgresError(errors.New("unexpected EOF")):          http.StatusInternalServerError,
	} {
		if got := httpStatus(err); got != want {
			t.Errorf("httpStatus(%v) = %d, want %d", err, got, want)
		}
	}
}

func TestLogMessage(t *testing.T) {
	for change, want := range map[string]string{
		"created publication p for all tables":   "Creating publication p for all tables",
		"changed the connection of subscription": "Changing the connection of subscription",
		"disabled subscription s":                "Disabling subscription s",
		"wrote the CA":                           "Applying: wrote the CA",
	} {
		if got := logMessage(change); got != want {
			t.Errorf("logMessage(%q) = %q, want %q", change, got, want)
		}
	}
}

// TestNothingToDrop: a publication or subscription asked to be absent from
// a database that does not exist is done; asked to be present, it is
// refused.
func TestNothingToDrop(t *testing.T) {
	missing := &refusal{reason: "database shop does not exist", missingDatabase: true}
	if !nothingToDrop(instanceapi.EnsureAbsent, fmt.Errorf("while connecting: %w", missing)) {
		t.Error("an absent object in a missing database is not done")
	}
	if nothingToDrop(instanceapi.EnsurePresent, missing) || nothingToDrop("", missing) {
		t.Error("a present object in a missing database is done")
	}
	if nothingToDrop(instanceapi.EnsureAbsent, refuse("table x does not exist")) || nothingToDrop(instanceapi.EnsureAbsent, nil) {
		t.Error("another refusal, or no error, counts as a missing database")
	}
}
