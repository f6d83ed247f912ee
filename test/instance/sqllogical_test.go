//go:build integration

package instance

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/testenv"
)

// publisherPassword is the publisher role's, in the subscription's
// connection string: no log of either node may show it.
const publisherPassword = "pub-Zq9-s3cret"

// fakeCA is a PEM block the manager only writes to a file: the test's
// connections use no TLS, so PostgreSQL never reads it.
const fakeCA = "-----BEGIN CERTIFICATE-----\nTUlJQg==\n-----END CERTIFICATE-----\n"

// TestManagedLogicalReplication runs declarative logical replication
// between two independent primaries: a publication on A and a subscription
// on B through the managers' API, rows flowing from A to B, the same
// requests again changing nothing, changes to the table list and to
// ENABLE, the slot on A reported and gone with the subscription, a drop
// refused while the publisher refuses the connection, and a replica
// refusing with 409. B logs every statement; neither node may log the
// publisher's password.
func TestManagedLogicalReplication(t *testing.T) {
	logEverything := &instanceapi.Config{Parameters: map[string]string{"log_statement": "all"}}
	a := startNode(t, "logical-a", nodeOptions{role: instanceapi.RolePrimary})
	// B subscribes: PostgreSQL 16 or later, as Tusk refuses subscriptions
	// before (TestSubscriptionRefusedBefore16).
	b := startNode(t, "logical-b", nodeOptions{role: instanceapi.RolePrimary, config: logEverything, binDir: testenv.RequirePostgres16(t)})
	a.waitReady(instanceapi.RolePrimary)
	b.waitReady(instanceapi.RolePrimary)
	for _, n := range []*node{a, b} {
		n.exec("CREATE TABLE t (id int PRIMARY KEY); CREATE TABLE u (id int PRIMARY KEY)")
	}
	a.exec(fmt.Sprintf("SET log_statement = 'none'; CREATE ROLE publisher LOGIN REPLICATION PASSWORD '%s'; "+
		"GRANT SELECT ON t, u TO publisher", publisherPassword))
	a.exec("INSERT INTO t VALUES (1), (2)")

	pub := instanceapi.PublicationRequest{Name: "pub", Database: "app", Tables: []string{"t", "nope"}}
	if code, msg := applyFails(a, instanceapi.PathSQLPublications, pub); code != http.StatusUnprocessableEntity || !strings.Contains(msg, "public.nope") {
		t.Errorf("a publication of a missing table: HTTP %d %s, want 422 naming public.nope", code, msg)
	}
	pub.Tables = []string{"t"}
	applyTwice(t, a, instanceapi.PathSQLPublications, pub, "created publication pub for public.t")
	if !strings.Contains(a.logs(), "Creating publication pub") {
		t.Errorf("A did not log creating the publication")
	}

	checkPartitionedAndAllTables(t, a)

	sub := instanceapi.SubscriptionRequest{Name: "sub", Database: "app", Publications: []string{"pub"}, CAPEM: fakeCA,
		ConnInfo: fmt.Sprintf("host=127.0.0.1 port=%d dbname=app user=publisher password=%s sslmode=disable sslrootcert=$CA",
			a.port, publisherPassword)}
	applyTwice(t, b, instanceapi.PathSQLSubscriptions, sub, "created subscription sub to publication pub")
	b.waitIDs(1, 2)
	a.exec("INSERT INTO t VALUES (3)")
	b.waitIDs(1, 2, 3)
	checkSubscriptionCA(t, b)
	waitSlot(t, a, "sub", func(s *instanceapi.Slot) error {
		if s == nil || !s.Active || s.Database != "app" {
			return fmt.Errorf("slot sub is %+v, want active in app", s)
		}
		return nil
	})

	pub.Tables = []string{"t", "public.u"}
	applyTwice(t, a, instanceapi.PathSQLPublications, pub, "set the tables of publication pub to public.t, public.u")
	off := false
	sub.Enabled = &off
	applyTwice(t, b, instanceapi.PathSQLSubscriptions, sub, "disabled subscription sub")
	checkRetainedGrows(t, a, b)
	sub.Enabled = nil
	applyTwice(t, b, instanceapi.PathSQLSubscriptions, sub, "enabled subscription sub")
	b.waitIDs(1, 2, 3, 4)

	checkDropRefusedWhileUnreachable(t, a, b, sub)
	sub.Ensure = instanceapi.EnsureAbsent
	applyTwice(t, b, instanceapi.PathSQLSubscriptions, sub, "dropped subscription sub")
	if st := slots(t, a); slices.ContainsFunc(st.Slots, func(s instanceapi.Slot) bool { return s.Name == "sub" }) {
		t.Errorf("slot sub is still on A after the drop: %+v", st.Slots)
	}
	pub.Ensure = instanceapi.EnsureAbsent
	applyTwice(t, a, instanceapi.PathSQLPublications, pub, "dropped publication pub")

	for _, n := range []*node{a, b} {
		if strings.Contains(n.logs(), publisherPassword) {
			t.Errorf("%s logged the publisher's password", n.name)
		}
	}
	checkReplicaRefuses(t, a)
}

// checkPartitionedAndAllTables: a partitioned table's publication matches
// the request (the catalog lists its partitions in pg_publication_tables),
// and a switch to all tables drops and creates it in one go.
func checkPartitionedAndAllTables(t *testing.T, a *node) {
	t.Helper()
	a.exec("CREATE TABLE p (id int) PARTITION BY RANGE (id); CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (100)")
	pub := instanceapi.PublicationRequest{Name: "pubp", Database: "app", Tables: []string{"p"}}
	applyTwice(t, a, instanceapi.PathSQLPublications, pub, "created publication pubp for public.p")
	pub.Tables, pub.AllTables = nil, true
	var res instanceapi.ApplyResult
	a.command(http.MethodPut, instanceapi.PathSQLPublications, pub, &res)
	if want := []string{"dropped publication pubp", "created publication pubp for all tables"}; !slices.Equal(res.Changes, want) || res.Statements != 2 {
		t.Errorf("from a list to all tables: %+v, want %q", res, want)
	}
	a.command(http.MethodPut, instanceapi.PathSQLPublications, pub, &res)
	if res.Statements != 0 {
		t.Errorf("all tables again: %+v, want no change", res)
	}
	pub.Ensure = instanceapi.EnsureAbsent
	applyTwice(t, a, instanceapi.PathSQLPublications, pub, "dropped publication pubp")
}

// applyTwice applies req, which must change one thing (want), then again,
// which must change nothing.
func applyTwice(t *testing.T, n *node, path string, req any, want string) {
	t.Helper()
	var first, second instanceapi.ApplyResult
	n.command(http.MethodPut, path, req, &first)
	if first.Statements != 1 || !slices.Contains(first.Changes, want) {
		t.Errorf("%s: PUT %s: %+v, want one statement: %q", n.name, path, first, want)
	}
	n.command(http.MethodPut, path, req, &second)
	if second.Statements != 0 || len(second.Changes) != 0 || second.Exists != first.Exists {
		t.Errorf("%s: PUT %s again: %+v, want no change", n.name, path, second)
	}
}

// applyFails applies req, which must fail, and returns the status code and
// the error.
func applyFails(n *node, path string, req any) (int, string) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var reply struct{ Error string }
	code, err := n.call(ctx, http.MethodPut, path, req, &reply)
	if err == nil {
		n.t.Errorf("%s: PUT %s succeeded, want an error", n.name, path)
	}
	return code, reply.Error
}

func slots(t *testing.T, n *node) instanceapi.SlotsStatus {
	t.Helper()
	var st instanceapi.SlotsStatus
	n.command(http.MethodGet, instanceapi.PathSQLSlots, nil, &st)
	return st
}

// waitSlot waits until check passes on n's slot name (nil when none).
func waitSlot(t *testing.T, n *node, name string, check func(*instanceapi.Slot) error) instanceapi.Slot {
	t.Helper()
	var found instanceapi.Slot
	testenv.Eventually(t, waitTimeout, func(context.Context) error {
		for _, s := range slots(t, n).Slots {
			if s.Name == name {
				found = s
				return check(&s)
			}
		}
		return check(nil)
	})
	return found
}

// checkSubscriptionCA checks the CA file in B's run directory and its
// path in the catalog in place of $CA.
func checkSubscriptionCA(t *testing.T, b *node) {
	t.Helper()
	path := filepath.Join(b.dir, "run", "subscriptions", "app.sub.ca.crt")
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the subscription's CA file: %v, %v; want mode 0600", info, err)
	}
	b.withConn("postgres", superuserPassword, "app", func(conn *pgx.Conn) error {
		var conninfo string
		if err := conn.QueryRow(context.Background(), "SELECT subconninfo FROM pg_subscription WHERE subname = 'sub'").Scan(&conninfo); err != nil {
			return err
		}
		if !strings.Contains(conninfo, "sslrootcert="+path) {
			t.Errorf("the subscription's sslrootcert is not %s", path)
		}
		return nil
	})
}

// checkRetainedGrows checks the disabled subscription's slot on A holds
// back the WAL written meanwhile, and B gets none of it.
func checkRetainedGrows(t *testing.T, a, b *node) {
	t.Helper()
	before := waitSlot(t, a, "sub", func(s *instanceapi.Slot) error {
		if s == nil || s.Active {
			return fmt.Errorf("slot sub is %+v, want inactive", s)
		}
		return nil
	})
	a.exec("INSERT INTO t VALUES (4); CREATE TABLE filler AS SELECT g FROM generate_series(1, 10000) g")
	waitSlot(t, a, "sub", func(s *instanceapi.Slot) error {
		if s == nil || s.RetainedBytes <= before.RetainedBytes {
			return fmt.Errorf("slot sub is %+v, want more retained than %d bytes", s, before.RetainedBytes)
		}
		return nil
	})
	if st := slots(t, a); st.MaxSlotWALKeepBytes != -1 {
		t.Errorf("max_slot_wal_keep_size = %d bytes, want -1 (PostgreSQL's default, unlimited)", st.MaxSlotWALKeepBytes)
	}
	if ids, err := b.ids(context.Background()); err != nil || len(ids) != 3 {
		t.Errorf("B has rows %v (%v) while the subscription is disabled, want 3", ids, err)
	}
}

// checkDropRefusedWhileUnreachable: while A refuses the publisher role's
// connections, B refuses to drop the subscription (its slot on A would be
// left behind), says how to proceed, and shows no password.
func checkDropRefusedWhileUnreachable(t *testing.T, a, b *node, sub instanceapi.SubscriptionRequest) {
	t.Helper()
	a.exec("ALTER ROLE publisher NOLOGIN")
	sub.Ensure = instanceapi.EnsureAbsent
	code, msg := applyFails(b, instanceapi.PathSQLSubscriptions, sub)
	if code != http.StatusUnprocessableEntity || !strings.Contains(msg, "slot_name = NONE") || strings.Contains(msg, publisherPassword) {
		t.Errorf("dropping while the publisher refuses: HTTP %d %q, want 422 saying how to proceed, without the password", code, msg)
	}
	a.exec("ALTER ROLE publisher LOGIN")
	if !slices.ContainsFunc(slots(t, a).Slots, func(s instanceapi.Slot) bool { return s.Name == "sub" }) {
		t.Errorf("slot sub is gone from A although the drop was refused")
	}
}

// checkReplicaRefuses: a replica of A answers 409.
func checkReplicaRefuses(t *testing.T, a *node) {
	t.Helper()
	replica := startNode(t, "logical-c", nodeOptions{role: instanceapi.RoleReplica, upstreamPort: a.port})
	replica.waitReady(instanceapi.RoleReplica)
	pub := instanceapi.PublicationRequest{Name: "pub2", Database: "app", AllTables: true}
	if code, _ := applyFails(replica, instanceapi.PathSQLPublications, pub); code != http.StatusConflict {
		t.Errorf("a publication on a replica: HTTP %d, want 409", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if code, _ := replica.call(ctx, http.MethodGet, instanceapi.PathSQLSlots, nil, nil); code != http.StatusConflict {
		t.Errorf("the slots of a replica: HTTP %d, want 409", code)
	}
}
