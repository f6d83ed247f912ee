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
// (the application owner for a reserved one: no superuser owns an
// imported database) and its settings; the application database the
// bootstrap made is only given its settings.
func TestCreateDatabaseStatements(t *testing.T) {
	for _, tc := range []struct {
		db   sourceDatabase
		want []string
	}{
		{sourceDatabase{name: "shop", owner: "shop", encoding: "LATIN1", settings: []string{"timezone=UTC"}},
			[]string{`CREATE DATABASE "shop" OWNER "shop" ENCODING 'LATIN1' TEMPLATE template0`, `ALTER DATABASE "shop" SET "timezone" = 'UTC'`}},
		{sourceDatabase{name: "legacy", owner: "postgres", encoding: "UTF8"},
			[]string{`CREATE DATABASE "legacy" OWNER "owner" ENCODING 'UTF8' TEMPLATE template0`}},
		{sourceDatabase{name: "weird", owner: "tusk_x", encoding: "UTF8"},
			[]string{`CREATE DATABASE "weird" OWNER "owner" ENCODING 'UTF8' TEMPLATE template0`}},
		{sourceDatabase{name: "app", owner: "someone", encoding: "UTF8", settings: []string{"work_mem=8MB"}},
			[]string{`ALTER DATABASE "app" SET "work_mem" = '8MB'`}},
	} {
		if got := createDatabaseStatements(tc.db, "app", "owner"); !slices.Equal(got, tc.want) {
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

// TestRestoreRoleMembers: the restore role may act as the roles the import
// created and the application owner, never as a CREATEROLE role; with an
// owner it cannot act as, or one that creates in a schema by a grant, the
// restore leaves the owners out.
func TestRestoreRoleMembers(t *testing.T) {
	src := &importSource{roles: []sourceRole{{name: "shop"}, {name: "admin", createRole: true}, {name: "postgres", superuser: true}}}
	members := restoreRoleMembers(src, []string{"shop", "admin"}, "app")
	if !slices.Equal(members, []string{"shop", "app"}) {
		t.Errorf("members = %v, want [shop app]", members)
	}
	carried := map[string]bool{"shop": true, "app": true}
	for _, tc := range []struct {
		objs    sourceDatabaseObjects
		notKept []string
		args    []string
	}{
		{sourceDatabaseObjects{owners: []string{"app", "shop"}}, nil, []string{"--exit-on-error", "--no-tablespaces", "--dbname=d"}},
		{sourceDatabaseObjects{owners: []string{"postgres", "admin", "shop"}}, []string{"admin", "postgres"},
			[]string{"--exit-on-error", "--no-tablespaces", "--dbname=d", "--no-owner"}},
		{sourceDatabaseObjects{owners: []string{"app", "shop"}, schemaGuests: []string{"shop"}}, []string{"shop"},
			[]string{"--exit-on-error", "--no-tablespaces", "--dbname=d", "--no-owner"}},
	} {
		notKept := ownersNotKept(tc.objs, carried)
		if !slices.Equal(notKept, tc.notKept) {
			t.Errorf("ownersNotKept(%+v) = %v, want %v", tc.objs, notKept, tc.notKept)
		}
		if args := restoreArgs("d", len(notKept) == 0); !slices.Equal(args, tc.args) {
			t.Errorf("restoreArgs = %v, want %v", args, tc.args)
		}
	}
}

// TestRefuseUnsafeObjects: event triggers, untrusted extensions and (in a
// dump) publications of whole schemas are named with the reason; a
// database with none passes.
func TestRefuseUnsafeObjects(t *testing.T) {
	if err := refuseUnsafeObjects("shop", sourceDatabaseObjects{wholePublications: []string{"cdc"}}, nil, false); err != nil {
		t.Errorf("nothing unsafe: %v", err)
	}
	objs := sourceDatabaseObjects{eventTriggers: []string{"audit_ddl"}, wholePublications: []string{"cdc"}}
	err := refuseUnsafeObjects("shop", objs, []string{"file_fdw", "plpython3u"}, true)
	want := "the import source's database shop has the event trigger audit_ddl (it would run as whoever changes the schema, Tusk's superuser too) " +
		"and the extensions file_fdw, plpython3u (not marked trusted, so only a superuser may create them) " +
		"and the publication cdc (of all tables or of a schema, so only a superuser may create it; method logical leaves publications out); " +
		"the import restores as a role that is no superuser, " +
		"so that nothing of the source runs as one: drop what is named here on the source to import the database"
	if err == nil || err.Error() != want {
		t.Errorf("error %v\nwant %s", err, want)
	}
}

// TestSourceOwnersQuery: every catalog with an owner is read, without
// initdb's objects and extensions' members; the guests' query reads the
// catalogs of objects in schemas, for owners without the schema owner's
// rights.
func TestSourceOwnersQuery(t *testing.T) {
	q := sourceOwnersQuery(false)
	for _, want := range []string{
		"SELECT o.relowner AS owner FROM pg_catalog.pg_class o WHERE o.oid >= 16384 AND o.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') AND o.relpersistence <> 't'",
		"SELECT o.nspowner AS owner FROM pg_catalog.pg_namespace o WHERE (o.oid >= 16384 OR (o.nspname = 'public' AND o.nspowner <> 6171)) AND o.nspname !~ '^pg_'",
		"d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = o.oid AND d.deptype = 'e'",
		"pg_largeobject_metadata",
	} {
		if !strings.Contains(q, want) {
			t.Errorf("the owners query lacks %q:\n%s", want, q)
		}
	}
	if n := strings.Count(q, "UNION ALL"); n != len(ownedCatalogs)-1 {
		t.Errorf("%d UNION ALL for %d catalogs", n, len(ownedCatalogs))
	}
	guests := sourceOwnersQuery(true)
	if want := "NOT pg_catalog.pg_has_role(o.relowner, (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.oid = o.relnamespace), 'USAGE')"; !strings.Contains(guests, want) {
		t.Errorf("the guests' query lacks %q:\n%s", want, guests)
	}
	if strings.Contains(guests, "pg_namespace o") || strings.Contains(guests, "pg_publication o") {
		t.Errorf("the guests' query reads catalogs of objects outside schemas:\n%s", guests)
	}
}

// TestWithoutRowData: pg_restore's error, on its way to the cluster's
// status, keeps what failed and where, not the rows' values.
func TestWithoutRowData(t *testing.T) {
	out := `pg_restore: error: COPY failed for table "orders": ERROR:  invalid input syntax for type integer: "4111 1111 1111 1111" / ` +
		`CONTEXT:  COPY orders, line 7, column id: "4111 1111 1111 1111" / ` +
		`pg_restore: error: could not execute query: ERROR:  duplicate key value violates unique constraint "users_pkey" / ` +
		`DETAIL:  Key (email)=(alice@example.com) already exists. / ` +
		`Command was: INSERT INTO public.users VALUES ('alice@example.com', 'secret');`
	got := withoutRowData(out)
	for _, secret := range []string{"4111", "alice@example.com", "secret"} {
		if strings.Contains(got, secret) {
			t.Errorf("%q kept %q", got, secret)
		}
	}
	for _, want := range []string{`COPY failed for table "orders"`, "invalid input syntax for type integer: (…)", `unique constraint "users_pkey"`} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lost %q", got, want)
		}
	}
}
