package sqlobjects

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"tusk.dev/tusk/internal/instanceapi"
)

// ApplyRole makes the role req names match it (PUT /v1/sql/roles): it
// reads the role from the catalogs, refuses to give superuser rights to a
// role that logs in unless the cluster allows them (guardSuperuserRights),
// plans the statements that close the difference, and runs them in one
// transaction on the primary. A role
// dropped with reassignOwnedTo has what it owns in the other databases
// reassigned first, in a transaction each.
func (o *Objects) ApplyRole(ctx context.Context, req instanceapi.RoleRequest) (instanceapi.ApplyResult, error) {
	if err := checkRoleRequest(req, o.port.Owner); err != nil {
		return instanceapi.ApplyResult{}, err
	}
	conn, err := o.port.ConnectWritable(ctx, "postgres")
	if err != nil {
		return instanceapi.ApplyResult{}, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if err := QuietRoleStatements(ctx, conn); err != nil {
		return instanceapi.ApplyResult{}, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return instanceapi.ApplyResult{}, fmt.Errorf("while starting the role's transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := takeApplyLock(ctx, tx); err != nil {
		return instanceapi.ApplyResult{}, err
	}
	obs, err := observeRole(ctx, tx, req)
	if err != nil {
		return instanceapi.ApplyResult{}, err
	}
	if err := o.guardSuperuserRights(ctx, tx, req); err != nil {
		return instanceapi.ApplyResult{}, err
	}
	if err := o.guardSuperuserSettings(ctx, tx, req); err != nil {
		return instanceapi.ApplyResult{}, err
	}
	verifier, err := newVerifierIfNeeded(req, obs)
	if err != nil {
		return instanceapi.ApplyResult{}, err
	}
	plan, err := planRole(req, o.port.Owner, obs, verifier)
	if err != nil {
		return instanceapi.ApplyResult{}, err
	}
	res := instanceapi.ApplyResult{Exists: req.Ensure != instanceapi.EnsureAbsent}
	if err := o.runPlan(ctx, tx, req.Name, plan, &res); err != nil {
		return instanceapi.ApplyResult{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return instanceapi.ApplyResult{}, fmt.Errorf("while committing the changes to role %s: %w", req.Name, classifyPostgresError(err))
	}
	return res, nil
}

func newVerifierIfNeeded(req instanceapi.RoleRequest, obs observedRole) (string, error) {
	if req.Password == nil || req.Ensure == instanceapi.EnsureAbsent || (obs.exists && obs.passwordMatches) {
		return "", nil
	}
	return ScramVerifier(*req.Password)
}

// runPlan runs the statements of other databases first, each database's in
// its own transaction, then those of tx.
func (o *Objects) runPlan(ctx context.Context, tx pgx.Tx, role string, plan []statement, res *instanceapi.ApplyResult) error {
	var elsewhere []string
	for _, s := range plan {
		if s.database != "" && !slices.Contains(elsewhere, s.database) {
			elsewhere = append(elsewhere, s.database)
		}
	}
	for _, db := range elsewhere {
		if err := o.runIn(ctx, db, role, plan, res); err != nil {
			return err
		}
	}
	for _, s := range plan {
		if s.database == "" {
			if err := o.execStatement(ctx, tx, role, s, res); err != nil {
				return err
			}
		}
	}
	return nil
}

// runIn runs plan's statements for database db in one transaction there.
func (o *Objects) runIn(ctx context.Context, db, role string, plan []statement, res *instanceapi.ApplyResult) error {
	conn, err := o.port.ConnectWritable(ctx, db)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, s := range plan {
			if s.database == db {
				if err := o.execStatement(ctx, tx, role, s, res); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

func (o *Objects) execStatement(ctx context.Context, tx pgx.Tx, role string, s statement, res *instanceapi.ApplyResult) error {
	o.port.Log.Info(s.action, "role", role, "change", s.change)
	if _, err := tx.Exec(ctx, s.sql); err != nil {
		return fmt.Errorf("while applying role %s (%s): %w", role, s.change, classifyPostgresError(err))
	}
	res.Statements++
	res.Changes = append(res.Changes, s.change)
	return nil
}

// observeRole reads what the catalogs hold of req's role.
func observeRole(ctx context.Context, tx pgx.Tx, req instanceapi.RoleRequest) (observedRole, error) {
	var obs observedRole
	oid, password, err := readRoleAttrs(ctx, tx, req.Name, &obs)
	if err != nil {
		return obs, err
	}
	named := req.InRoles
	if req.Ensure == instanceapi.EnsureAbsent {
		named = nil
		if req.ReassignOwnedTo != "" {
			named = []string{req.ReassignOwnedTo}
		}
	}
	if obs.missing, err = missingRoles(ctx, tx, named); err != nil {
		return obs, err
	}
	if req.CertificateLogin && req.Ensure != instanceapi.EnsureAbsent {
		missing, err := missingRoles(ctx, tx, []string{instanceapi.CertificateLoginRole})
		if err != nil {
			return obs, err
		}
		obs.certificateGroupExists = len(missing) == 0
	}
	if !obs.exists {
		return obs, nil
	}
	if req.Password != nil {
		obs.passwordMatches = verifies(password, *req.Password)
	}
	if req.Ensure == instanceapi.EnsureAbsent {
		return obs, readOwnership(ctx, tx, oid, &obs)
	}
	return obs, readMembershipAndSettings(ctx, tx, oid, &obs)
}

// readRoleAttrs fills obs.exists and obs.attrs, and returns the role's oid
// and stored password (nil when it has none).
func readRoleAttrs(ctx context.Context, tx pgx.Tx, name string, obs *observedRole) (uint32, *string, error) {
	var oid uint32
	var password *string
	var validUntil pgtype.Timestamptz
	a := &obs.attrs
	err := tx.QueryRow(ctx, `SELECT oid, rolcanlogin, rolsuper, rolcreatedb, rolcreaterole, rolreplication,
		rolbypassrls, rolinherit, rolconnlimit, rolvaliduntil, rolpassword FROM pg_authid WHERE rolname = $1`, name).
		Scan(&oid, &a.login, &a.superuser, &a.createDB, &a.createRole, &a.replication,
			&a.bypassRLS, &a.inherit, &a.connLimit, &validUntil, &password)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("while reading role %s: %w", name, err)
	}
	obs.exists = true
	if validUntil.Valid && validUntil.InfinityModifier == pgtype.Finite {
		t := validUntil.Time
		a.validUntil = &t
	}
	return oid, password, nil
}

func missingRoles(ctx context.Context, tx pgx.Tx, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, "SELECT rolname FROM pg_roles WHERE rolname = ANY($1)", names)
	var existing []string
	if err == nil {
		existing, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return nil, fmt.Errorf("while looking up roles: %w", err)
	}
	var missing []string
	for _, n := range names {
		if !slices.Contains(existing, n) && !slices.Contains(missing, n) {
			missing = append(missing, n)
		}
	}
	return missing, nil
}

func readMembershipAndSettings(ctx context.Context, tx pgx.Tx, oid uint32, obs *observedRole) error {
	rows, err := tx.Query(ctx, `SELECT r.rolname FROM pg_auth_members m
		JOIN pg_roles r ON r.oid = m.roleid WHERE m.member = $1 ORDER BY 1`, oid)
	if err == nil {
		obs.inRoles, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return fmt.Errorf("while reading the role's memberships: %w", err)
	}
	rows, err = tx.Query(ctx, `SELECT unnest(setconfig) FROM pg_db_role_setting
		WHERE setrole = $1 AND setdatabase = 0`, oid)
	if err == nil {
		obs.settings, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return fmt.Errorf("while reading the role's settings: %w", err)
	}
	return nil
}

// readOwnership fills obs.owns (the databases and tablespaces the role
// owns, and per database how many objects it owns or has privileges on)
// and obs.databases.
func readOwnership(ctx context.Context, tx pgx.Tx, oid uint32, obs *observedRole) error {
	rows, err := tx.Query(ctx, `SELECT 'database ' || datname FROM pg_database WHERE datdba = $1
		UNION ALL SELECT 'tablespace ' || spcname FROM pg_tablespace WHERE spcowner = $1
		UNION ALL SELECT count(*) || ' objects in database ' || d.datname FROM pg_shdepend s
			JOIN pg_database d ON d.oid = s.dbid
			WHERE s.refclassid = 'pg_authid'::regclass AND s.refobjid = $1 GROUP BY d.datname`, oid)
	if err == nil {
		obs.owns, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return fmt.Errorf("while reading what the role owns: %w", err)
	}
	rows, err = tx.Query(ctx, "SELECT datname FROM pg_database WHERE datallowconn ORDER BY 1")
	if err == nil {
		obs.databases, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return fmt.Errorf("while listing the databases: %w", err)
	}
	return nil
}

// verifies says whether stored, a role's rolpassword, is a SCRAM-SHA-256
// verifier of password.
func verifies(stored *string, password string) bool {
	if stored == nil {
		return false
	}
	iterations, salt, ok := parseVerifier(*stored)
	if !ok {
		return false
	}
	computed, err := scramVerifierWithSalt(password, salt, iterations)
	return err == nil && subtle.ConstantTimeCompare([]byte(computed), []byte(*stored)) == 1
}

// parseVerifier reads the iterations and salt of
// "SCRAM-SHA-256$<iterations>:<salt>$<stored key>:<server key>".
func parseVerifier(v string) (int, []byte, bool) {
	rest, ok := strings.CutPrefix(v, "SCRAM-SHA-256$")
	if !ok {
		return 0, nil, false
	}
	params, _, ok := strings.Cut(rest, "$")
	if !ok {
		return 0, nil, false
	}
	iter, salt64, ok := strings.Cut(params, ":")
	if !ok {
		return 0, nil, false
	}
	iterations, err := strconv.Atoi(iter)
	if err != nil || iterations < 1 {
		return 0, nil, false
	}
	salt, err := base64.StdEncoding.DecodeString(salt64)
	if err != nil {
		return 0, nil, false
	}
	return iterations, salt, true
}
