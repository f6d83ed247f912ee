package sqlobjects

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"tusk.dev/tusk/internal/instanceapi"
)

// defaultAttrs are a role's attributes as CREATE ROLE leaves them.
var defaultAttrs = roleAttrs{inherit: true, connLimit: -1}

func TestPlanRole(t *testing.T) {
	until := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	existing := observedRole{exists: true, attrs: defaultAttrs}
	cases := []struct {
		name     string
		req      instanceapi.RoleRequest
		obs      observedRole
		want     []string // the statements' SQL
		refusal  string   // part of the refusal's reason
		verifier string
	}{
		{
			name: "create with everything",
			req: instanceapi.RoleRequest{Name: "app", Login: true, ConnectionLimit: ptr.To[int32](5), ValidUntil: "2030-01-02T03:04:05Z",
				InRoles: []string{"readers", "pg_monitor"}, Parameters: map[string]string{"work_mem": "64MB"}, Password: ptr.To("secret")},
			verifier: "SCRAM-SHA-256$4096:c2FsdA==$a:b",
			want: []string{
				`CREATE ROLE "app" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT CONNECTION LIMIT 5 VALID UNTIL '2030-01-02T03:04:05Z'`,
				`ALTER ROLE "app" PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$a:b'`,
				`GRANT "pg_monitor" TO "app"`,
				`GRANT "readers" TO "app"`,
				`ALTER ROLE "app" SET "work_mem" = '64MB'`,
			},
		},
		{name: "unchanged", req: instanceapi.RoleRequest{Name: "app"}, obs: existing},
		{
			name: "every attribute changed",
			req: instanceapi.RoleRequest{Name: "app", Login: true, Superuser: true, CreateDB: true, CreateRole: true,
				Replication: true, BypassRLS: true, Inherit: ptr.To(false), ConnectionLimit: ptr.To[int32](10), ValidUntil: "2030-01-02T03:04:05Z"},
			obs: existing,
			want: []string{
				`ALTER ROLE "app" WITH LOGIN`, `ALTER ROLE "app" WITH SUPERUSER`, `ALTER ROLE "app" WITH CREATEDB`,
				`ALTER ROLE "app" WITH CREATEROLE`, `ALTER ROLE "app" WITH REPLICATION`, `ALTER ROLE "app" WITH BYPASSRLS`,
				`ALTER ROLE "app" WITH NOINHERIT`, `ALTER ROLE "app" WITH CONNECTION LIMIT 10`,
				`ALTER ROLE "app" WITH VALID UNTIL '2030-01-02T03:04:05Z'`,
			},
		},
		{
			name: "back to the defaults",
			req:  instanceapi.RoleRequest{Name: "app"},
			obs: observedRole{exists: true, attrs: roleAttrs{login: true, superuser: true, createDB: true, createRole: true,
				replication: true, bypassRLS: true, connLimit: 3, validUntil: &until}},
			want: []string{
				`ALTER ROLE "app" WITH NOLOGIN`, `ALTER ROLE "app" WITH NOSUPERUSER`, `ALTER ROLE "app" WITH NOCREATEDB`,
				`ALTER ROLE "app" WITH NOCREATEROLE`, `ALTER ROLE "app" WITH NOREPLICATION`, `ALTER ROLE "app" WITH NOBYPASSRLS`,
				`ALTER ROLE "app" WITH INHERIT`, `ALTER ROLE "app" WITH CONNECTION LIMIT -1`,
				`ALTER ROLE "app" WITH VALID UNTIL 'infinity'`,
			},
		},
		{
			name: "valid until the same instant in another zone",
			req:  instanceapi.RoleRequest{Name: "app", ValidUntil: "2030-01-02T05:04:05+02:00"},
			obs:  observedRole{exists: true, attrs: roleAttrs{inherit: true, connLimit: -1, validUntil: &until}},
		},
		{
			name: "memberships granted and revoked",
			req:  instanceapi.RoleRequest{Name: "app", InRoles: []string{"b", "c"}},
			obs:  observedRole{exists: true, attrs: defaultAttrs, inRoles: []string{"a", "b"}},
			want: []string{`GRANT "c" TO "app"`, `REVOKE "a" FROM "app"`},
		},
		{
			name:    "membership in a role that does not exist",
			req:     instanceapi.RoleRequest{Name: "app", InRoles: []string{"ghost"}},
			obs:     observedRole{exists: true, attrs: defaultAttrs, missing: []string{"ghost"}},
			refusal: "do not exist: ghost",
		},
		{
			name: "parameters set, changed and reset",
			req:  instanceapi.RoleRequest{Name: "app", Parameters: map[string]string{"work_mem": "64MB", "statement_timeout": "5s", "search_path": `"$user", public`}},
			obs: observedRole{exists: true, attrs: defaultAttrs,
				settings: []string{"work_mem=32MB", `search_path="$user", public`, "lock_timeout=1s"}},
			want: []string{`ALTER ROLE "app" SET "statement_timeout" = '5s'`, `ALTER ROLE "app" SET "work_mem" = '64MB'`,
				`ALTER ROLE "app" RESET "lock_timeout"`},
		},
		{
			name: "a list parameter's items each a literal",
			req:  instanceapi.RoleRequest{Name: "app", Parameters: map[string]string{"search_path": `app, "My Schema"`}},
			obs:  existing,
			want: []string{`ALTER ROLE "app" SET "search_path" = 'app', 'My Schema'`},
		},
		{
			name: "password verified",
			req:  instanceapi.RoleRequest{Name: "app", Password: ptr.To("secret")},
			obs:  observedRole{exists: true, attrs: defaultAttrs, passwordMatches: true},
		},
		{
			name:     "password changed",
			req:      instanceapi.RoleRequest{Name: "app", Password: ptr.To("secret")},
			obs:      existing,
			verifier: "SCRAM-SHA-256$4096:c2FsdA==$a:b",
			want:     []string{`ALTER ROLE "app" PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$a:b'`},
		},
		{name: "absent and not there", req: instanceapi.RoleRequest{Name: "app", Ensure: instanceapi.EnsureAbsent}},
		{
			name: "absent, owning nothing",
			req:  instanceapi.RoleRequest{Name: "app", Ensure: instanceapi.EnsureAbsent},
			obs:  existing,
			want: []string{`DROP ROLE "app"`},
		},
		{
			name:    "absent, owning objects, no reassignment",
			req:     instanceapi.RoleRequest{Name: "app", Ensure: instanceapi.EnsureAbsent},
			obs:     observedRole{exists: true, owns: []string{"database shop", "2 objects in database shop"}},
			refusal: "owns or has privileges on database shop, 2 objects in database shop",
		},
		{
			name: "absent, owning objects, reassigned",
			req:  instanceapi.RoleRequest{Name: "app", Ensure: instanceapi.EnsureAbsent, ReassignOwnedTo: "heir"},
			obs:  observedRole{exists: true, owns: []string{"2 objects in database shop"}, databases: []string{"postgres", "shop"}},
			want: []string{`REASSIGN OWNED BY "app" TO "heir"`, `DROP OWNED BY "app"`,
				`REASSIGN OWNED BY "app" TO "heir"`, `DROP OWNED BY "app"`, `DROP ROLE "app"`},
		},
		{
			name:    "absent, reassigned to a role that does not exist",
			req:     instanceapi.RoleRequest{Name: "app", Ensure: instanceapi.EnsureAbsent, ReassignOwnedTo: "heir"},
			obs:     observedRole{exists: true, owns: []string{"database shop"}, missing: []string{"heir"}},
			refusal: "no such role",
		},
		{name: "reserved", req: instanceapi.RoleRequest{Name: "tusk_replication"}, refusal: "reserved"},
		{name: "postgres", req: instanceapi.RoleRequest{Name: "postgres", Ensure: instanceapi.EnsureAbsent}, refusal: "reserved"},
		{name: "predefined", req: instanceapi.RoleRequest{Name: "pg_monitor"}, refusal: "reserved"},
		{name: "the operator's certificate name", req: instanceapi.RoleRequest{Name: "tusk-operator"}, refusal: "reserved"},
		{name: "a name of Tusk's", req: instanceapi.RoleRequest{Name: "tusk_anything"}, refusal: "reserved"},
		{name: "the cluster's owner", req: instanceapi.RoleRequest{Name: "owner"}, refusal: "cluster's Secret"},
		{name: "no name", req: instanceapi.RoleRequest{}, refusal: "needs a name"},
		{name: "reassigned to itself", req: instanceapi.RoleRequest{Name: "app", Ensure: instanceapi.EnsureAbsent, ReassignOwnedTo: "app"}, refusal: "itself"},
		{name: "reassigned to postgres", req: instanceapi.RoleRequest{Name: "app", Ensure: instanceapi.EnsureAbsent, ReassignOwnedTo: "postgres"}, refusal: "reserved"},
		{name: "member of a role of Tusk's", req: instanceapi.RoleRequest{Name: "app", InRoles: []string{"tusk_replication"}}, refusal: "reserved to Tusk"},
		{name: "member of itself", req: instanceapi.RoleRequest{Name: "app", InRoles: []string{"app"}}, refusal: "itself"},
		{name: "bad valid until", req: instanceapi.RoleRequest{Name: "app", ValidUntil: "tomorrow"}, refusal: "RFC 3339"},
		{name: "bad parameter", req: instanceapi.RoleRequest{Name: "app", Parameters: map[string]string{"work_mem; DROP": "1"}}, refusal: "parameter"},
		{name: "bad ensure", req: instanceapi.RoleRequest{Name: "app", Ensure: "maybe"}, refusal: "ensure"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan, err := planRole(c.req, "owner", c.obs, c.verifier)
			if c.refusal != "" {
				if httpStatus(err) != http.StatusUnprocessableEntity || !strings.Contains(err.Error(), c.refusal) {
					t.Fatalf("want a refusal with %q, got %v (plan %v)", c.refusal, err, plan)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range plan {
				got = append(got, s.sql)
				if s.change == "" || strings.Contains(s.change, "secret") || strings.Contains(s.change, "SCRAM") {
					t.Errorf("statement %q has change %q", s.sql, s.change)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}

// TestPlanRoleCertificateLogin: CertificateLogin is membership in the
// certificate login group and nothing else: granted (with the group made
// first where an older manager left none), revoked, left alone when it
// matches; InRoles stays exact for the other roles and never touches it.
func TestPlanRoleCertificateLogin(t *testing.T) {
	const group = instanceapi.CertificateLoginRole
	cases := []struct {
		name    string
		req     instanceapi.RoleRequest
		obs     observedRole
		want    []string // the statements' SQL
		changes []string
	}{
		{
			name:    "added",
			req:     instanceapi.RoleRequest{Name: "app", CertificateLogin: true},
			obs:     observedRole{exists: true, attrs: defaultAttrs, certificateGroupExists: true},
			want:    []string{`GRANT "tusk_cert_login" TO "app"`},
			changes: []string{"granted certificate login"},
		},
		{
			name:    "added to a new role",
			req:     instanceapi.RoleRequest{Name: "app", Login: true, CertificateLogin: true},
			obs:     observedRole{certificateGroupExists: true},
			want:    []string{`CREATE ROLE "app" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT CONNECTION LIMIT -1 VALID UNTIL 'infinity'`, `GRANT "tusk_cert_login" TO "app"`},
			changes: []string{"created role app", "granted certificate login"},
		},
		{
			name:    "added, the group missing",
			req:     instanceapi.RoleRequest{Name: "app", CertificateLogin: true},
			obs:     observedRole{exists: true, attrs: defaultAttrs},
			want:    []string{CreateCertificateLoginGroup, `GRANT "tusk_cert_login" TO "app"`},
			changes: []string{"created role tusk_cert_login", "granted certificate login"},
		},
		{
			name:    "removed",
			req:     instanceapi.RoleRequest{Name: "app", InRoles: []string{"readers"}},
			obs:     observedRole{exists: true, attrs: defaultAttrs, inRoles: []string{"readers", group}},
			want:    []string{`REVOKE "tusk_cert_login" FROM "app"`},
			changes: []string{"revoked certificate login"},
		},
		{
			name: "unchanged",
			req:  instanceapi.RoleRequest{Name: "app", InRoles: []string{"readers"}, CertificateLogin: true},
			obs:  observedRole{exists: true, attrs: defaultAttrs, inRoles: []string{group, "readers"}, certificateGroupExists: true},
		},
		{name: "unchanged without", req: instanceapi.RoleRequest{Name: "app"}, obs: observedRole{exists: true, attrs: defaultAttrs}},
		{
			name:    "InRoles still exact beside it",
			req:     instanceapi.RoleRequest{Name: "app", InRoles: []string{"b", "c"}, CertificateLogin: true},
			obs:     observedRole{exists: true, attrs: defaultAttrs, inRoles: []string{"a", "b", group}, certificateGroupExists: true},
			want:    []string{`GRANT "c" TO "app"`, `REVOKE "a" FROM "app"`},
			changes: []string{"granted membership in c", "revoked membership in a"},
		},
		{
			name:    "InRoles exact, certificate login revoked once",
			req:     instanceapi.RoleRequest{Name: "app", InRoles: []string{"b"}},
			obs:     observedRole{exists: true, attrs: defaultAttrs, inRoles: []string{"a", "b", group}, certificateGroupExists: true},
			want:    []string{`REVOKE "a" FROM "app"`, `REVOKE "tusk_cert_login" FROM "app"`},
			changes: []string{"revoked membership in a", "revoked certificate login"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan, err := planRole(c.req, "owner", c.obs, "")
			if err != nil {
				t.Fatal(err)
			}
			var got, changes []string
			for _, s := range plan {
				got, changes = append(got, s.sql), append(changes, s.change)
			}
			if !slices.Equal(got, c.want) || !slices.Equal(changes, c.changes) {
				t.Errorf("got\n  %s\n  changes %q\nwant\n  %s\n  changes %q", strings.Join(got, "\n  "), changes, strings.Join(c.want, "\n  "), c.changes)
			}
		})
	}
	// The group is Tusk's: not one of InRoles, nor a role to manage.
	for _, req := range []instanceapi.RoleRequest{{Name: "app", InRoles: []string{group}}, {Name: group}} {
		if _, err := planRole(req, "owner", observedRole{}, ""); httpStatus(err) != http.StatusUnprocessableEntity {
			t.Errorf("%+v: %v, want a refusal", req, err)
		}
	}
}

func TestPlanDropReassignsInEveryDatabase(t *testing.T) {
	req := instanceapi.RoleRequest{Name: "app", Ensure: instanceapi.EnsureAbsent, ReassignOwnedTo: "heir"}
	obs := observedRole{exists: true, owns: []string{"database shop"}, databases: []string{"app", "postgres", "shop"}}
	plan, err := planRole(req, "owner", obs, "")
	if err != nil {
		t.Fatal(err)
	}
	var where []string
	for _, s := range plan {
		where = append(where, s.database)
	}
	// The postgres database's statements and the drop run in the apply's
	// own transaction ("").
	if want := []string{"app", "app", "", "", "shop", "shop", ""}; !slices.Equal(where, want) {
		t.Errorf("databases %q, want %q", where, want)
	}
}

func TestSplitSettingList(t *testing.T) {
	for in, want := range map[string][]string{
		`"$user", public`:   {"$user", "public"},
		`Public,app`:        {"public", "app"},
		`"My ""Schema"""`:   {`My "Schema"`},
		`  a ,  "b c"  , d`: {"a", "b c", "d"},
		`""`:                {""},
	} {
		if got := splitSettingList(in); !slices.Equal(got, want) {
			t.Errorf("splitSettingList(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestVerifies(t *testing.T) {
	v, err := ScramVerifier("right")
	if err != nil {
		t.Fatal(err)
	}
	if !verifies(&v, "right") || verifies(&v, "wrong") {
		t.Error("the verifier does not verify its password alone")
	}
	md5 := "md5" + strings.Repeat("0", 32)
	if verifies(nil, "right") || verifies(&md5, "right") {
		t.Error("no password or an MD5 hash verifies a password")
	}
}
