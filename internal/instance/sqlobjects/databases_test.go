package sqlobjects

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"k8s.io/utils/ptr"

	"tusk.dev/tusk/internal/instanceapi"
)

func sqlOf(steps []sqlStep) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.sql)
	}
	return out
}

// checkPlan compares a plan's SQL, or the refusal expected in its place.
func checkPlan(t *testing.T, steps []sqlStep, err error, want []string, refused string) {
	t.Helper()
	if refused != "" {
		if _, ok := errors.AsType[*refusal](err); !ok || !strings.Contains(err.Error(), refused) {
			t.Fatalf("want a refusal containing %q, got %v (plan %q)", refused, err, sqlOf(steps))
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := sqlOf(steps); !slices.Equal(got, want) {
		t.Errorf("plan:\n got %q\nwant %q", got, want)
	}
	for _, s := range steps {
		if s.action == "" || s.change == "" {
			t.Errorf("step %q has no log line or change", s.sql)
		}
	}
}

func TestPlanServer(t *testing.T) {
	roles := map[string]bool{"app": true, "other": true}
	exists := &observedDatabase{owner: "app", connectionLimit: -1}
	available := map[string][]string{"hstore": {"1.4", "1.7", "1.8"}, "citext": {"1.6"}}
	tests := []struct {
		name    string
		req     instanceapi.DatabaseRequest
		obs     serverObservation
		want    []string
		refusal string
	}{
		{name: "create with every option",
			req: instanceapi.DatabaseRequest{Name: "shop", Owner: "app", Encoding: "UTF8", Locale: "C.UTF-8",
				Template: "template0", ConnectionLimit: ptr.To[int32](10)},
			obs:  serverObservation{roles: roles, templateExists: true},
			want: []string{`CREATE DATABASE "shop" OWNER "app" ENCODING 'UTF8' LOCALE 'C.UTF-8' TEMPLATE "template0" CONNECTION LIMIT 10`}},
		{name: "create quotes names and literals",
			req:  instanceapi.DatabaseRequest{Name: `we"ird`, Owner: "app", Locale: "it's"},
			obs:  serverObservation{roles: roles},
			want: []string{`CREATE DATABASE "we""ird" OWNER "app" LOCALE 'it''s'`}},
		{name: "create without an owner",
			req:  instanceapi.DatabaseRequest{Name: "shop"},
			want: []string{`CREATE DATABASE "shop"`}},
		{name: "nothing to do",
			req: instanceapi.DatabaseRequest{Name: "shop", Owner: "app", Encoding: "LATIN1", Locale: "de_DE", Template: "gone"},
			obs: serverObservation{roles: roles, database: exists}},
		{name: "owner and connection limit drifted",
			req:  instanceapi.DatabaseRequest{Name: "shop", Owner: "other", ConnectionLimit: ptr.To[int32](5)},
			obs:  serverObservation{roles: roles, database: exists},
			want: []string{`ALTER DATABASE "shop" OWNER TO "other"`, `ALTER DATABASE "shop" CONNECTION LIMIT 5`}},
		{name: "no connection limit is -1",
			req:  instanceapi.DatabaseRequest{Name: "shop", Owner: "app"},
			obs:  serverObservation{roles: roles, database: &observedDatabase{owner: "app", connectionLimit: 3}},
			want: []string{`ALTER DATABASE "shop" CONNECTION LIMIT -1`}},
		{name: "a missing owner is refused",
			req: instanceapi.DatabaseRequest{Name: "shop", Owner: "ghost"}, obs: serverObservation{roles: roles},
			refusal: "owner role ghost does not exist"},
		{name: "a missing schema owner is refused",
			req: instanceapi.DatabaseRequest{Name: "shop", Owner: "app",
				Schemas: []instanceapi.SchemaRequest{{Name: "s", Owner: "ghost"}}},
			obs: serverObservation{roles: roles, database: exists}, refusal: "owner role ghost of schema s does not exist"},
		{name: "a missing template is refused",
			req: instanceapi.DatabaseRequest{Name: "shop", Template: "gone"}, refusal: "template database gone does not exist"},
		{name: "an extension without a control file is refused",
			req: instanceapi.DatabaseRequest{Name: "shop", Extensions: []instanceapi.ExtensionRequest{{Name: "postgis"}}},
			obs: serverObservation{available: available}, refusal: "extension postgis is not available in this image (no control file)"},
		{name: "an unavailable version is refused",
			req: instanceapi.DatabaseRequest{Name: "shop", Extensions: []instanceapi.ExtensionRequest{{Name: "hstore", Version: "9.9"}}},
			obs: serverObservation{available: available}, refusal: "extension hstore version 9.9 is not available"},
		{name: "an absent extension need not be available",
			req: instanceapi.DatabaseRequest{Name: "shop", Extensions: []instanceapi.ExtensionRequest{{Name: "postgis", Ensure: instanceapi.EnsureAbsent}}},
			obs: serverObservation{database: exists}},
		{name: "a new database's extension in a schema it will not have is refused before the database is created",
			req: instanceapi.DatabaseRequest{Name: "shop", Owner: "app", Extensions: []instanceapi.ExtensionRequest{{Name: "hstore", Schema: "ext"}}},
			obs: serverObservation{roles: roles, available: available}, refusal: "schema ext of extension hstore does not exist"},
		{name: "a new database's extension in a schema it makes, or in public",
			req: instanceapi.DatabaseRequest{Name: "shop", Owner: "app", Schemas: []instanceapi.SchemaRequest{{Name: "ext"}},
				Extensions: []instanceapi.ExtensionRequest{{Name: "hstore", Schema: "ext"}, {Name: "citext", Schema: "public"}}},
			obs:  serverObservation{roles: roles, available: available},
			want: []string{`CREATE DATABASE "shop" OWNER "app"`}},
		{name: "postgres is refused", req: instanceapi.DatabaseRequest{Name: "postgres"}, refusal: "PostgreSQL's own"},
		{name: "template1 is refused", req: instanceapi.DatabaseRequest{Name: "template1", Ensure: instanceapi.EnsureAbsent},
			refusal: "PostgreSQL's own"},
		{name: "no name", req: instanceapi.DatabaseRequest{}, refusal: "no name"},
		{name: "an unknown ensure", req: instanceapi.DatabaseRequest{Name: "shop", Ensure: "maybe"}, refusal: `ensure "maybe"`},
		{name: "a schema listed twice",
			req: instanceapi.DatabaseRequest{Name: "shop", Schemas: []instanceapi.SchemaRequest{{Name: "a"}, {Name: "a"}}}, refusal: "listed twice"},
		{name: "a catalog schema", req: instanceapi.DatabaseRequest{Name: "shop", Schemas: []instanceapi.SchemaRequest{{Name: "pg_catalog"}}},
			refusal: "PostgreSQL's own"},
		{name: "drop",
			req: instanceapi.DatabaseRequest{Name: "shop", Ensure: instanceapi.EnsureAbsent}, obs: serverObservation{database: exists},
			want: []string{`DROP DATABASE "shop"`}},
		{name: "drop what does not exist", req: instanceapi.DatabaseRequest{Name: "shop", Ensure: instanceapi.EnsureAbsent}},
		{name: "drop with sessions is refused",
			req: instanceapi.DatabaseRequest{Name: "shop", Ensure: instanceapi.EnsureAbsent}, obs: serverObservation{database: exists, sessions: 2},
			refusal: "database shop has 2 open sessions"},
		{name: "drop with sessions and force",
			req: instanceapi.DatabaseRequest{Name: "shop", Ensure: instanceapi.EnsureAbsent, ForceDrop: true},
			obs: serverObservation{database: exists, sessions: 2}, want: []string{`DROP DATABASE "shop" WITH (FORCE)`}},
		{name: "drop without sessions needs no force",
			req: instanceapi.DatabaseRequest{Name: "shop", Ensure: instanceapi.EnsureAbsent, ForceDrop: true},
			obs: serverObservation{database: exists}, want: []string{`DROP DATABASE "shop"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps, err := planServer(tt.req, tt.obs)
			checkPlan(t, steps, err, tt.want, tt.refusal)
		})
	}
}

func TestPlanInDatabase(t *testing.T) {
	inside := databaseObservation{owner: "app",
		extensions: map[string]observedExtension{"plpgsql": {"1.0", "pg_catalog"}, "hstore": {"1.7", "public"}},
		schemas:    map[string]observedSchema{"public": {owner: "pg_database_owner", objects: 0}, "full": {owner: "app", objects: 3}},
		installable: map[string]installableExtension{
			"pgcrypto": {defaultVersion: "1.3", trusted: []string{"1.3"}},
			"hstore":   {defaultVersion: "1.8", trusted: []string{"1.7", "1.8"}},
			"citext":   {defaultVersion: "1.6", trusted: []string{"1.6"}},
			"file_fdw": {defaultVersion: "1.0"},
		},
	}
	tests := []struct {
		name           string
		extensions     []instanceapi.ExtensionRequest
		schemas        []instanceapi.SchemaRequest
		allowUntrusted bool
		want           []string
		refusal        string
	}{
		{name: "nothing listed, nothing done"},
		{name: "unlisted extensions are left alone", extensions: []instanceapi.ExtensionRequest{{Name: "hstore"}}},
		{name: "create schema then the extension in it, owner defaults to the database's",
			extensions: []instanceapi.ExtensionRequest{{Name: "pgcrypto", Schema: "crypto", Version: "1.3"}},
			schemas:    []instanceapi.SchemaRequest{{Name: "crypto"}},
			want: []string{`CREATE SCHEMA "crypto" AUTHORIZATION "app"`,
				`CREATE EXTENSION "pgcrypto" WITH SCHEMA "crypto" VERSION '1.3'`}},
		{name: "update and move",
			extensions: []instanceapi.ExtensionRequest{{Name: "hstore", Version: "1.8", Schema: "ext"}},
			schemas:    []instanceapi.SchemaRequest{{Name: "ext", Owner: "other"}},
			want: []string{`CREATE SCHEMA "ext" AUTHORIZATION "other"`,
				`ALTER EXTENSION "hstore" UPDATE TO '1.8'`, `ALTER EXTENSION "hstore" SET SCHEMA "ext"`}},
		{name: "same version and schema", extensions: []instanceapi.ExtensionRequest{{Name: "hstore", Version: "1.7", Schema: "public"}}},
		{name: "schema owner drifted",
			schemas: []instanceapi.SchemaRequest{{Name: "full"}, {Name: "public", Owner: "other"}},
			want:    []string{`ALTER SCHEMA "public" OWNER TO "other"`}},
		{name: "extension in a schema that will not exist is refused",
			extensions: []instanceapi.ExtensionRequest{{Name: "citext", Schema: "nowhere"}}, refusal: "schema nowhere of extension citext does not exist"},
		{name: "drop extension then the schema it emptied",
			extensions: []instanceapi.ExtensionRequest{{Name: "hstore", Ensure: instanceapi.EnsureAbsent}},
			schemas:    []instanceapi.SchemaRequest{{Name: "public", Ensure: instanceapi.EnsureAbsent}},
			want:       []string{`DROP EXTENSION "hstore"`, `DROP SCHEMA "public"`}},
		{name: "a schema that still holds an extension is refused",
			schemas: []instanceapi.SchemaRequest{{Name: "public", Ensure: instanceapi.EnsureAbsent}},
			refusal: "schema public holds 1 objects"},
		{name: "a schema that holds objects is refused, with how many",
			schemas: []instanceapi.SchemaRequest{{Name: "full", Ensure: instanceapi.EnsureAbsent}},
			refusal: "schema full holds 3 objects"},
		{name: "absent things that do not exist",
			extensions: []instanceapi.ExtensionRequest{{Name: "citext", Ensure: instanceapi.EnsureAbsent}},
			schemas:    []instanceapi.SchemaRequest{{Name: "gone", Ensure: instanceapi.EnsureAbsent}}},
		{name: "an extension without a schema runs under the default search_path",
			extensions: []instanceapi.ExtensionRequest{{Name: "citext"}}, want: []string{`CREATE EXTENSION "citext"`}},
		// An untrusted extension's script runs as the superuser.
		{name: "an untrusted extension is refused",
			extensions: []instanceapi.ExtensionRequest{{Name: "file_fdw"}},
			refusal:    "extension file_fdw version 1.0 is not trusted by PostgreSQL"},
		{name: "an untrusted extension the cluster allows",
			extensions: []instanceapi.ExtensionRequest{{Name: "file_fdw"}}, allowUntrusted: true,
			want: []string{`CREATE EXTENSION "file_fdw"`}},
		{name: "an update to an untrusted version is refused",
			extensions: []instanceapi.ExtensionRequest{{Name: "hstore", Version: "1.9"}},
			refusal:    "extension hstore version 1.9 is not trusted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := instanceapi.DatabaseRequest{Name: "shop", Extensions: tt.extensions, Schemas: tt.schemas, AllowUntrustedExtensions: tt.allowUntrusted}
			steps, err := planInDatabase(req, inside)
			checkPlan(t, steps, err, tt.want, tt.refusal)
			for _, s := range steps {
				want := strings.HasPrefix(s.sql, "CREATE EXTENSION") && !strings.Contains(s.sql, "WITH SCHEMA")
				if s.defaultSearchPath != want {
					t.Errorf("%q: defaultSearchPath %v", s.sql, s.defaultSearchPath)
				}
			}
		})
	}
}

func TestDatabaseErrorStatus(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{refuse("no"), http.StatusUnprocessableEntity},
		{fmt.Errorf("while: %w", refuse("no")), http.StatusUnprocessableEntity},
		{fmt.Errorf("%w: a replica", ErrNotWritable), http.StatusConflict},
		{fmt.Errorf("%w (phase Starting)", ErrPostgresDown), http.StatusServiceUnavailable},
		{classifyPostgresError(&pgconn.PgError{Code: "25006"}), http.StatusConflict},
		{classifyPostgresError(&pgconn.PgError{Code: "57P01"}), http.StatusServiceUnavailable},
		{classifyPostgresError(fmt.Errorf("while: %w", &pgconn.PgError{Code: "55006"})), http.StatusUnprocessableEntity},
		{classifyPostgresError(&pgconn.PgError{Code: "2BP01"}), http.StatusUnprocessableEntity},
		{classifyPostgresError(&pgconn.PgError{Code: "XX000"}), http.StatusInternalServerError},
		{errors.New("boom"), http.StatusInternalServerError},
	}
	for _, tt := range tests {
		if got := httpStatus(tt.err); got != tt.want {
			t.Errorf("%v: status %d, want %d", tt.err, got, tt.want)
		}
	}
}

// TestExtensionsStayOutOfPostgresSchemas: an extension's objects put in
// pg_catalog or information_schema would shadow PostgreSQL's own for every
// role; the request is refused whatever the API let through.
func TestExtensionsStayOutOfPostgresSchemas(t *testing.T) {
	for _, schema := range []string{"pg_catalog", "pg_toast", "information_schema"} {
		req := instanceapi.DatabaseRequest{Name: "shop", Extensions: []instanceapi.ExtensionRequest{{Name: "citext", Schema: schema}}}
		if err := validateDatabaseRequest(req); err == nil || !strings.Contains(err.Error(), "which is PostgreSQL's own") {
			t.Errorf("extension in %s: %v, want it refused", schema, err)
		}
	}
	ok := instanceapi.DatabaseRequest{Name: "shop", Extensions: []instanceapi.ExtensionRequest{{Name: "citext", Schema: "ext"}}}
	if err := validateDatabaseRequest(ok); err != nil {
		t.Errorf("extension in schema ext: %v", err)
	}
}
