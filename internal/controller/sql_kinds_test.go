package controller

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

func TestRoleRequest(t *testing.T) {
	until := metav1.NewTime(time.Date(2027, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600)))
	spec := tuskv1alpha1.PostgresRoleSpec{
		Cluster: corev1.LocalObjectReference{Name: "pg"}, Name: "app", Ensure: tuskv1alpha1.EnsurePresent,
		Login: true, CreateDB: true, Replication: true, Inherit: ptr.To(false), ConnectionLimit: ptr.To[int32](5),
		ValidUntil: &until, InRoles: []string{"readers"}, Parameters: map[string]string{"work_mem": "8MB"},
	}
	got := roleRequest(spec, ptr.To("secret"))
	want := instanceapi.RoleRequest{
		Name: "app", Ensure: instanceapi.EnsurePresent, Login: true, CreateDB: true, Replication: true,
		Inherit: ptr.To(false), ConnectionLimit: ptr.To[int32](5), ValidUntil: "2027-01-02T02:04:05Z",
		InRoles: []string{"readers"}, Parameters: map[string]string{"work_mem": "8MB"}, Password: ptr.To("secret"),
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("role request\n  %+v\nwant\n  %+v", got, want)
	}
	spec.Ensure = tuskv1alpha1.EnsureAbsent
	spec.ReassignOwnedTo = "heir"
	if got := roleRequest(spec, nil); got.Ensure != instanceapi.EnsureAbsent || got.ReassignOwnedTo != "heir" || got.Password != nil {
		t.Errorf("absent role request %+v: want absent, reassigned to heir, no password", got)
	}
}

func TestDatabaseRequest(t *testing.T) {
	spec := tuskv1alpha1.PostgresDatabaseSpec{
		Name: "shop", Owner: "app", Encoding: "UTF8", Locale: "C", Template: "template0", ConnectionLimit: ptr.To[int32](10), ForceDrop: true,
		Extensions: []tuskv1alpha1.ExtensionSpec{{Name: "hstore", Version: "1.8", Schema: "ext"}, {Name: "citext", Ensure: tuskv1alpha1.EnsureAbsent}},
		Schemas:    []tuskv1alpha1.SchemaSpec{{Name: "ext", Owner: "app"}},
	}
	want := instanceapi.DatabaseRequest{
		Name: "shop", Ensure: instanceapi.EnsurePresent, Owner: "app", Encoding: "UTF8", Locale: "C", Template: "template0",
		ConnectionLimit: ptr.To[int32](10), ForceDrop: true,
		Extensions: []instanceapi.ExtensionRequest{{Name: "hstore", Ensure: instanceapi.EnsurePresent, Version: "1.8", Schema: "ext"},
			{Name: "citext", Ensure: instanceapi.EnsureAbsent}},
		Schemas: []instanceapi.SchemaRequest{{Name: "ext", Ensure: instanceapi.EnsurePresent, Owner: "app"}},
	}
	if got := databaseRequest(spec); !reflect.DeepEqual(want, got) {
		t.Errorf("database request\n  %+v\nwant\n  %+v", got, want)
	}
	// Whether untrusted extensions may be installed is the cluster's to say.
	c := &tuskv1alpha1.PostgresCluster{Spec: tuskv1alpha1.PostgresClusterSpec{AllowUntrustedExtensions: true}}
	got, err := databaseKind().request(context.Background(), nil, &tuskv1alpha1.PostgresDatabase{Spec: spec}, c)
	if req, ok := got.(instanceapi.DatabaseRequest); err != nil || !ok || !req.AllowUntrustedExtensions {
		t.Errorf("the request for a cluster that allows untrusted extensions: %+v, %v", got, err)
	}
}

// TestClusterConnInfo: every value is quoted, so a password with spaces,
// quotes or backslashes cannot add a setting to the connection string.
func TestClusterConnInfo(t *testing.T) {
	c := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: "pub", Namespace: "shop"}}
	got := clusterConnInfo(c, "orders", "replicator", `it's a \ sslmode=disable`, "orders_sub")
	want := `host='pub-rw.shop.svc' port='5432' dbname='orders' user='replicator' password='it\'s a \\ sslmode=disable' ` +
		`sslmode='verify-full' sslrootcert='$CA' application_name='orders_sub'`
	if got != want {
		t.Errorf("conninfo\n  %s\nwant\n  %s", got, want)
	}
}

func TestSlotLagging(t *testing.T) {
	slots := instanceapi.SlotsStatus{Slots: []instanceapi.Slot{
		{Name: "near", RetainedBytes: 1 << 20, WALStatus: "reserved"},
		{Name: "far", RetainedBytes: 3 << 30, WALStatus: "extended"},
		{Name: "gone", RetainedBytes: 0, WALStatus: "lost"},
	}}
	cases := []struct {
		slot   string
		status metav1.ConditionStatus
		reason string
		says   string
	}{
		{"near", metav1.ConditionFalse, tuskv1alpha1.ReasonSlotWithinLimit, "holds back 1Mi of WAL"},
		{"far", metav1.ConditionTrue, tuskv1alpha1.ReasonSlotLagging, "holds back 3Gi of WAL on the publisher, more than 1Gi"},
		{"gone", metav1.ConditionTrue, tuskv1alpha1.ReasonSlotLagging, "removed WAL the slot gone needs"},
		{"missing", metav1.ConditionUnknown, tuskv1alpha1.ReasonSlotUnknown, "has no slot missing"},
	}
	for _, tc := range cases {
		status, reason, message := slotLagging(slots, tc.slot, 1<<30)
		if status != tc.status || reason != tc.reason || !strings.Contains(message, tc.says) {
			t.Errorf("%s: %s %s %q; want %s %s containing %q", tc.slot, status, reason, message, tc.status, tc.reason, tc.says)
		}
	}
}

// TestSuperuserAllowed: a role that could read the server's files over the
// network needs the cluster's spec.superuserAccess.
func TestSuperuserAllowed(t *testing.T) {
	closed := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: "pg"}}
	open := closed.DeepCopy()
	open.Spec.SuperuserAccess = true
	closed15, closed16 := closed.DeepCopy(), closed.DeepCopy()
	closed15.Status.PostgresMajor, closed16.Status.PostgresMajor = 15, 16
	open15 := closed15.DeepCopy()
	open15.Spec.SuperuserAccess = true
	cases := []struct {
		name string
		spec tuskv1alpha1.PostgresRoleSpec
		c    *tuskv1alpha1.PostgresCluster
		want string // "" means allowed
	}{
		{"an ordinary login", tuskv1alpha1.PostgresRoleSpec{Name: "app", Login: true, InRoles: []string{"pg_read_all_data"}}, closed, ""},
		{"a superuser login", tuskv1alpha1.PostgresRoleSpec{Name: "dba", Login: true, Superuser: true}, closed, "would be a superuser that logs in over the network"},
		{"a superuser login, allowed", tuskv1alpha1.PostgresRoleSpec{Name: "dba", Login: true, Superuser: true}, open, ""},
		{"a superuser group", tuskv1alpha1.PostgresRoleSpec{Name: "dbas", Superuser: true}, closed, ""},
		{"a superuser dropped", tuskv1alpha1.PostgresRoleSpec{Name: "dba", Login: true, Superuser: true, Ensure: tuskv1alpha1.EnsureAbsent}, closed, ""},
		{"a role creator on 15", tuskv1alpha1.PostgresRoleSpec{Name: "hr", Login: true, CreateRole: true}, closed15,
			"would be a role with CREATEROLE (which on PostgreSQL 15 grants itself pg_execute_server_program) that logs in"},
		{"a role creator on 16", tuskv1alpha1.PostgresRoleSpec{Name: "hr", Login: true, CreateRole: true}, closed16, ""},
		{"a role creator, major not known yet", tuskv1alpha1.PostgresRoleSpec{Name: "hr", Login: true, CreateRole: true}, closed, ""},
		{"a role creator on 15, allowed", tuskv1alpha1.PostgresRoleSpec{Name: "hr", Login: true, CreateRole: true}, open15, ""},
		{"a program runner", tuskv1alpha1.PostgresRoleSpec{Name: "etl", Login: true, InRoles: []string{"pg_execute_server_program"}}, closed,
			"would be a member of pg_execute_server_program"},
	}
	for _, tc := range cases {
		err := superuserAllowed(tc.spec, tc.c)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
