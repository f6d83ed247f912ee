package instance

import (
	"slices"
	"strings"
	"testing"
)

// TestPlanRoleImport: roles are created with their attributes, verifiers
// and settings, except Tusk's, PostgreSQL's and those the new cluster has;
// SUPERUSER, REPLICATION, the server-file roles and, below PostgreSQL 16,
// CREATEROLE are never carried, and the plan says so; memberships follow
// the roles that exist.
func TestPlanRoleImport(t *testing.T) {
	scram := "SCRAM-SHA-256$4096:c2FsdA==$a:b"
	until := "2030-01-01 00:00:00+00"
	src := &importSource{
		roles: []sourceRole{
			{name: "postgres", superuser: true, login: true},
			{name: "tusk_monitor", login: true},
			{name: "app", login: true},
			{name: "admin", superuser: true, replication: true, login: true, inherit: true, connLimit: -1, verifier: &scram},
			{name: "shop", login: true, inherit: true, createDB: true, createRole: true, connLimit: 5, validUntil: &until, verifier: &scram,
				settings: []string{"search_path=shop, public", "work_mem=64MB"}},
			{name: "readers", inherit: true, connLimit: -1},
			{name: "nopass", login: true, connLimit: -1},
		},
		memberships: []sourceMembership{
			{role: "readers", member: "shop", admin: true},
			{role: "pg_read_all_data", member: "readers"},
			{role: "pg_execute_server_program", member: "admin"},
			{role: "tusk_monitor", member: "nopass"},
			{role: "readers", member: "postgres"},
		},
	}
	existing := map[string]bool{"postgres": true, "app": true, "tusk_monitor": true, "pg_read_all_data": true}
	p := planRoleImport(src, existing, 15)
	want := []string{
		`CREATE ROLE "admin" WITH LOGIN INHERIT NOCREATEROLE NOCREATEDB NOBYPASSRLS CONNECTION LIMIT -1 PASSWORD '` + scram + `'`,
		`CREATE ROLE "shop" WITH LOGIN INHERIT NOCREATEROLE CREATEDB NOBYPASSRLS CONNECTION LIMIT 5 VALID UNTIL '` + until + `' PASSWORD '` + scram + `'`,
		`ALTER ROLE "shop" SET "search_path" = 'shop', 'public'`,
		`ALTER ROLE "shop" SET "work_mem" = '64MB'`,
		`CREATE ROLE "readers" WITH NOLOGIN INHERIT NOCREATEROLE NOCREATEDB NOBYPASSRLS CONNECTION LIMIT -1`,
		`CREATE ROLE "nopass" WITH LOGIN NOINHERIT NOCREATEROLE NOCREATEDB NOBYPASSRLS CONNECTION LIMIT -1`,
		`GRANT "readers" TO "shop" WITH ADMIN OPTION`,
		`GRANT "pg_read_all_data" TO "readers"`,
	}
	if !slices.Equal(p.statements, want) {
		t.Errorf("statements:\n%s\nwant:\n%s", strings.Join(p.statements, "\n"), strings.Join(want, "\n"))
	}
	for what, got := range map[string][]string{"created": p.created, "kept": p.kept, "withoutPassword": p.withoutPassword, "dropped": p.dropped} {
		wantList := map[string][]string{
			"created":         {"admin", "shop", "readers", "nopass"},
			"kept":            {"postgres", "tusk_monitor", "app"},
			"withoutPassword": {"nopass"},
			"dropped": {"admin SUPERUSER", "admin REPLICATION", "shop CREATEROLE", "admin IN ROLE pg_execute_server_program",
				"nopass IN ROLE tusk_monitor"},
		}[what]
		if !slices.Equal(got, wantList) {
			t.Errorf("%s = %v, want %v", what, got, wantList)
		}
	}

	// From 16, CREATEROLE grants only the roles it administers: it stays.
	p = planRoleImport(src, existing, 16)
	if !strings.Contains(p.statements[1], "INHERIT CREATEROLE CREATEDB") || slices.Contains(p.dropped, "shop CREATEROLE") {
		t.Errorf("on 16, shop is %s and dropped %v; want CREATEROLE kept", p.statements[1], p.dropped)
	}
}

// TestCreateDatabaseStatements: a database keeps its encoding and owner
// (postgres for a reserved owner) and its settings; the application
// database the bootstrap made is only given its settings.
func TestCreateDatabaseStatements(t *testing.T) {
	for _, tc := range []struct {
		db   sourceDatabase
		want []string
	}{
		{sourceDatabase{name: "shop", owner: "shop", encoding: "LATIN1", settings: []string{"timezone=UTC"}},
			[]string{`CREATE DATABASE "shop" OWNER "shop" ENCODING 'LATIN1' TEMPLATE template0`, `ALTER DATABASE "shop" SET "timezone" = 'UTC'`}},
		{sourceDatabase{name: "legacy", owner: "postgres", encoding: "UTF8"},
			[]string{`CREATE DATABASE "legacy" OWNER "postgres" ENCODING 'UTF8' TEMPLATE template0`}},
		{sourceDatabase{name: "weird", owner: "tusk_x", encoding: "UTF8"},
			[]string{`CREATE DATABASE "weird" OWNER "postgres" ENCODING 'UTF8' TEMPLATE template0`}},
		{sourceDatabase{name: "app", owner: "someone", encoding: "UTF8", settings: []string{"work_mem=8MB"}},
			[]string{`ALTER DATABASE "app" SET "work_mem" = '8MB'`}},
	} {
		if got := createDatabaseStatements(tc.db, "app"); !slices.Equal(got, tc.want) {
			t.Errorf("createDatabaseStatements(%+v) = %q, want %q", tc.db, got, tc.want)
		}
	}
}

// TestSourceConnInfoQuotes: values with spaces and quotes stay one value.
func TestSourceConnInfoQuotes(t *testing.T) {
	imp := &ImportOptions{Host: "db.example.com", Port: 6432, User: `o'brien`, SSLMode: "verify-full", CAFile: "/ca dir/ca.crt"}
	got := sourceConnInfo(imp, `my db`)
	want := `host='db.example.com' port=6432 user='o\'brien' dbname='my db' sslmode=verify-full connect_timeout=10 application_name=tusk-import sslrootcert='/ca dir/ca.crt'`
	if got != want {
		t.Errorf("sourceConnInfo = %s\nwant %s", got, want)
	}
}
