//go:build integration

package instance

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"k8s.io/utils/ptr"

	"tusk.dev/tusk/internal/instanceapi"
)

// applyDatabase sends req to n and returns its result, failing the test
// on anything but 200.
func applyDatabase(t *testing.T, n *node, req instanceapi.DatabaseRequest) instanceapi.ApplyResult {
	t.Helper()
	var res instanceapi.ApplyResult
	n.command(http.MethodPut, instanceapi.PathSQLDatabases, req, &res)
	return res
}

// applyDatabaseN applies req and checks it took want statements.
func applyDatabaseN(t *testing.T, n *node, req instanceapi.DatabaseRequest, want int) instanceapi.ApplyResult {
	t.Helper()
	res := applyDatabase(t, n, req)
	if res.Statements != want {
		t.Errorf("applying %s: %d statements (%q), want %d", req.Name, res.Statements, res.Changes, want)
	}
	if len(res.Changes) != res.Statements {
		t.Errorf("applying %s: %d changes for %d statements: %q", req.Name, len(res.Changes), res.Statements, res.Changes)
	}
	return res
}

// refusedDatabase sends req to n and checks the reply is code with an
// error that says wantMsg.
func refusedDatabase(t *testing.T, n *node, req instanceapi.DatabaseRequest, code int, wantMsg string) {
	t.Helper()
	var reply struct {
		Error string `json:"error"`
	}
	got, _ := n.call(t.Context(), http.MethodPut, instanceapi.PathSQLDatabases, req, &reply)
	if got != code || !strings.Contains(reply.Error, wantMsg) {
		t.Errorf("applying %s: HTTP %d %q, want %d with %q", req.Name, got, reply.Error, code, wantMsg)
	}
}

// queryIn runs one query as the superuser in database and scans its row.
func queryIn(t *testing.T, n *node, database, sql string, dest ...any) {
	t.Helper()
	n.withConn("postgres", superuserPassword, database, func(conn *pgx.Conn) error {
		return conn.QueryRow(t.Context(), sql).Scan(dest...)
	})
}

func execIn(t *testing.T, n *node, database, sql string) {
	t.Helper()
	n.withConn("postgres", superuserPassword, database, func(conn *pgx.Conn) error {
		_, err := conn.Exec(t.Context(), sql)
		return err
	})
}

// TestManagedDatabase applies a PostgresDatabase's requests to a real
// primary, in order: create, drift put back, extensions, schemas,
// refusals, drop. Each step builds on the one before.
func TestManagedDatabase(t *testing.T) {
	primary := startNode(t, "db-1", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)
	// Role management is another resource's: the owners are made by hand.
	primary.exec("CREATE ROLE shop_owner; CREATE ROLE shop_other")

	shop := instanceapi.DatabaseRequest{Name: "shop", Owner: "shop_owner", Encoding: "UTF8", Locale: "C.UTF-8",
		Template: "template0", ConnectionLimit: ptr.To[int32](10)}
	t.Run("create", func(t *testing.T) { testDatabaseCreate(t, primary, shop) })
	t.Run("drift", func(t *testing.T) { testDatabaseDrift(t, primary, shop) })
	t.Run("extensions", func(t *testing.T) { testDatabaseExtensions(t, primary, shop) })
	t.Run("schemas", func(t *testing.T) { testDatabaseSchemas(t, primary, shop) })
	t.Run("refusals", func(t *testing.T) { testDatabaseRefusals(t, primary, shop) })
	t.Run("drop", func(t *testing.T) { testDatabaseDrop(t, primary, shop) })
	for _, action := range []string{"Creating database", "Changing the database owner", "Creating schema",
		"Creating extension", "Updating extension", "Dropping extension", "Dropping schema", "Dropping database"} {
		if !strings.Contains(primary.logs(), `"msg":"`+action+`"`) {
			t.Errorf("the manager did not log %q", action)
		}
	}
}

func testDatabaseCreate(t *testing.T, n *node, shop instanceapi.DatabaseRequest) {
	res := applyDatabaseN(t, n, shop, 1)
	if !res.Exists || !slices.Equal(res.Changes, []string{"created database shop"}) {
		t.Errorf("created: %+v", res)
	}
	var owner, encoding, collate, ctype string
	var limit int32
	queryIn(t, n, "postgres", `SELECT pg_get_userbyid(datdba), pg_encoding_to_char(encoding), datcollate, datctype, datconnlimit
		FROM pg_database WHERE datname = 'shop'`, &owner, &encoding, &collate, &ctype, &limit)
	if owner != "shop_owner" || encoding != "UTF8" || collate != "C.UTF-8" || ctype != "C.UTF-8" || limit != 10 {
		t.Errorf("database shop: owner %s, encoding %s, collate %s, ctype %s, connection limit %d", owner, encoding, collate, ctype, limit)
	}
	applyDatabaseN(t, n, shop, 0)
	// What applies at creation only is left as it is afterwards.
	later := shop
	later.Encoding, later.Locale, later.Template = "SQL_ASCII", "C", "template1"
	applyDatabaseN(t, n, later, 0)
}

func testDatabaseDrift(t *testing.T, n *node, shop instanceapi.DatabaseRequest) {
	execIn(t, n, "postgres", `ALTER DATABASE shop OWNER TO shop_other`)
	execIn(t, n, "postgres", `ALTER DATABASE shop CONNECTION LIMIT 3`)
	applyDatabaseN(t, n, shop, 2)
	checkDatabase := func(wantOwner string, wantLimit int32) {
		t.Helper()
		var owner string
		var limit int32
		queryIn(t, n, "postgres", `SELECT pg_get_userbyid(datdba), datconnlimit FROM pg_database WHERE datname = 'shop'`, &owner, &limit)
		if owner != wantOwner || limit != wantLimit {
			t.Errorf("database shop: owner %s, connection limit %d; want %s, %d", owner, limit, wantOwner, wantLimit)
		}
	}
	checkDatabase("shop_owner", 10)

	changed := shop
	changed.Owner, changed.ConnectionLimit = "shop_other", nil
	applyDatabaseN(t, n, changed, 2)
	checkDatabase("shop_other", -1)
	applyDatabaseN(t, n, changed, 0)
	applyDatabaseN(t, n, shop, 2)
	checkDatabase("shop_owner", 10)
}

// extensionState is an extension's version and schema, "" when absent.
func extensionState(t *testing.T, n *node, name string) (version, schema string) {
	t.Helper()
	queryIn(t, n, "shop", `SELECT coalesce((SELECT extversion FROM pg_extension WHERE extname = '`+name+`'), ''),
		coalesce((SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE extname = '`+name+`'), '')`,
		&version, &schema)
	return version, schema
}

func testDatabaseExtensions(t *testing.T, n *node, shop instanceapi.DatabaseRequest) {
	var versions int
	queryIn(t, n, "postgres", `SELECT count(*) FROM pg_available_extension_versions WHERE name = 'hstore' AND version IN ('1.7', '1.8')`, &versions)
	if versions != 2 {
		t.Fatalf("this image has %d of hstore's versions 1.7 and 1.8", versions)
	}
	req := shop
	req.Schemas = []instanceapi.SchemaRequest{{Name: "crypto"}}
	req.Extensions = []instanceapi.ExtensionRequest{{Name: "pgcrypto", Schema: "crypto"}, {Name: "hstore", Version: "1.7"}, {Name: "citext"}}
	applyDatabaseN(t, n, req, 4)
	for _, want := range []struct{ name, version, schema string }{
		{"pgcrypto", "1.3", "crypto"}, {"hstore", "1.7", "public"}, {"citext", "1.6", "public"},
	} {
		// An extension without a schema goes where PostgreSQL's default
		// search_path says (public), not where the manager's pinned one would.
		if v, s := extensionState(t, n, want.name); v != want.version || s != want.schema {
			t.Errorf("extension %s: version %q in schema %q, want %s in %s", want.name, v, s, want.version, want.schema)
		}
	}
	var owner string
	queryIn(t, n, "shop", `SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'crypto'`, &owner)
	if owner != "shop_owner" {
		t.Errorf("schema crypto is owned by %s, want the database's owner", owner)
	}
	applyDatabaseN(t, n, req, 0)

	req.Extensions = []instanceapi.ExtensionRequest{{Name: "pgcrypto", Schema: "crypto"}, {Name: "hstore", Version: "1.8"}, {Name: "citext", Schema: "crypto"}}
	applyDatabaseN(t, n, req, 2)
	if v, _ := extensionState(t, n, "hstore"); v != "1.8" {
		t.Errorf("hstore is at version %q after the update, want 1.8", v)
	}
	if _, s := extensionState(t, n, "citext"); s != "crypto" {
		t.Errorf("citext is in schema %q after the move, want crypto", s)
	}
	// Unlisted extensions are left alone.
	req.Extensions = []instanceapi.ExtensionRequest{{Name: "hstore", Ensure: instanceapi.EnsureAbsent}}
	applyDatabaseN(t, n, req, 1)
	if v, _ := extensionState(t, n, "hstore"); v != "" {
		t.Errorf("hstore still installed (%s)", v)
	}
	if v, _ := extensionState(t, n, "pgcrypto"); v == "" {
		t.Error("pgcrypto, no longer listed, was dropped")
	}
	applyDatabaseN(t, n, req, 0)
}

func schemaOwner(t *testing.T, n *node, name string) string {
	t.Helper()
	var owner string
	queryIn(t, n, "shop", `SELECT coalesce((SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = '`+name+`'), '')`, &owner)
	return owner
}

func testDatabaseSchemas(t *testing.T, n *node, shop instanceapi.DatabaseRequest) {
	req := shop
	req.Schemas = []instanceapi.SchemaRequest{{Name: "reports", Owner: "shop_other"}}
	applyDatabaseN(t, n, req, 1)
	if o := schemaOwner(t, n, "reports"); o != "shop_other" {
		t.Errorf("schema reports is owned by %q, want shop_other", o)
	}
	execIn(t, n, "shop", `ALTER SCHEMA reports OWNER TO shop_owner`)
	applyDatabaseN(t, n, req, 1)
	if o := schemaOwner(t, n, "reports"); o != "shop_other" {
		t.Errorf("schema reports is owned by %q after the drift was put back, want shop_other", o)
	}
	req.Schemas[0].Owner = "" // the database's owner
	applyDatabaseN(t, n, req, 1)
	if o := schemaOwner(t, n, "reports"); o != "shop_owner" {
		t.Errorf("schema reports is owned by %q, want the database's owner", o)
	}

	execIn(t, n, "shop", `CREATE TABLE reports.daily (id int); CREATE FUNCTION reports.f() RETURNS int LANGUAGE sql AS 'SELECT 1'`)
	req.Schemas = []instanceapi.SchemaRequest{{Name: "reports", Ensure: instanceapi.EnsureAbsent}}
	refusedDatabase(t, n, req, http.StatusUnprocessableEntity, "schema reports holds 2 objects")
	if o := schemaOwner(t, n, "reports"); o == "" {
		t.Fatal("a refused drop dropped schema reports")
	}
	execIn(t, n, "shop", `DROP TABLE reports.daily; DROP FUNCTION reports.f()`)
	applyDatabaseN(t, n, req, 1)
	if o := schemaOwner(t, n, "reports"); o != "" {
		t.Error("schema reports still exists")
	}
	applyDatabaseN(t, n, req, 0)
}

// testDatabaseRefusals: each refused request changes nothing, the parts
// that could apply included.
func testDatabaseRefusals(t *testing.T, n *node, shop instanceapi.DatabaseRequest) {
	req := shop
	req.ConnectionLimit = ptr.To[int32](7)
	req.Schemas = []instanceapi.SchemaRequest{{Name: "never"}}
	req.Extensions = []instanceapi.ExtensionRequest{{Name: "citext"}, {Name: "postgis"}}
	refusedDatabase(t, n, req, http.StatusUnprocessableEntity, "extension postgis is not available in this image (no control file)")
	req.Extensions = []instanceapi.ExtensionRequest{{Name: "hstore", Version: "9.9"}}
	refusedDatabase(t, n, req, http.StatusUnprocessableEntity, "extension hstore version 9.9 is not available in this image")
	req.Extensions = nil
	req.Schemas = []instanceapi.SchemaRequest{{Name: "never", Owner: "ghost"}}
	refusedDatabase(t, n, req, http.StatusUnprocessableEntity, "owner role ghost of schema never does not exist")
	if o := schemaOwner(t, n, "never"); o != "" {
		t.Error("a refused request created schema never")
	}
	var limit int32
	queryIn(t, n, "postgres", `SELECT datconnlimit FROM pg_database WHERE datname = 'shop'`, &limit)
	if limit != 10 {
		t.Errorf("a refused request changed the connection limit to %d", limit)
	}

	refusedDatabase(t, n, instanceapi.DatabaseRequest{Name: "ghosts", Owner: "ghost"},
		http.StatusUnprocessableEntity, "owner role ghost does not exist")
	var exists bool
	queryIn(t, n, "postgres", `SELECT EXISTS (SELECT FROM pg_database WHERE datname = 'ghosts')`, &exists)
	if exists {
		t.Error("database ghosts was created for a missing owner")
	}
	for _, name := range []string{"postgres", "template0", "template1"} {
		refusedDatabase(t, n, instanceapi.DatabaseRequest{Name: name, Ensure: instanceapi.EnsureAbsent},
			http.StatusUnprocessableEntity, "PostgreSQL's own")
	}
}

func testDatabaseDrop(t *testing.T, n *node, shop instanceapi.DatabaseRequest) {
	session, err := n.tryConnect(t.Context(), "postgres", superuserPassword, "shop")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = session.Close(context.Background()) }()
	drop := instanceapi.DatabaseRequest{Name: shop.Name, Ensure: instanceapi.EnsureAbsent}
	refusedDatabase(t, n, drop, http.StatusUnprocessableEntity, "database shop has 1 open sessions")
	if err := session.Ping(t.Context()); err != nil {
		t.Fatalf("the refused drop ended the session: %v", err)
	}
	drop.ForceDrop = true
	res := applyDatabaseN(t, n, drop, 1)
	if res.Exists {
		t.Errorf("dropped: %+v", res)
	}
	var exists bool
	queryIn(t, n, "postgres", `SELECT EXISTS (SELECT FROM pg_database WHERE datname = 'shop')`, &exists)
	if exists {
		t.Error("database shop still exists")
	}
	if err := session.Ping(t.Context()); err == nil {
		t.Error("the forced drop left the session open")
	}
	applyDatabaseN(t, n, drop, 0)
}

// TestManagedDatabaseOnReplica: only the primary applies; a replica
// answers 409 and changes nothing.
func TestManagedDatabaseOnReplica(t *testing.T) {
	primary := startNode(t, "dbr-1", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)
	replica := startNode(t, "dbr-2", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
	replica.waitReady(instanceapi.RoleReplica)

	refusedDatabase(t, replica, instanceapi.DatabaseRequest{Name: "shop"}, http.StatusConflict, "not a writable primary")
	var exists bool
	queryIn(t, primary, "postgres", `SELECT EXISTS (SELECT FROM pg_database WHERE datname = 'shop')`, &exists)
	if exists {
		t.Error("database shop was created through the replica")
	}
	applyDatabaseN(t, primary, instanceapi.DatabaseRequest{Name: "shop"}, 1)
}

// TestExtensionsAreInstalledSafely: the manager installs extensions as the
// superuser, so what a database's owner controls must not choose what
// that runs. An extension PostgreSQL does not mark trusted is refused
// unless the cluster allows untrusted extensions; and an extension without
// a schema goes to public, not to a schema named postgres ("$user" of the
// superuser's session) that the owner made to catch it.
func TestExtensionsAreInstalledSafely(t *testing.T) {
	primary := startNode(t, "ext-1", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)
	primary.exec("CREATE ROLE tenant LOGIN")
	db := instanceapi.DatabaseRequest{Name: "shop", Owner: "tenant"}
	applyDatabaseN(t, primary, db, 1)

	// A schema of the database's owner that the superuser's "$user" would
	// name first (the owner may create schemas in its database).
	execIn(t, primary, "shop", "CREATE SCHEMA postgres AUTHORIZATION tenant")
	trusted := db
	trusted.Extensions = []instanceapi.ExtensionRequest{{Name: "citext"}}
	applyDatabaseN(t, primary, trusted, 1)
	if _, schema := extensionState(t, primary, "citext"); schema != "public" {
		t.Errorf("an extension without a schema went to schema %q, want public", schema)
	}

	untrusted := db
	untrusted.Extensions = []instanceapi.ExtensionRequest{{Name: "file_fdw"}}
	refusedDatabase(t, primary, untrusted, http.StatusUnprocessableEntity,
		"extension file_fdw version 1.0 is not trusted by PostgreSQL")
	if version, _ := extensionState(t, primary, "file_fdw"); version != "" {
		t.Errorf("a refused untrusted extension was created (version %s)", version)
	}
	untrusted.AllowUntrustedExtensions = true
	applyDatabaseN(t, primary, untrusted, 1)
	if version, _ := extensionState(t, primary, "file_fdw"); version == "" {
		t.Error("an untrusted extension the cluster allows was not created")
	}
}
