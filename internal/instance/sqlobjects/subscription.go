package sqlobjects

import (
	"bytes"
	"cmp"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"tusk.dev/tusk/internal/instance/fsutil"
	"tusk.dev/tusk/internal/instanceapi"
)

// caPlaceholder in a subscription's ConnInfo stands for the path of the
// file the manager writes its CAPEM to.
const caPlaceholder = "$CA"

// subscriptionName is what a subscription may be called: its slot on the
// publisher takes its name, and slot names are a-z, 0-9 and _.
var subscriptionName = regexp.MustCompile(`^[a-z0-9_]+$`)

// subscriptionState is a subscription as the catalogs have it.
type subscriptionState struct {
	exists       bool
	enabled      bool
	connInfo     string
	publications []string // sorted
	slot         string   // empty: none (SET (slot_name = NONE))
	// runAsOwner: the apply runs as the subscription's owner, a superuser,
	// rather than as each table's owner (PostgreSQL 16's run_as_owner).
	runAsOwner bool
}

// minSubscriptionVersion is the first PostgreSQL (server_version_num) whose
// apply worker can run as each table's owner. Before it, the apply runs as
// the subscription's owner, who must be a superuser: whoever owns a
// subscribed table could run code as superuser with a trigger (ENABLE
// ALWAYS fires in the apply), a CHECK constraint's function or a default.
const minSubscriptionVersion = 160000

// planSubscription lists the statements that make current what req asks.
// connInfo is req's with its CA file's path in place of "$CA";
// publications are req's, sorted and without duplicates.
func planSubscription(req instanceapi.SubscriptionRequest, connInfo string, publications []string, current subscriptionState) []logicalStep {
	name := Ident(req.Name)
	if req.Ensure == instanceapi.EnsureAbsent {
		if current.exists {
			return []logicalStep{{sql: "DROP SUBSCRIPTION " + name, change: "dropped subscription " + req.Name}}
		}
		return nil
	}
	enabled := req.Enabled == nil || *req.Enabled
	if !current.exists {
		// run_as_owner = false, PostgreSQL 16's default, said anyway: the
		// apply switches to each table's owner, so no table owner's code
		// runs as the superuser who owns the subscription.
		step := logicalStep{
			sql: "CREATE SUBSCRIPTION " + name + " CONNECTION " + Literal(connInfo) + " PUBLICATION " + identList(publications) +
				" WITH (run_as_owner = false)",
			change: "created subscription " + req.Name + " to publication " + strings.Join(publications, ", "),
		}
		if !enabled {
			step.sql = strings.TrimSuffix(step.sql, ")") + ", enabled = false)"
			step.change += ", disabled"
		}
		return []logicalStep{step}
	}
	var steps []logicalStep
	if current.runAsOwner {
		// Set by hand (or by an older Tusk): the apply would run every
		// table owner's triggers as superuser.
		steps = append(steps, logicalStep{sql: "ALTER SUBSCRIPTION " + name + " SET (run_as_owner = false)",
			change: "made subscription " + req.Name + " apply as each table's owner (run_as_owner = false)"})
	}
	if current.connInfo != connInfo {
		steps = append(steps, logicalStep{sql: "ALTER SUBSCRIPTION " + name + " CONNECTION " + Literal(connInfo),
			change: "changed the connection of subscription " + req.Name})
	}
	if enabled && !current.enabled {
		steps = append(steps, logicalStep{sql: "ALTER SUBSCRIPTION " + name + " ENABLE", change: "enabled subscription " + req.Name})
	}
	if !slices.Equal(current.publications, publications) {
		step := logicalStep{sql: "ALTER SUBSCRIPTION " + name + " SET PUBLICATION " + identList(publications),
			change: "set the publications of subscription " + req.Name + " to " + strings.Join(publications, ", ")}
		if !enabled && !current.enabled {
			// PostgreSQL refreshes the tables of an enabled subscription
			// only; a disabled one learns them at REFRESH PUBLICATION.
			step.sql += " WITH (refresh = false)"
		}
		steps = append(steps, step)
	}
	if !enabled && current.enabled {
		steps = append(steps, logicalStep{sql: "ALTER SUBSCRIPTION " + name + " DISABLE", change: "disabled subscription " + req.Name})
	}
	return steps
}

func identList(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = Ident(n)
	}
	return strings.Join(quoted, ", ")
}

// ApplySubscription makes the subscription req names what it asks, in its
// database. PostgreSQL creates its slot on the publisher, named after it,
// and drops it with the subscription: a drop that cannot reach the
// publisher is refused rather than leave the slot behind unseen.
func (o *Objects) ApplySubscription(ctx context.Context, req instanceapi.SubscriptionRequest) (instanceapi.ApplyResult, error) {
	publications, err := validateSubscription(req)
	if err != nil {
		return instanceapi.ApplyResult{}, err
	}
	conn, err := o.port.ConnectWritable(ctx, req.Database)
	if nothingToDrop(req.Ensure, err) {
		return instanceapi.ApplyResult{}, nil
	}
	if err != nil {
		return instanceapi.ApplyResult{}, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	// The statements hold the connection string, password included: keep
	// them out of the server's log, also when one fails.
	if err := QuietRoleStatements(ctx, conn); err != nil {
		return instanceapi.ApplyResult{}, err
	}
	current, err := querySubscription(ctx, conn, req.Name)
	if err != nil {
		return instanceapi.ApplyResult{}, err
	}
	if req.Ensure != instanceapi.EnsureAbsent {
		if err := refuseBeforeRunAsOwner(ctx, conn, req.Name, current.exists); err != nil {
			return instanceapi.ApplyResult{Exists: current.exists}, err
		}
	}
	caPath := o.subscriptionCAPath(req.Database, req.Name)
	res := instanceapi.ApplyResult{}
	if req.Ensure != instanceapi.EnsureAbsent && req.CAPEM != "" {
		if res, err = o.writeSubscriptionCA(caPath, req); err != nil {
			return res, err
		}
	}
	connInfo := withSCRAMOnly(strings.ReplaceAll(req.ConnInfo, caPlaceholder, caPath))
	steps := planSubscription(req, connInfo, publications, current)
	done, err := o.runLogicalSteps(ctx, conn, req.Database, steps, func(err error) error {
		return explainSubscriptionError(err, req, current, connInfo)
	})
	res.Statements += done.Statements
	res.Changes = append(res.Changes, done.Changes...)
	res.Exists = req.Ensure != instanceapi.EnsureAbsent
	if err != nil {
		res.Exists = current.exists // creating and dropping are one statement each
		return res, fmt.Errorf("while applying subscription %s: %w", req.Name, err)
	}
	if req.Ensure == instanceapi.EnsureAbsent {
		if err := os.Remove(caPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return res, fmt.Errorf("while removing the CA certificate of subscription %s: %w", req.Name, err)
		}
	}
	return res, nil
}

// validateSubscription refuses what cannot be applied as it stands, and
// returns the publications sorted and without duplicates.
func validateSubscription(req instanceapi.SubscriptionRequest) ([]string, error) {
	refuse := func(format string, args ...any) ([]string, error) {
		return nil, &refusal{reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case req.Database == "":
		return refuse("subscription %s needs a database", req.Name)
	case len(req.Name) > maxIdentifierLength || !subscriptionName.MatchString(req.Name):
		return refuse("subscription name %q is not a replication slot name (a-z, 0-9, _; at most %d), which its slot on the publisher takes",
			req.Name, maxIdentifierLength)
	case req.Ensure != "" && req.Ensure != instanceapi.EnsurePresent && req.Ensure != instanceapi.EnsureAbsent:
		return refuse("ensure %q is neither present nor absent", req.Ensure)
	case req.Ensure == instanceapi.EnsureAbsent:
		return nil, nil
	case len(req.Publications) == 0 || slices.Contains(req.Publications, ""):
		return refuse("subscription %s names no publication", req.Name)
	case req.ConnInfo == "":
		return refuse("subscription %s has no connection string", req.Name)
	case strings.Contains(req.ConnInfo, caPlaceholder) != (req.CAPEM != ""):
		return refuse("subscription %s: the connection string names the CA file as %s exactly when a CA certificate is given", req.Name, caPlaceholder)
	}
	if err := checkSubscriptionConnInfo(req.Name, req.ConnInfo); err != nil {
		return nil, err
	}
	if req.CAPEM != "" {
		if block, _ := pem.Decode([]byte(req.CAPEM)); block == nil || block.Type != "CERTIFICATE" {
			return refuse("the CA certificate of subscription %s is not a PEM certificate", req.Name)
		}
	}
	publications := slices.Clone(req.Publications)
	slices.Sort(publications)
	return slices.Compact(publications), nil
}

// refuseBeforeRunAsOwner refuses a subscription on a server older than
// PostgreSQL 16 (see minSubscriptionVersion). Dropping one is not refused:
// it is how a subscription made before this check goes away.
func refuseBeforeRunAsOwner(ctx context.Context, conn *pgx.Conn, name string, exists bool) error {
	var version int
	var display string
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int, current_setting('server_version')").Scan(&version, &display); err != nil {
		return fmt.Errorf("while reading the server's version: %w", err)
	}
	if version >= minSubscriptionVersion {
		return nil
	}
	reason := fmt.Sprintf("subscription %s is refused: this server runs PostgreSQL %s, whose subscriptions apply rows as their owner, "+
		"which must be a superuser, so the owner of any subscribed table could run code as superuser (a trigger ENABLE ALWAYS, a CHECK "+
		"constraint's function). PostgreSQL 16 and later apply as each table's owner: upgrade the cluster to 16 or later to subscribe",
		name, display)
	if exists {
		reason += fmt.Sprintf(". Subscription %s exists already and still applies as superuser: drop it (delete its PostgresSubscription) "+
			"unless you trust every owner of its tables", name)
	}
	return &refusal{reason: reason}
}

func querySubscription(ctx context.Context, conn *pgx.Conn, name string) (subscriptionState, error) {
	st := subscriptionState{exists: true}
	// subrunasowner is PostgreSQL 16's; before it, the question is moot
	// (refuseBeforeRunAsOwner).
	err := conn.QueryRow(ctx, `SELECT subenabled, subconninfo, subpublications::text[], coalesce(subslotname::text, ''),
			coalesce((to_jsonb(s) ->> 'subrunasowner')::bool, false)
		FROM pg_subscription s WHERE subname = $1 AND subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		name).Scan(&st.enabled, &st.connInfo, &st.publications, &st.slot, &st.runAsOwner)
	if errors.Is(err, pgx.ErrNoRows) {
		return subscriptionState{}, nil
	}
	if err != nil {
		return subscriptionState{}, fmt.Errorf("while reading subscription %s: %w", name, err)
	}
	slices.Sort(st.publications)
	return st, nil
}

// subscriptionCAPath is where the CA certificate of a subscription goes,
// in the run directory: it is no part of the data, and a backup or a
// replica has no use for it. The database is in the name because
// subscriptions of the same name may exist in two databases.
func (o *Objects) subscriptionCAPath(database, name string) string {
	db := database
	if !plainFileName.MatchString(db) {
		db = fmt.Sprintf("%x", database) // no quote, slash or space in the path, which goes into a connection string
	}
	return filepath.Join(o.port.RunDir, "subscriptions", db+"."+name+".ca.crt")
}

// plainFileName needs no quoting in a file name nor a connection string.
var plainFileName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// writeSubscriptionCA writes req.CAPEM to path (0600, atomically) when
// it differs from what the file holds.
func (o *Objects) writeSubscriptionCA(path string, req instanceapi.SubscriptionRequest) (instanceapi.ApplyResult, error) {
	old, err := os.ReadFile(path) //nolint:gosec // in the run directory, named by a validated subscription name
	if err == nil && bytes.Equal(old, []byte(req.CAPEM)) {
		return instanceapi.ApplyResult{}, nil
	}
	change := "wrote the CA certificate of subscription " + req.Name
	o.port.Log.Info("Writing the CA certificate of subscription "+req.Name, "path", path)
	if err := fsutil.WriteFileAtomically(path, []byte(req.CAPEM)); err != nil {
		return instanceapi.ApplyResult{}, fmt.Errorf("while writing the CA certificate of subscription %s: %w", req.Name, err)
	}
	return instanceapi.ApplyResult{Changes: []string{change}}, nil
}

// explainSubscriptionError scrubs the connection string from a failed
// statement's error, and turns a publisher that cannot be reached into a
// refusal that says what to do.
func explainSubscriptionError(err error, req instanceapi.SubscriptionRequest, current subscriptionState, connInfo string) error {
	msg := RedactConnInfo(err.Error(), connInfo, req.ConnInfo)
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok {
		return errors.New(msg)
	}
	if !strings.HasPrefix(pgErr.Code, "08") {
		return &refusal{reason: msg}
	}
	if req.Ensure != instanceapi.EnsureAbsent {
		return &refusal{reason: "the publisher cannot be reached: " + msg}
	}
	slot := cmp.Or(current.slot, req.Name)
	return &refusal{reason: fmt.Sprintf("subscription %[1]s was not dropped: the publisher cannot be reached to drop "+
		"its replication slot %[2]s there (%[3]s). Make the publisher reachable and apply again; or, if it is gone for good, "+
		"detach the subscription from its slot by hand in database %[4]s (ALTER SUBSCRIPTION %[1]s DISABLE; "+
		"ALTER SUBSCRIPTION %[1]s SET (slot_name = NONE)) and apply again, then drop the slot on the publisher should it "+
		"come back (SELECT pg_drop_replication_slot('%[2]s')): a slot left behind keeps its WAL forever",
		req.Name, slot, msg, req.Database)}
}

// connInfoPassword finds password values in a connection string: the
// keyword/value form's password=..., quoted or not, and a URI's
// user:password@ or password= parameter.
var connInfoPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)|(://[^:@/\s]*:)([^@\s]*)(@)`)

// RedactConnInfo removes connection strings and their passwords from s:
// each of connInfos whole, then their passwords wherever they appear,
// then anything else that looks like a password setting.
func RedactConnInfo(s string, connInfos ...string) string {
	unquote := strings.NewReplacer(`\'`, `'`, `\\`, `\`)
	for _, c := range connInfos {
		if c == "" {
			continue
		}
		s = strings.ReplaceAll(s, Literal(c), "<connection>")
		s = strings.ReplaceAll(s, c, "<connection>")
		for _, m := range connInfoPassword.FindAllStringSubmatch(c, -1) {
			quoted := strings.HasPrefix(m[2], "'")
			for _, secret := range []string{m[2], m[4]} {
				if quoted && secret == m[2] {
					secret = unquote.Replace(secret[1 : len(secret)-1])
				}
				if secret != "" {
					s = strings.ReplaceAll(s, secret, "<redacted>")
				}
			}
		}
	}
	return connInfoPassword.ReplaceAllString(s, "$1$3<redacted>$5")
}
