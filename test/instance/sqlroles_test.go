//go:build integration

package instance

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"k8s.io/utils/ptr"

	"tusk.dev/tusk/internal/instanceapi"
)

// roleRow is what the catalogs say of a role, for comparing with a request.
type roleRow struct {
	Login, Superuser, CreateDB, CreateRole, Replication, BypassRLS, Inherit bool
	ConnLimit                                                               int32
	ValidUntil                                                              string // 'infinity' or RFC 3339 in UTC
	InRoles, Settings                                                       []string
}

// readRole reads role from n's catalogs; nil when it does not exist.
func readRole(t *testing.T, n *node, role string) *roleRow {
	t.Helper()
	var r *roleRow
	n.withConn("postgres", superuserPassword, "postgres", func(conn *pgx.Conn) error {
		ctx := context.Background()
		row := roleRow{}
		err := conn.QueryRow(ctx, `SELECT rolcanlogin, rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls,
			rolinherit, rolconnlimit,
			coalesce(to_char(rolvaliduntil AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), 'infinity'),
			array(SELECT g.rolname::text FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid WHERE m.member = r.oid ORDER BY 1),
			coalesce((SELECT setconfig FROM pg_db_role_setting WHERE setrole = r.oid AND setdatabase = 0), '{}')
			FROM pg_roles r WHERE rolname = $1`, role).
			Scan(&row.Login, &row.Superuser, &row.CreateDB, &row.CreateRole, &row.Replication, &row.BypassRLS,
				&row.Inherit, &row.ConnLimit, &row.ValidUntil, &row.InRoles, &row.Settings)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		slices.Sort(row.Settings)
		r = &row
		return err
	})
	return r
}

// applyRole PUTs req and returns the result, failing the test on an error.
func applyRole(t *testing.T, n *node, req instanceapi.RoleRequest) instanceapi.ApplyResult {
	t.Helper()
	var res instanceapi.ApplyResult
	n.command(http.MethodPut, instanceapi.PathSQLRoles, req, &res)
	return res
}

// applyRoleStatus PUTs req and returns the HTTP status and error message.
func applyRoleStatus(t *testing.T, n *node, req instanceapi.RoleRequest) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var reply map[string]any
	code, _ := n.call(ctx, http.MethodPut, instanceapi.PathSQLRoles, req, &reply)
	msg, _ := reply["error"].(string)
	return code, msg
}

func assertRole(t *testing.T, n *node, role string, want roleRow) {
	t.Helper()
	got := readRole(t, n, role)
	if got == nil {
		t.Fatalf("role %s does not exist", role)
	}
	if want.InRoles == nil {
		want.InRoles = []string{}
	}
	if want.Settings == nil {
		want.Settings = []string{}
	}
	if !slices.Equal(got.InRoles, want.InRoles) || !slices.Equal(got.Settings, want.Settings) {
		t.Errorf("role %s: memberships %q settings %q, want %q and %q", role, got.InRoles, got.Settings, want.InRoles, want.Settings)
	}
	got.InRoles, got.Settings, want.InRoles, want.Settings = nil, nil, nil, nil
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("role %s is\n  %+v\nwant\n  %+v", role, *got, want)
	}
}

// assertLogin says whether the managed role reporter logs in with password.
func assertLogin(t *testing.T, n *node, password string, works bool) {
	t.Helper()
	const role = "reporter"
	conn, err := n.tryConnect(context.Background(), role, password, "postgres")
	if err == nil {
		_ = conn.Close(context.Background())
	}
	if works && err != nil {
		t.Errorf("%s cannot log in: %v", role, err)
	}
	if !works && err == nil {
		t.Errorf("%s logs in with a password it should not have", role)
	}
}

// TestManagedRoleLifecycle applies a role's every field, applies it again
// (no statement), puts back what was changed by hand, changes and removes
// fields, rotates the password without a restart, and drops the role; with
// every statement logged, no password nor verifier shows in the logs.
func TestManagedRoleLifecycle(t *testing.T) {
	// The role takes every attribute, SUPERUSER and CREATEROLE among them:
	// only a cluster with superuser access allows them to a role that logs in.
	logEverything := &instanceapi.Config{Parameters: map[string]string{"log_statement": "all"}, SuperuserRemoteAccess: true}
	n := startNode(t, "roles-1", nodeOptions{role: instanceapi.RolePrimary, config: logEverything})
	n.waitReady(instanceapi.RolePrimary)
	const firstPassword, secondPassword = "first pass'word", "second-pass"

	applyRole(t, n, instanceapi.RoleRequest{Name: "readers"})
	full := instanceapi.RoleRequest{Name: "reporter", Login: true, CreateDB: true, CreateRole: true, Replication: true,
		BypassRLS: true, Inherit: ptr.To(false), ConnectionLimit: ptr.To[int32](5), ValidUntil: "2040-06-01T12:00:00+02:00",
		InRoles: []string{"readers", "pg_monitor"}, Password: ptr.To(firstPassword),
		Parameters: map[string]string{"work_mem": "64MB", "search_path": `"$user", public`}}
	fullRow := roleRow{Login: true, CreateDB: true, CreateRole: true, Replication: true, BypassRLS: true, ConnLimit: 5,
		ValidUntil: "2040-06-01T10:00:00Z", InRoles: []string{"pg_monitor", "readers"},
		Settings: []string{`search_path="$user", public`, "work_mem=64MB"}}
	if res := applyRole(t, n, full); res.Statements != 6 || !res.Exists {
		t.Errorf("creating the role: %+v, want 6 statements", res)
	}
	assertRole(t, n, "reporter", fullRow)
	assertLogin(t, n, firstPassword, true)
	if res := applyRole(t, n, full); res.Statements != 0 {
		t.Errorf("the same request again changed %+v", res)
	}

	// Drift: changed by hand, put back.
	n.exec(`ALTER ROLE reporter NOLOGIN CONNECTION LIMIT 1 VALID UNTIL '2050-01-01'; ALTER ROLE reporter SET work_mem = '1MB';
		ALTER ROLE reporter SET lock_timeout = '1s'; REVOKE readers FROM reporter; GRANT pg_read_all_data TO reporter`)
	res := applyRole(t, n, full)
	if res.Statements != 7 {
		t.Errorf("putting back the role: %+v, want 7 statements", res)
	}
	assertRole(t, n, "reporter", fullRow)
	if res := applyRole(t, n, full); res.Statements != 0 {
		t.Errorf("the same request after the drift changed %+v", res)
	}

	// Fields changed and removed.
	applyRole(t, n, instanceapi.RoleRequest{Name: "reporter", Login: true, Superuser: true, Parameters: map[string]string{"work_mem": "8MB"}})
	assertRole(t, n, "reporter", roleRow{Login: true, Superuser: true, Inherit: true, ConnLimit: -1, ValidUntil: "infinity",
		Settings: []string{"work_mem=8MB"}})
	assertLogin(t, n, firstPassword, true)

	// Rotation: the new password works at once, the old one no longer.
	pid := n.postmasterPid()
	res = applyRole(t, n, instanceapi.RoleRequest{Name: "reporter", Login: true, Password: ptr.To(secondPassword)})
	if !slices.Contains(res.Changes, "set the password") {
		t.Errorf("rotating the password: %+v", res)
	}
	assertLogin(t, n, secondPassword, true)
	assertLogin(t, n, firstPassword, false)
	if n.postmasterPid() != pid {
		t.Error("postgres restarted for a password change")
	}

	absent := instanceapi.RoleRequest{Name: "reporter", Ensure: instanceapi.EnsureAbsent}
	if res := applyRole(t, n, absent); res.Statements != 1 || res.Exists {
		t.Errorf("dropping the role: %+v", res)
	}
	if readRole(t, n, "reporter") != nil {
		t.Error("the role is still there")
	}
	if res := applyRole(t, n, absent); res.Statements != 0 {
		t.Errorf("dropping a role not there: %+v", res)
	}

	logs := n.logs()
	if !strings.Contains(logs, "REVOKE readers FROM reporter") {
		t.Error("the statements run by hand are not in the logs: the check below proves nothing")
	}
	for _, secret := range []string{firstPassword, secondPassword, "first pass''word", "SCRAM-SHA-256$"} {
		if strings.Contains(logs, secret) {
			t.Errorf("the logs hold %q:\n%s", secret, grepLines(logs, secret))
		}
	}
	if !strings.Contains(logs, "Creating role") || !strings.Contains(logs, "Altering role") {
		t.Error("the manager did not log the role's changes")
	}
}

// TestManagedRoleRefusedAndDropped: a replica answers 409; reserved roles,
// the cluster's owner and a membership in a role that does not exist are
// refused with 422; a role owning a table in another database is refused
// with what it owns, then dropped once its objects are reassigned.
func TestManagedRoleRefusedAndDropped(t *testing.T) {
	primary := startNode(t, "roles-2", nodeOptions{role: instanceapi.RolePrimary})
	primary.waitReady(instanceapi.RolePrimary)
	replica := startNode(t, "roles-3", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: primary.port})
	replica.waitReady(instanceapi.RoleReplica)

	if code, msg := applyRoleStatus(t, replica, instanceapi.RoleRequest{Name: "reporter"}); code != http.StatusConflict {
		t.Errorf("a replica answered %d %q, want 409", code, msg)
	}
	for _, req := range []instanceapi.RoleRequest{
		{Name: "postgres", Ensure: instanceapi.EnsureAbsent}, {Name: "tusk_replication"}, {Name: "pg_monitor"},
		{Name: "app", Password: ptr.To("x")}, {Name: "reporter", InRoles: []string{"ghost"}},
	} {
		if code, msg := applyRoleStatus(t, primary, req); code != http.StatusUnprocessableEntity || msg == "" {
			t.Errorf("%+v answered %d %q, want 422", req, code, msg)
		}
	}
	// PostgreSQL refuses the parameter after CREATE ROLE: all or nothing.
	unknown := instanceapi.RoleRequest{Name: "reporter", Login: true, Parameters: map[string]string{"no_such_setting": "1"}}
	if code, msg := applyRoleStatus(t, primary, unknown); code != http.StatusUnprocessableEntity || !strings.Contains(msg, "no_such_setting") {
		t.Errorf("an unknown parameter answered %d %q, want 422", code, msg)
	}
	if readRole(t, primary, "reporter") != nil {
		t.Error("a refused request created the role")
	}

	applyRole(t, primary, instanceapi.RoleRequest{Name: "heir"})
	applyRole(t, primary, instanceapi.RoleRequest{Name: "reporter", Login: true})
	primary.exec("CREATE DATABASE shop")
	primary.withConn("postgres", superuserPassword, "shop", func(conn *pgx.Conn) error {
		_, err := conn.Exec(context.Background(), "CREATE TABLE orders (id int); ALTER TABLE orders OWNER TO reporter")
		return err
	})
	absent := instanceapi.RoleRequest{Name: "reporter", Ensure: instanceapi.EnsureAbsent}
	code, msg := applyRoleStatus(t, primary, absent)
	if code != http.StatusUnprocessableEntity || !strings.Contains(msg, "objects in database shop") {
		t.Errorf("dropping a role owning a table answered %d %q, want 422 naming database shop", code, msg)
	}
	absent.ReassignOwnedTo = "heir"
	if res := applyRole(t, primary, absent); res.Exists || res.Statements == 0 {
		t.Errorf("dropping with reassignment: %+v", res)
	}
	primary.withConn("postgres", superuserPassword, "shop", func(conn *pgx.Conn) error {
		var owner string
		if err := conn.QueryRow(context.Background(), "SELECT tableowner FROM pg_tables WHERE tablename = 'orders'").Scan(&owner); err != nil {
			return err
		}
		if owner != "heir" {
			t.Errorf("the table's owner is %s, want heir", owner)
		}
		return nil
	})
	if readRole(t, primary, "reporter") != nil {
		t.Error("the role is still there")
	}
}
