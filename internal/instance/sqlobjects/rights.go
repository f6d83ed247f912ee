package sqlobjects

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
)

// A cluster whose spec.superuserAccess is false keeps superuser rights
// away from every role that logs in: a superuser reads and writes any
// file the server can (its private key, the pod's service-account token,
// the object store's keys) and runs programs as its OS user. Roles that
// log in may not have those rights by their attributes, nor through the
// roles they are members of at any depth: a membership is as good as the
// group's rights, since SET ROLE takes them whatever INHERIT says.

// serverReachingRoles are PostgreSQL's predefined roles whose members reach
// the server's files or programs as a superuser does, with what they do.
var serverReachingRoles = map[string]string{
	"pg_execute_server_program": "runs programs on the server as its OS user",
	"pg_read_server_files":      "reads any file the server can",
	"pg_write_server_files":     "writes any file the server can",
}

// guardedRoles are predefined roles that give no superuser rights but
// that a cluster without spec.superuserAccess keeps from roles that log in
// as well, with what they do. pg_signal_backend is not among them: a
// logical import's user needs it on the source to end its sessions at the
// cutover (docs/upgrades.md), and it reaches no superuser's session.
var guardedRoles = map[string]string{
	"pg_create_subscription": "creates subscriptions, which connect from the server to any address",
}

// catalogRole is a role as the rights check sees it.
type catalogRole struct {
	login, superuser, createRole bool
	// memberOf are the roles it is a member of, directly.
	memberOf []string
}

// roleCatalog is every role of the cluster with its direct memberships
// (pg_auth_members, whatever their options), and the server's major.
type roleCatalog struct {
	roles map[string]catalogRole
	major int
}

// refuseSuperuserRights refuses req when, once applied, a role that logs
// in would reach superuser rights through req's role: the role itself,
// or any of its members at any depth. A role that never logs in (a group)
// may hold them: nobody acts as it.
func refuseSuperuserRights(c roleCatalog, req instanceapi.RoleRequest) error {
	if req.Ensure == instanceapi.EnsureAbsent {
		return nil
	}
	after := c.withRequest(req)
	path, why := after.pathToSuperuserRights(req.Name)
	if path == nil {
		return nil
	}
	holders := after.loginHolders(req.Name)
	if len(holders) == 0 {
		return nil
	}
	reach := fmt.Sprintf("%s %s", path[0], why)
	if len(path) > 1 {
		reach = fmt.Sprintf("%s: %s %s", strings.Join(path, " → "), path[len(path)-1], why)
	}
	what := "superuser rights"
	if guardedRoles[path[len(path)-1]] != "" {
		what = "the rights of " + path[len(path)-1]
	}
	return refuse("role %s would give %s to roles that log in (%s): %s %s; "+
		"the cluster's spec.superuserAccess is false, which keeps superuser rights (the server's files and keys) "+
		"from every role that logs in: drop the attribute or the membership, make those roles NOLOGIN (login: false), "+
		"or set spec.superuserAccess to true", req.Name, what, reach, listNames(holders), logVerb(holders))
}

// withRequest is the catalog once req applies: its role with the
// requested attributes and exactly the requested memberships.
func (c roleCatalog) withRequest(req instanceapi.RoleRequest) roleCatalog {
	roles := make(map[string]catalogRole, len(c.roles)+1)
	for k, v := range c.roles {
		roles[k] = v
	}
	memberOf := slices.Clone(req.InRoles)
	if req.CertificateLogin {
		memberOf = append(memberOf, instanceapi.CertificateLoginRole)
	}
	roles[req.Name] = catalogRole{login: req.Login, superuser: req.Superuser, createRole: req.CreateRole, memberOf: memberOf}
	return roleCatalog{roles: roles, major: c.major}
}

// grantsSuperuserRights says what role name alone has of a superuser's
// rights, as a phrase ("is a superuser"); "" when nothing.
func (c roleCatalog) grantsSuperuserRights(name string) string {
	r := c.roles[name]
	switch {
	case r.superuser:
		return "is a superuser"
	case serverReachingRoles[name] != "":
		return serverReachingRoles[name]
	case guardedRoles[name] != "":
		return guardedRoles[name]
	case r.createRole && instanceapi.CreateRoleGrantsAnyRole(c.major):
		return fmt.Sprintf("has CREATEROLE, which on PostgreSQL %d grants itself any role but a superuser, pg_execute_server_program among them", c.major)
	}
	return ""
}

// pathToSuperuserRights is the shortest chain of memberships from name to
// a role with superuser rights (name first, that role last) and what the
// last one has; nil when there is none.
func (c roleCatalog) pathToSuperuserRights(name string) ([]string, string) {
	parent := map[string]string{name: ""}
	queue := []string{name}
	for len(queue) > 0 {
		r := queue[0]
		queue = queue[1:]
		if why := c.grantsSuperuserRights(r); why != "" {
			var path []string
			for at := r; at != ""; at = parent[at] {
				path = append(path, at)
			}
			slices.Reverse(path)
			return path, why
		}
		for _, g := range c.roles[r].memberOf {
			if _, seen := parent[g]; !seen {
				parent[g] = r
				queue = append(queue, g)
			}
		}
	}
	return nil, ""
}

// loginHolders are the roles that log in and act as name: name itself
// when it logs in, and its members at any depth that log in, in name
// order. Superusers are not among them: they gain nothing.
func (c roleCatalog) loginHolders(name string) []string {
	members := map[string][]string{}
	for m, r := range c.roles {
		for _, g := range r.memberOf {
			members[g] = append(members[g], m)
		}
	}
	seen := map[string]bool{name: true}
	queue := []string{name}
	var holders []string
	for len(queue) > 0 {
		r := queue[0]
		queue = queue[1:]
		if role := c.roles[r]; role.login && (r == name || !role.superuser) {
			holders = append(holders, r)
		}
		for _, m := range members[r] {
			if !seen[m] {
				seen[m] = true
				queue = append(queue, m)
			}
		}
	}
	slices.Sort(holders)
	return holders
}

// listNames names at most five roles, and how many more there are.
func listNames(names []string) string {
	const most = 5
	if len(names) <= most {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:most], ", "), len(names)-most)
}

func logVerb(names []string) string {
	if len(names) == 1 {
		return "logs in"
	}
	return "log in"
}

// guardSuperuserRights refuses req, unless the cluster allows superuser
// rights, when it would give them to a role that logs in (see
// refuseSuperuserRights). It reads the catalogs in tx, the apply's
// transaction, after the apply lock.
func (o *Objects) guardSuperuserRights(ctx context.Context, tx pgx.Tx, req instanceapi.RoleRequest) error {
	if req.Ensure == instanceapi.EnsureAbsent || (o.port.SuperuserAccess != nil && o.port.SuperuserAccess()) {
		return nil
	}
	c, err := readRoleCatalog(ctx, tx)
	if err != nil {
		return err
	}
	return refuseSuperuserRights(c, req)
}

// guardSuperuserSettings refuses, unless the cluster allows superuser
// rights, a role whose parameters (ALTER ROLE ... SET) name a setting only
// a superuser may set: the manager sets them as one, and each session of
// the role would then run with it (session_replication_role = replica
// skips triggers and foreign keys, log_statement = none hides it from the
// log, session_preload_libraries loads code at login). The import drops
// such settings of the source's roles likewise.
func (o *Objects) guardSuperuserSettings(ctx context.Context, tx pgx.Tx, req instanceapi.RoleRequest) error {
	if req.Ensure == instanceapi.EnsureAbsent || len(req.Parameters) == 0 || (o.port.SuperuserAccess != nil && o.port.SuperuserAccess()) {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT name FROM pg_settings WHERE name = ANY($1) AND context = 'superuser' ORDER BY 1`,
		slices.Sorted(maps.Keys(req.Parameters)))
	var guarded []string
	if err == nil {
		guarded, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return fmt.Errorf("while reading which settings need a superuser: %w", classifyPostgresError(err))
	}
	if len(guarded) == 0 {
		return nil
	}
	return refuse("role %s would set %s, which only a superuser may set, for each of its sessions; the cluster's spec.superuserAccess is false: "+
		"drop the parameter, or set spec.superuserAccess to true", req.Name, strings.Join(guarded, ", "))
}

// readRoleCatalog reads every role, its direct memberships and the
// server's major.
func readRoleCatalog(ctx context.Context, tx pgx.Tx) (roleCatalog, error) {
	c := roleCatalog{roles: map[string]catalogRole{}}
	if err := tx.QueryRow(ctx, "SELECT current_setting('server_version_num')::int / 10000").Scan(&c.major); err != nil {
		return c, fmt.Errorf("while reading the server's version: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT r.rolname, r.rolcanlogin, r.rolsuper, r.rolcreaterole,
		array(SELECT g.rolname::text FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid WHERE m.member = r.oid)
		FROM pg_roles r`)
	if err != nil {
		return c, fmt.Errorf("while reading the roles' rights: %w", err)
	}
	var (
		name string
		r    catalogRole
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &r.login, &r.superuser, &r.createRole, &r.memberOf}, func() error {
		c.roles[name] = r
		r = catalogRole{}
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("while reading the roles' rights: %w", err)
	}
	return c, nil
}
