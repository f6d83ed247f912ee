package sqlobjects

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"tusk.dev/tusk/internal/instanceapi"
)

// roleAttrs are a role's attributes as pg_authid holds them.
type roleAttrs struct {
	login, superuser, createDB, createRole, replication, bypassRLS, inherit bool
	connLimit                                                               int32
	// validUntil is nil for no expiry (NULL or 'infinity').
	validUntil *time.Time
}

// observedRole is what the catalogs say of a managed role and of the
// roles and databases its request names.
type observedRole struct {
	exists bool
	attrs  roleAttrs
	// inRoles are the roles it is a member of, the certificate login
	// group among them; settings its role-wide settings as
	// pg_db_role_setting stores them ("name=value").
	inRoles  []string
	settings []string
	// certificateGroupExists: instanceapi.CertificateLoginRole exists (a
	// primary whose manager predates it may not have it yet).
	certificateGroupExists bool
	// passwordMatches: the stored verifier verifies the requested password.
	passwordMatches bool
	// missing are the roles the request names (InRoles, ReassignOwnedTo)
	// that do not exist.
	missing []string
	// owns says what the role owns or has privileges on, one item each
	// ("database d", "3 objects in database app").
	owns []string
	// databases are the connectable databases (datallowconn).
	databases []string
}

// statement is one SQL statement of a plan. database is where it runs:
// empty for the apply's own transaction (in the postgres database).
type statement struct {
	sql      string
	database string
	// action is the log message ("Creating role"); change the sentence
	// for ApplyResult.Changes. Neither holds a secret.
	action, change string
}

// desiredAttrs are the attributes req asks for.
func desiredAttrs(req instanceapi.RoleRequest) (roleAttrs, error) {
	a := roleAttrs{login: req.Login, superuser: req.Superuser, createDB: req.CreateDB, createRole: req.CreateRole,
		replication: req.Replication, bypassRLS: req.BypassRLS, inherit: true, connLimit: -1}
	if req.Inherit != nil {
		a.inherit = *req.Inherit
	}
	if req.ConnectionLimit != nil {
		a.connLimit = *req.ConnectionLimit
	}
	if req.ValidUntil != "" && req.ValidUntil != "infinity" {
		t, err := time.Parse(time.RFC3339, req.ValidUntil)
		if err != nil {
			return a, refuse("validUntil %q is not an RFC 3339 time", req.ValidUntil)
		}
		t = t.Truncate(time.Microsecond) // what timestamptz keeps
		a.validUntil = &t
	}
	return a, nil
}

// checkRoleRequest refuses what no apply may do, before looking at the
// catalogs. owner is the bootstrap owner, whose password is the cluster's
// Secret's.
func checkRoleRequest(req instanceapi.RoleRequest, owner string) error {
	if err := checkManagedRoleName(req.Name, owner); err != nil {
		return err
	}
	if req.Ensure != "" && req.Ensure != instanceapi.EnsurePresent && req.Ensure != instanceapi.EnsureAbsent {
		return refuse("ensure %q is neither %q nor %q", req.Ensure, instanceapi.EnsurePresent, instanceapi.EnsureAbsent)
	}
	if to := req.ReassignOwnedTo; to != "" {
		if to == req.Name {
			return refuse("role %s cannot reassign what it owns to itself", req.Name)
		}
		if IsReservedRole(to) {
			return refuse("role %s cannot reassign what it owns to %s: a role reserved to Tusk or PostgreSQL", req.Name, to)
		}
	}
	for _, r := range req.InRoles {
		switch {
		case r == req.Name:
			return refuse("role %s cannot be a member of itself", req.Name)
		case slices.Contains(instanceapi.ReservedRoles, r):
			return refuse("role %s cannot be a member of %s: a role reserved to Tusk", req.Name, r)
		}
	}
	for k := range req.Parameters {
		if !validSettingName(k) {
			return refuse("parameter %q is not a configuration parameter's name", k)
		}
	}
	_, err := desiredAttrs(req)
	return err
}

func checkManagedRoleName(name, owner string) error {
	switch {
	case name == "":
		return refuse("the role needs a name")
	case IsReservedRole(name):
		return refuse("role %s is reserved to Tusk or PostgreSQL: it cannot be managed", name)
	case name == owner:
		return refuse("role %s is the cluster's owner: Tusk manages it, and its password comes from the cluster's Secret", name)
	}
	return nil
}

// IsReservedRole says whether name is Tusk's (its roles, and every name
// starting with tusk_ or tusk-, such as the operator's certificate name
// tusk-operator) or PostgreSQL's (pg_*): no declared role may be it.
func IsReservedRole(name string) bool {
	return slices.Contains(instanceapi.ReservedRoles, name) ||
		strings.HasPrefix(name, "pg_") || strings.HasPrefix(name, "tusk_") || strings.HasPrefix(name, "tusk-")
}

// validSettingName accepts a parameter's name: lower case words,
// optionally prefixed ("auto_explain.log_min_duration").
func validSettingName(name string) bool {
	if name == "" {
		return false
	}
	for part := range strings.SplitSeq(name, ".") {
		if part == "" || (part[0] >= '0' && part[0] <= '9') {
			return false
		}
		for _, c := range part {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
				return false
			}
		}
	}
	return true
}

// planRole computes the statements that make the catalogs match req.
// verifier is the new password's SCRAM verifier, needed only when the
// stored one does not verify the password.
func planRole(req instanceapi.RoleRequest, owner string, obs observedRole, verifier string) ([]statement, error) {
	if err := checkRoleRequest(req, owner); err != nil {
		return nil, err
	}
	if req.Ensure == instanceapi.EnsureAbsent {
		return planDropRole(req, obs)
	}
	if len(obs.missing) > 0 {
		return nil, refuse("role %s cannot be a member of roles that do not exist: %s", req.Name, strings.Join(obs.missing, ", "))
	}
	want, _ := desiredAttrs(req)
	name := Ident(req.Name)
	var plan []statement
	if !obs.exists {
		plan = append(plan, statement{sql: "CREATE ROLE " + name + " WITH " + strings.Join(attrClauses(want), " "),
			action: "Creating role", change: "created role " + req.Name})
	} else {
		plan = append(plan, alterAttrs(req.Name, obs.attrs, want)...)
	}
	if req.Password != nil && (!obs.exists || !obs.passwordMatches) {
		plan = append(plan, statement{sql: "ALTER ROLE " + name + " PASSWORD " + Literal(verifier),
			action: "Setting the role's password", change: "set the password"})
	}
	plan = append(plan, planMemberships(req, obs.inRoles)...)
	plan = append(plan, planCertificateLogin(req, obs)...)
	return append(plan, planSettings(req, obs.settings)...), nil
}

// planCertificateLogin makes the role a member of the certificate login
// group when req asks for CertificateLogin, making the group first if
// it is missing, and takes the membership away otherwise.
func planCertificateLogin(req instanceapi.RoleRequest, obs observedRole) []statement {
	group := instanceapi.CertificateLoginRole
	member := slices.Contains(obs.inRoles, group)
	switch {
	case req.CertificateLogin && !member:
		var plan []statement
		if !obs.certificateGroupExists {
			plan = append(plan, statement{sql: CreateCertificateLoginGroup,
				action: "Creating the certificate login group", change: "created role " + group})
		}
		return append(plan, statement{sql: "GRANT " + Ident(group) + " TO " + Ident(req.Name),
			action: "Granting certificate login", change: "granted certificate login"})
	case !req.CertificateLogin && member:
		return []statement{{sql: "REVOKE " + Ident(group) + " FROM " + Ident(req.Name),
			action: "Revoking certificate login", change: "revoked certificate login"}}
	}
	return nil
}

// attrClauses are the clauses of CREATE ROLE ... WITH for a.
func attrClauses(a roleAttrs) []string {
	return []string{
		Flag(a.login, "LOGIN"), Flag(a.superuser, "SUPERUSER"), Flag(a.createDB, "CREATEDB"),
		Flag(a.createRole, "CREATEROLE"), Flag(a.replication, "REPLICATION"), Flag(a.bypassRLS, "BYPASSRLS"),
		Flag(a.inherit, "INHERIT"), ConnLimitClause(a.connLimit), validUntilClause(a.validUntil),
	}
}

// Flag is a role attribute's clause: keyword, or NOkeyword when off.
func Flag(on bool, keyword string) string {
	if on {
		return keyword
	}
	return "NO" + keyword
}

// ConnLimitClause is a role's CONNECTION LIMIT clause.
func ConnLimitClause(n int32) string { return "CONNECTION LIMIT " + strconv.Itoa(int(n)) }

func validUntilClause(t *time.Time) string { return "VALID UNTIL " + Literal(validUntilText(t)) }

func validUntilText(t *time.Time) string {
	if t == nil {
		return "infinity"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// alterAttrs changes each attribute that differs, one statement each.
func alterAttrs(role string, have, want roleAttrs) []statement {
	var plan []statement
	alter := func(clause string) {
		plan = append(plan, statement{sql: "ALTER ROLE " + Ident(role) + " WITH " + clause,
			action: "Altering role", change: "set " + clause})
	}
	flags := []struct {
		have, want bool
		keyword    string
	}{
		{have.login, want.login, "LOGIN"}, {have.superuser, want.superuser, "SUPERUSER"},
		{have.createDB, want.createDB, "CREATEDB"}, {have.createRole, want.createRole, "CREATEROLE"},
		{have.replication, want.replication, "REPLICATION"}, {have.bypassRLS, want.bypassRLS, "BYPASSRLS"},
		{have.inherit, want.inherit, "INHERIT"},
	}
	for _, f := range flags {
		if f.have != f.want {
			alter(Flag(f.want, f.keyword))
		}
	}
	if have.connLimit != want.connLimit {
		alter(ConnLimitClause(want.connLimit))
	}
	if !sameValidUntil(have.validUntil, want.validUntil) {
		alter(validUntilClause(want.validUntil))
	}
	return plan
}

func sameValidUntil(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}

// planMemberships grants the memberships missing and revokes the extra
// ones, in name order. The certificate login group is not one of them:
// planCertificateLogin decides it.
func planMemberships(req instanceapi.RoleRequest, have []string) []statement {
	var plan []statement
	want := slices.Clone(req.InRoles)
	slices.Sort(want)
	for _, r := range slices.Compact(want) {
		if !slices.Contains(have, r) {
			plan = append(plan, statement{sql: "GRANT " + Ident(r) + " TO " + Ident(req.Name),
				action: "Granting role membership", change: "granted membership in " + r})
		}
	}
	have = slices.Sorted(slices.Values(have))
	for _, r := range have {
		if !slices.Contains(want, r) && r != instanceapi.CertificateLoginRole {
			plan = append(plan, statement{sql: "REVOKE " + Ident(r) + " FROM " + Ident(req.Name),
				action: "Revoking role membership", change: "revoked membership in " + r})
		}
	}
	return plan
}

// planSettings sets the parameters missing or different and resets the
// extra ones, in name order.
func planSettings(req instanceapi.RoleRequest, stored []string) []statement {
	have := map[string]string{}
	for _, s := range stored {
		k, v, _ := strings.Cut(s, "=")
		have[k] = v
	}
	var plan []statement
	for _, k := range slices.Sorted(maps.Keys(req.Parameters)) {
		v := req.Parameters[k]
		if old, ok := have[k]; ok && sameSetting(k, old, v) {
			continue
		}
		plan = append(plan, statement{sql: "ALTER ROLE " + Ident(req.Name) + " SET " + SettingName(k) + " = " + SettingValue(k, v),
			action: "Altering role", change: fmt.Sprintf("set parameter %s to %s", k, v)})
	}
	for _, k := range slices.Sorted(maps.Keys(have)) {
		if _, ok := req.Parameters[k]; !ok {
			plan = append(plan, statement{sql: "ALTER ROLE " + Ident(req.Name) + " RESET " + SettingName(k),
				action: "Altering role", change: "reset parameter " + k})
		}
	}
	return plan
}

// planDropRole drops an existing role; one that owns objects or has
// privileges has them reassigned (in every connectable database) and
// dropped first when req says to whom, and is refused otherwise.
func planDropRole(req instanceapi.RoleRequest, obs observedRole) ([]statement, error) {
	if !obs.exists {
		return nil, nil
	}
	name := Ident(req.Name)
	var plan []statement
	if len(obs.owns) > 0 {
		if req.ReassignOwnedTo == "" {
			return nil, refuse("role %s owns or has privileges on %s: set reassignOwnedTo to hand them over before the drop",
				req.Name, strings.Join(obs.owns, ", "))
		}
		if len(obs.missing) > 0 {
			return nil, refuse("role %s cannot reassign what it owns to %s: no such role", req.Name, req.ReassignOwnedTo)
		}
		for _, db := range obs.databases {
			on := db
			if db == "postgres" {
				on = "" // in the apply's own transaction
			}
			plan = append(plan,
				statement{sql: "REASSIGN OWNED BY " + name + " TO " + Ident(req.ReassignOwnedTo), database: on,
					action: "Reassigning what the role owns", change: fmt.Sprintf("reassigned what %s owns in database %s to %s", req.Name, db, req.ReassignOwnedTo)},
				statement{sql: "DROP OWNED BY " + name, database: on,
					action: "Dropping the role's privileges", change: fmt.Sprintf("dropped the privileges of %s in database %s", req.Name, db)})
		}
	}
	return append(plan, statement{sql: "DROP ROLE " + name, action: "Dropping role", change: "dropped role " + req.Name}), nil
}
