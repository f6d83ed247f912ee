package instance

import (
	"fmt"
	"slices"
	"strings"

	"tusk.dev/tusk/internal/instance/sqlobjects"
	"tusk.dev/tusk/internal/instanceapi"
)

// roleImportPlan is what an import does to the new cluster's roles.
type roleImportPlan struct {
	statements []string
	// created are the roles made; kept those left as the new cluster has
	// them (Tusk's own, and the application database's owner).
	created, kept []string
	// withoutPassword are login roles created with no password, as the
	// import could not read their verifiers.
	withoutPassword []string
	// dropped says which attributes and memberships were not carried.
	dropped []string
}

// importReservedRole says whether a source role is left alone: Tusk's
// own, PostgreSQL's predefined ones, and any tusk_ name.
func importReservedRole(name string) bool {
	return sqlobjects.IsReservedRole(name) || strings.HasPrefix(name, "tusk_")
}

// planRoleImport turns the source's roles into statements for the new
// cluster, whose major is major. A role that exists there already is kept
// as it is. No role gets SUPERUSER or REPLICATION, nor CREATEROLE below
// PostgreSQL 16 (where it grants itself any role but a superuser), nor a
// membership that reaches the server's files and programs: any of them
// would let a database role read the pod's secrets; a PostgresRole grants
// them where the cluster allows it.
func planRoleImport(src *importSource, existing map[string]bool, major int) roleImportPlan {
	var p roleImportPlan
	created := map[string]bool{}
	for _, r := range src.roles {
		if importReservedRole(r.name) || existing[r.name] {
			p.kept = append(p.kept, r.name)
			continue
		}
		p.addRole(r, major)
		created[r.name] = true
	}
	for _, ms := range src.memberships {
		if created[ms.member] {
			p.addMembership(ms, created[ms.role] || existing[ms.role])
		}
	}
	return p
}

// addRole creates r without SUPERUSER and REPLICATION, and without
// CREATEROLE where major makes it as good as superuser, with its settings.
func (p *roleImportPlan) addRole(r sourceRole, major int) {
	if r.createRole && instanceapi.CreateRoleGrantsAnyRole(major) {
		r.createRole = false
		p.dropped = append(p.dropped, r.name+" CREATEROLE")
	}
	p.statements = append(p.statements, createRoleStatement(r))
	p.created = append(p.created, r.name)
	if r.superuser {
		p.dropped = append(p.dropped, r.name+" SUPERUSER")
	}
	if r.replication {
		p.dropped = append(p.dropped, r.name+" REPLICATION")
	}
	if r.login && r.verifier == nil {
		p.withoutPassword = append(p.withoutPassword, r.name)
	}
	for _, kv := range r.settings {
		if name, value, ok := strings.Cut(kv, "="); ok {
			p.statements = append(p.statements, fmt.Sprintf("ALTER ROLE %s SET %s = %s", ident(r.name), sqlobjects.SettingName(name), sqlobjects.SettingValue(name, value)))
		}
	}
}

// addMembership grants an imported role its membership, unless the group
// reaches the server's files, is Tusk's, or is not there (a predefined
// role this major lacks).
func (p *roleImportPlan) addMembership(ms sourceMembership, groupExists bool) {
	tusks := importReservedRole(ms.role) && !strings.HasPrefix(ms.role, "pg_")
	if !groupExists || tusks || slices.Contains(instanceapi.ServerFileRoles, ms.role) {
		p.dropped = append(p.dropped, ms.member+" IN ROLE "+ms.role)
		return
	}
	s := fmt.Sprintf("GRANT %s TO %s", ident(ms.role), ident(ms.member))
	if ms.admin {
		s += " WITH ADMIN OPTION"
	}
	p.statements = append(p.statements, s)
}

func createRoleStatement(r sourceRole) string {
	opts := []string{
		sqlobjects.Flag(r.login, "LOGIN"), sqlobjects.Flag(r.inherit, "INHERIT"), sqlobjects.Flag(r.createRole, "CREATEROLE"),
		sqlobjects.Flag(r.createDB, "CREATEDB"), sqlobjects.Flag(r.bypassRLS, "BYPASSRLS"),
		sqlobjects.ConnLimitClause(r.connLimit),
	}
	if r.validUntil != nil {
		opts = append(opts, "VALID UNTIL "+literal(*r.validUntil))
	}
	if r.verifier != nil {
		opts = append(opts, "PASSWORD "+literal(*r.verifier))
	}
	return fmt.Sprintf("CREATE ROLE %s WITH %s", ident(r.name), strings.Join(opts, " "))
}

// createDatabaseStatements make the database an import fills: with the
// source's encoding (the new cluster's C locale takes any), its owner
// (the application owner in place of a reserved one, as the restore gives
// objects only to roles that are no superuser) and the source's settings
// for it. The application database the bootstrap made is filled as it is.
func createDatabaseStatements(db sourceDatabase, appDatabase, appOwner string) []string {
	var s []string
	if db.name != appDatabase {
		s = append(s, fmt.Sprintf("CREATE DATABASE %s OWNER %s ENCODING %s TEMPLATE template0",
			ident(db.name), ident(targetDatabaseOwner(db, appDatabase, appOwner)), literal(db.encoding)))
	}
	for _, kv := range db.settings {
		if name, value, ok := strings.Cut(kv, "="); ok {
			s = append(s, fmt.Sprintf("ALTER DATABASE %s SET %s = %s", ident(db.name), sqlobjects.SettingName(name), sqlobjects.SettingValue(name, value)))
		}
	}
	return s
}

// targetDatabaseOwner is who owns an imported database in the new cluster.
func targetDatabaseOwner(db sourceDatabase, appDatabase, appOwner string) string {
	if db.name == appDatabase || importReservedRole(db.owner) {
		return appOwner
	}
	return db.owner
}
