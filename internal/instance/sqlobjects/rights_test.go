package sqlobjects

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"tusk.dev/tusk/internal/instanceapi"
)

// TestRefuseSuperuserRights: a role that logs in may reach no superuser
// right, by its attributes or through memberships at any depth, the
// catalog's and the request's; CREATEROLE counts below PostgreSQL 16; a
// group that nobody logs in as may hold them.
func TestRefuseSuperuserRights(t *testing.T) {
	catalog := func(major int) roleCatalog {
		return roleCatalog{major: major, roles: map[string]catalogRole{
			"postgres":                  {login: true, superuser: true, memberOf: []string{"staff"}},
			"dbas":                      {superuser: true},
			"runners":                   {memberOf: []string{"pg_execute_server_program"}},
			"ops":                       {memberOf: []string{"runners"}},
			"staff":                     {},
			"alice":                     {login: true, memberOf: []string{"staff"}},
			"bob":                       {login: true, memberOf: []string{"team"}},
			"team":                      {memberOf: []string{"staff"}},
			"pg_execute_server_program": {},
			"pg_read_server_files":      {},
			"pg_monitor":                {memberOf: []string{"pg_read_all_settings"}},
			"pg_read_all_settings":      {},
			"pg_signal_backend":         {},
			"pg_create_subscription":    {},
			"subscribers":               {memberOf: []string{"pg_create_subscription"}},
		}}
	}
	cases := []struct {
		name  string
		major int
		req   instanceapi.RoleRequest
		want  string // part of the refusal; "" means allowed
	}{
		{name: "an ordinary login", major: 15, req: instanceapi.RoleRequest{Name: "app", Login: true, InRoles: []string{"staff", "pg_monitor"}}},
		{name: "a superuser login", major: 15, req: instanceapi.RoleRequest{Name: "app", Login: true, Superuser: true},
			want: "role app would give superuser rights to roles that log in (app is a superuser): app logs in"},
		{name: "a superuser group nobody logs in as", major: 15, req: instanceapi.RoleRequest{Name: "admins", Superuser: true}},
		{name: "a member of a superuser group", major: 15, req: instanceapi.RoleRequest{Name: "mallory", Login: true, InRoles: []string{"dbas"}},
			want: "(mallory → dbas: dbas is a superuser): mallory logs in"},
		{name: "a chain to pg_execute_server_program", major: 17, req: instanceapi.RoleRequest{Name: "mallory", Login: true, InRoles: []string{"ops"}},
			want: "mallory → ops → runners → pg_execute_server_program: pg_execute_server_program runs programs on the server as its OS user"},
		{name: "pg_read_server_files directly", major: 17, req: instanceapi.RoleRequest{Name: "mallory", Login: true, InRoles: []string{"pg_read_server_files"}},
			want: "reads any file the server can"},
		{name: "a group made superuser under its login members", major: 15, req: instanceapi.RoleRequest{Name: "staff", Superuser: true},
			want: "(staff is a superuser): alice, bob log in"},
		{name: "a group given a dangerous membership", major: 15, req: instanceapi.RoleRequest{Name: "team", InRoles: []string{"ops"}},
			want: "(team → ops → runners → pg_execute_server_program: pg_execute_server_program runs programs on the server as its OS user): bob logs in"},
		{name: "CREATEROLE on 15", major: 15, req: instanceapi.RoleRequest{Name: "mallory", Login: true, CreateRole: true},
			want: "mallory has CREATEROLE, which on PostgreSQL 15 grants itself any role but a superuser"},
		{name: "pg_create_subscription", major: 16, req: instanceapi.RoleRequest{Name: "mallory", Login: true, InRoles: []string{"pg_create_subscription"}},
			want: "role mallory would give the rights of pg_create_subscription to roles that log in (mallory → pg_create_subscription: pg_create_subscription creates subscriptions"},
		// A logical import's user needs it on the source (docs/upgrades.md).
		{name: "pg_signal_backend", major: 15, req: instanceapi.RoleRequest{Name: "migrator", Login: true, InRoles: []string{"pg_signal_backend"}}},
		{name: "pg_create_subscription through a group", major: 16, req: instanceapi.RoleRequest{Name: "mallory", Login: true, InRoles: []string{"subscribers"}},
			want: "creates subscriptions, which connect from the server to any address"},
		{name: "CREATEROLE on 16", major: 16, req: instanceapi.RoleRequest{Name: "mallory", Login: true, CreateRole: true}},
		{name: "a membership the request revokes", major: 15, req: instanceapi.RoleRequest{Name: "alice", Login: true}},
		{name: "a login taken away", major: 15, req: instanceapi.RoleRequest{Name: "mallory", InRoles: []string{"dbas"}}},
		{name: "dropped", major: 15, req: instanceapi.RoleRequest{Name: "mallory", Login: true, Superuser: true, Ensure: instanceapi.EnsureAbsent}},
	}
	for _, tc := range cases {
		err := refuseSuperuserRights(catalog(tc.major), tc.req)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v; want %q", tc.name, err, tc.want)
		}
		if err != nil && (!IsRefusal(err) || !strings.Contains(err.Error(), "spec.superuserAccess is false")) {
			t.Errorf("%s: %v is not a refusal that names spec.superuserAccess", tc.name, err)
		}
	}
}

// TestRefuseSuperuserRightsAfterTheRequest: the check reads the catalog
// as the request leaves it, so a role that already reaches superuser
// rights is refused only while the request keeps them.
func TestRefuseSuperuserRightsAfterTheRequest(t *testing.T) {
	c := roleCatalog{major: 15, roles: map[string]catalogRole{
		"dbas":    {superuser: true},
		"mallory": {login: true, memberOf: []string{"dbas"}},
	}}
	if err := refuseSuperuserRights(c, instanceapi.RoleRequest{Name: "mallory", Login: true}); err != nil {
		t.Errorf("revoking the membership: %v", err)
	}
	if err := refuseSuperuserRights(c, instanceapi.RoleRequest{Name: "mallory", Login: true, InRoles: []string{"dbas"}}); err == nil {
		t.Error("keeping the membership was allowed")
	}
}

// TestServerReachingRolesAreTheServerFileRoles: the check and the import
// (instanceapi.ServerFileRoles) keep the same roles away.
func TestServerReachingRolesAreTheServerFileRoles(t *testing.T) {
	keys := slices.Sorted(maps.Keys(serverReachingRoles))
	if want := slices.Sorted(slices.Values(instanceapi.ServerFileRoles)); !slices.Equal(keys, want) {
		t.Errorf("serverReachingRoles %v, instanceapi.ServerFileRoles %v", keys, want)
	}
}
