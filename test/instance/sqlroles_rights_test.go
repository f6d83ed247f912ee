//go:build integration

package instance

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"k8s.io/utils/ptr"

	"tusk.dev/tusk/internal/instanceapi"
)

// runProgram proves a role runs programs on the server as its OS user, as
// a superuser does (and so reads the pod's keys): the escalations below
// end with it.
const runProgram = "COPY (SELECT 1) TO PROGRAM 'cat >/dev/null'"

// escalate logs in as role and runs steps, each in its own statement.
func escalate(n *node, role, password string, steps ...string) error {
	ctx := context.Background()
	conn, err := n.tryConnect(ctx, role, password, "app")
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	for _, s := range steps {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

func serverMajor(t *testing.T, n *node) int {
	t.Helper()
	var major int
	n.withConn("postgres", superuserPassword, "postgres", func(conn *pgx.Conn) error {
		return conn.QueryRow(context.Background(), "SELECT current_setting('server_version_num')::int / 10000").Scan(&major)
	})
	return major
}

// TestSuperuserRightsStayOffLogins: with superuser access off (the
// default), the instance manager itself refuses, whoever sends the
// request, each way a role that logs in would reach superuser rights: a
// NOLOGIN superuser group and SET ROLE; pg_execute_server_program through
// a chain of two groups; CREATEROLE on PostgreSQL 15, which grants itself
// pg_execute_server_program; a group made superuser under a member that
// logs in. Groups nobody logs in as may hold the rights. Once the cluster
// opts in, the same requests apply and each escalation runs a program on
// the server: the attacks are real.
func TestSuperuserRightsStayOffLogins(t *testing.T) {
	n := startNode(t, "rights-1", nodeOptions{role: instanceapi.RolePrimary})
	n.waitReady(instanceapi.RolePrimary)
	const password = "mallory-pass"
	major := serverMajor(t, n)

	applyRole(t, n, instanceapi.RoleRequest{Name: "dbas", Superuser: true})
	applyRole(t, n, instanceapi.RoleRequest{Name: "runners", InRoles: []string{"pg_execute_server_program"}})
	applyRole(t, n, instanceapi.RoleRequest{Name: "ops", InRoles: []string{"runners"}})

	login := func(name string, inRoles ...string) instanceapi.RoleRequest {
		return instanceapi.RoleRequest{Name: name, Login: true, Password: ptr.To(password), InRoles: inRoles}
	}
	creator := login("mallory_cr")
	creator.CreateRole = true
	attacks := []struct {
		name    string
		req     instanceapi.RoleRequest
		steps   []string
		refusal string
	}{
		{"a superuser group and SET ROLE", login("mallory_su", "dbas"), []string{"SET ROLE dbas", runProgram},
			"(mallory_su → dbas: dbas is a superuser): mallory_su logs in"},
		{"pg_execute_server_program through two groups", login("mallory_exec", "ops"), []string{runProgram},
			"mallory_exec → ops → runners → pg_execute_server_program: pg_execute_server_program runs programs on the server"},
		{"CREATEROLE on 15", creator, []string{"GRANT pg_execute_server_program TO mallory_cr", runProgram},
			"mallory_cr has CREATEROLE, which on PostgreSQL 15 grants itself any role but a superuser"},
	}
	for _, a := range attacks {
		if a.req.CreateRole && major >= 16 {
			continue // CREATEROLE no longer grants itself any role
		}
		code, msg := applyRoleStatus(t, n, a.req)
		if code != http.StatusUnprocessableEntity || !strings.Contains(msg, a.refusal) || !strings.Contains(msg, "spec.superuserAccess is false") {
			t.Errorf("%s: HTTP %d %q; want 422 saying %q and naming spec.superuserAccess", a.name, code, msg, a.refusal)
			if code == http.StatusOK && escalate(n, a.req.Name, password, a.steps...) == nil {
				t.Errorf("%s: applied, and %s ran a program on the server as its OS user", a.name, a.req.Name)
			}
		}
		if code != http.StatusOK && readRole(t, n, a.req.Name) != nil {
			t.Errorf("%s: refused, yet role %s exists", a.name, a.req.Name)
		}
	}

	// The other way round: the group gains the rights under a member.
	applyRole(t, n, instanceapi.RoleRequest{Name: "staff"})
	applyRole(t, n, login("alice", "staff"))
	code, msg := applyRoleStatus(t, n, instanceapi.RoleRequest{Name: "staff", Superuser: true})
	if code != http.StatusUnprocessableEntity || !strings.Contains(msg, "(staff is a superuser): alice logs in") {
		t.Errorf("a group made superuser under a member that logs in: HTTP %d %q; want 422 naming alice", code, msg)
	}
	if r := readRole(t, n, "staff"); r == nil || r.Superuser {
		t.Errorf("staff is %+v; want it there and no superuser", r)
	}

	n.command(http.MethodPut, instanceapi.PathConfig, instanceapi.Config{SuperuserRemoteAccess: true}, nil)
	for _, a := range attacks {
		if a.req.CreateRole && major >= 16 {
			continue
		}
		applyRole(t, n, a.req)
		if err := escalate(n, a.req.Name, password, a.steps...); err != nil {
			t.Errorf("%s, with superuser access: %v; want the escalation to work, or the refusal above proves nothing", a.name, err)
		}
	}
}

// TestSuperuserSettingsStayOffLogins: with superuser access off, a role
// that logs in gets no setting only a superuser may set, which the
// manager would set for each of its sessions (session_replication_role =
// replica skips triggers and foreign keys). Once the cluster opts in, it
// applies and takes effect.
func TestSuperuserSettingsStayOffLogins(t *testing.T) {
	n := startNode(t, "guarded-1", nodeOptions{role: instanceapi.RolePrimary})
	n.waitReady(instanceapi.RolePrimary)
	const password = "mallory-pass"
	replica := instanceapi.RoleRequest{Name: "mallory_repl", Login: true, Password: ptr.To(password),
		Parameters: map[string]string{"session_replication_role": "replica", "work_mem": "8MB"}}
	code, msg := applyRoleStatus(t, n, replica)
	if want := "role mallory_repl would set session_replication_role, which only a superuser may set"; code != http.StatusUnprocessableEntity ||
		!strings.Contains(msg, want) || !strings.Contains(msg, "spec.superuserAccess is false") {
		t.Errorf("HTTP %d %q; want 422 saying %q", code, msg, want)
	}
	if readRole(t, n, replica.Name) != nil {
		t.Errorf("%s was refused, yet it exists", replica.Name)
	}

	n.command(http.MethodPut, instanceapi.PathConfig, instanceapi.Config{SuperuserRemoteAccess: true}, nil)
	applyRole(t, n, replica)
	var got string
	conn, err := n.tryConnect(context.Background(), "mallory_repl", password, "app")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if err := conn.QueryRow(context.Background(), "SHOW session_replication_role").Scan(&got); err != nil || got != "replica" {
		t.Errorf("with superuser access, a session of mallory_repl has session_replication_role %q (%v), want replica: the refusal above proves nothing", got, err)
	}
}
