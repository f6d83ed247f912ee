//go:build integration

package instance

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

// The attack on a subscriber: mallory, no superuser, owns a subscribed
// table and gives it a trigger that fires in the apply (ENABLE ALWAYS).
// It tries to make mallory a superuser, and records who it ran as and
// whether that worked. (The apply worker's search_path is empty: the
// function names its table's schema.)
const malloryTrigger = `CREATE ROLE mallory NOLOGIN;
CREATE TABLE t (id int PRIMARY KEY); ALTER TABLE t OWNER TO mallory;
GRANT CREATE ON SCHEMA public TO mallory;
SET ROLE mallory;
CREATE TABLE applied_as (who text, escalation text);
CREATE FUNCTION record_applier() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	escalation text := 'escalated';
BEGIN
	BEGIN
		ALTER ROLE mallory SUPERUSER;
	EXCEPTION WHEN insufficient_privilege THEN
		escalation := 'denied';
	END;
	INSERT INTO public.applied_as VALUES (current_user, escalation);
	RETURN NEW;
END $$;
CREATE TRIGGER record_applier BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION record_applier();
ALTER TABLE t ENABLE ALWAYS TRIGGER record_applier;
RESET ROLE`

// startSubscriptionAttack starts a publisher A of table t and a subscriber
// B running binDir's PostgreSQL (pgBinDir's when empty) with mallory's
// trigger, and returns them with B's subscription request.
func startSubscriptionAttack(t *testing.T, prefix, binDir string) (a, b *node, sub instanceapi.SubscriptionRequest) {
	t.Helper()
	a = startNode(t, prefix+"-a", nodeOptions{role: instanceapi.RolePrimary})
	b = startNode(t, prefix+"-b", nodeOptions{role: instanceapi.RolePrimary, binDir: binDir})
	a.waitReady(instanceapi.RolePrimary)
	b.waitReady(instanceapi.RolePrimary)
	a.exec(fmt.Sprintf("CREATE TABLE t (id int PRIMARY KEY); CREATE ROLE publisher LOGIN REPLICATION PASSWORD '%s'; "+
		"GRANT SELECT ON t TO publisher; CREATE PUBLICATION pub FOR TABLE t", publisherPassword))
	b.exec(malloryTrigger)
	sub = instanceapi.SubscriptionRequest{Name: "sub", Database: "app", Publications: []string{"pub"},
		ConnInfo: fmt.Sprintf("host=127.0.0.1 port=%d dbname=app user=publisher password=%s sslmode=disable", a.port, publisherPassword)}
	return a, b, sub
}

// inApp runs sql as the superuser in n's database app and returns its one
// value.
func inApp(t *testing.T, n *node, sql string) string {
	t.Helper()
	var out string
	n.withConn("postgres", superuserPassword, "app", func(conn *pgx.Conn) error {
		return conn.QueryRow(context.Background(), sql).Scan(&out)
	})
	return out
}

// TestSubscriptionRefusedBefore16: on PostgreSQL 13 to 15 a subscription's
// apply runs as its owner, a superuser, so mallory's trigger would run as
// superuser. The manager refuses it (422, naming the version and why) and
// creates nothing: no subscription, no slot on the publisher.
func TestSubscriptionRefusedBefore16(t *testing.T) {
	if major, _ := strconv.Atoi(filepath.Base(filepath.Dir(pgBinDir))); major >= 16 {
		t.Skipf("TUSK_PG_BINDIR %s is PostgreSQL 16 or later: the refusal is for 13 to 15", pgBinDir)
	}
	a, b, sub := startSubscriptionAttack(t, "runas15", "")
	code, msg := applyFails(b, instanceapi.PathSQLSubscriptions, sub)
	for _, want := range []string{"refused", "PostgreSQL 15", "superuser", "16 or later"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal %q does not say %q", msg, want)
		}
	}
	if code != http.StatusUnprocessableEntity || strings.Contains(msg, publisherPassword) {
		t.Errorf("a subscription on PostgreSQL 15: HTTP %d %q, want 422 without the password", code, msg)
	}
	if got := inApp(t, b, "SELECT count(*)::text FROM pg_subscription"); got != "0" {
		t.Errorf("%s subscriptions on B after the refusal, want none", got)
	}
	if slices.ContainsFunc(slots(t, a).Slots, func(s instanceapi.Slot) bool { return s.Name == "sub" }) {
		t.Errorf("slot sub was created on A although the subscription was refused")
	}
	a.exec("INSERT INTO t VALUES (1)")
	if got := inApp(t, b, "SELECT rolsuper::text FROM pg_roles WHERE rolname = 'mallory'"); got != "false" {
		t.Errorf("mallory is a superuser (%s): the apply ran her trigger as superuser", got)
	}
	// Dropping stays possible: it is how a subscription made before the
	// refusal goes away.
	sub.Ensure = instanceapi.EnsureAbsent
	var res instanceapi.ApplyResult
	b.command(http.MethodPut, instanceapi.PathSQLSubscriptions, sub, &res)
	if res.Statements != 0 || res.Exists {
		t.Errorf("dropping the refused subscription: %+v, want nothing to do", res)
	}
}

// TestSubscriptionAppliesAsTableOwner: on PostgreSQL 16 and later the
// subscription is created with run_as_owner = false, so mallory's trigger
// runs as mallory, who stays no superuser; a subscription switched to
// run_as_owner = true behind Tusk's back is switched back by the next apply.
func TestSubscriptionAppliesAsTableOwner(t *testing.T) {
	a, b, sub := startSubscriptionAttack(t, "runas17", testenv.RequirePostgres16(t))
	applyTwice(t, b, instanceapi.PathSQLSubscriptions, sub, "created subscription sub to publication pub")
	if got := inApp(t, b, "SELECT subrunasowner::text FROM pg_subscription WHERE subname = 'sub'"); got != "false" {
		t.Errorf("run_as_owner = %s, want false", got)
	}
	a.exec("INSERT INTO t VALUES (1)")
	b.waitIDs(1)
	if got := inApp(t, b, "SELECT string_agg(who || ' ' || escalation, ', ') FROM applied_as"); got != "mallory denied" {
		t.Errorf("mallory's trigger ran as %q, want \"mallory denied\" (the table's owner, no superuser)", got)
	}
	if got := inApp(t, b, "SELECT rolsuper::text FROM pg_roles WHERE rolname = 'mallory'"); got != "false" {
		t.Errorf("mallory is a superuser (%s): the apply ran her trigger as superuser", got)
	}

	b.exec("ALTER SUBSCRIPTION sub SET (run_as_owner = true)")
	applyTwice(t, b, instanceapi.PathSQLSubscriptions, sub, "made subscription sub apply as each table's owner (run_as_owner = false)")
	if got := inApp(t, b, "SELECT subrunasowner::text FROM pg_subscription WHERE subname = 'sub'"); got != "false" {
		t.Errorf("run_as_owner = %s after the apply, want false", got)
	}
	a.exec("INSERT INTO t VALUES (2)")
	b.waitIDs(1, 2)
	if got := inApp(t, b, "SELECT string_agg(DISTINCT who || ' ' || escalation, ', ') FROM applied_as"); got != "mallory denied" {
		t.Errorf("after the switch back, mallory's trigger ran as %q, want \"mallory denied\"", got)
	}
	sub.Ensure = instanceapi.EnsureAbsent
	applyTwice(t, b, instanceapi.PathSQLSubscriptions, sub, "dropped subscription sub")
}
