//go:build integration

package crd

import (
	"context"
	"testing"
)

const (
	baseRole = `
apiVersion: tusk.dev/v1alpha1
kind: PostgresRole
metadata: {name: app-role}
spec:
  cluster: {name: pg}
  name: app_user
  login: true
`
	baseDatabase = `
apiVersion: tusk.dev/v1alpha1
kind: PostgresDatabase
metadata: {name: shop}
spec:
  cluster: {name: pg}
  name: shop
  owner: app_user
`
	basePublication = `
apiVersion: tusk.dev/v1alpha1
kind: PostgresPublication
metadata: {name: orders}
spec:
  cluster: {name: pg}
  name: orders
  database: shop
  tables: [orders]
`
	baseSubscription = `
apiVersion: tusk.dev/v1alpha1
kind: PostgresSubscription
metadata: {name: orders}
spec:
  cluster: {name: pg-b}
  name: orders_sub
  database: shop
  publications: [orders]
  source: {cluster: {name: pg}, roleSecret: {name: publisher}}
`
)

// reservedRole is the refusal of a role name that is Tusk's.
const reservedRole = "postgres and the names starting with tusk_ or tusk- are Tusk's own"

// TestInvalidSQLObjectsAreRejectedOnCreate is the table of specs the API
// server refuses, with the message a user reads.
func TestInvalidSQLObjectsAreRejectedOnCreate(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name, base, overlay, want string
	}{
		{"Tusk's superuser", baseRole, `spec: {name: postgres}`, reservedRole},
		{"Tusk's replication role", baseRole, `spec: {name: tusk_replication}`, reservedRole},
		{"Tusk's monitoring role", baseRole, `spec: {name: tusk_monitor}`, reservedRole},
		{"Tusk's probe role", baseRole, `spec: {name: tusk_probe}`, reservedRole},
		{"Tusk's certificate login group", baseRole, `spec: {name: tusk_cert_login}`, reservedRole},
		{"the operator's certificate name", baseRole, `spec: {name: tusk-operator}`, reservedRole},
		{"a future Tusk role", baseRole, `spec: {name: tusk_anything}`, reservedRole},
		{"a future Tusk name", baseRole, `spec: {name: tusk-anything}`, reservedRole},
		{"a predefined role", baseRole, `spec: {name: pg_monitor}`, "role names starting with pg_ are PostgreSQL's own"},
		{"a role name with a quote", baseRole, `spec: {name: "a\"b"}`, "spec.name in body should match"},
		{"a role name too long", baseRole, `spec: {name: ` + longName + `}`, "spec.name: Too long"},
		{"unknown ensure", baseRole, `spec: {ensure: gone}`, `Unsupported value: "gone"`},
		{"connection limit below -1", baseRole, `spec: {connectionLimit: -2}`, "should be greater than or equal to -1"},
		{"member of itself", baseRole, `spec: {inRoles: [app_user]}`, "spec.inRoles cannot name the role itself"},
		{"reassigned to itself", baseRole, `spec: {ensure: absent, reassignOwnedTo: app_user}`, "spec.reassignOwnedTo must name another role"},
		{"no cluster", baseRole, `spec: {cluster: null}`, "spec.cluster: Required value"},
		{"the postgres database", baseDatabase, `spec: {name: postgres}`, "postgres, template0 and template1 are PostgreSQL's own databases"},
		{"template1", baseDatabase, `spec: {name: template1}`, "postgres, template0 and template1 are PostgreSQL's own databases"},
		{"no owner", baseDatabase, `spec: {owner: null}`, "spec.owner: Required value"},
		{"unknown reclaim policy", baseDatabase, `spec: {reclaimPolicy: archive}`, `Unsupported value: "archive"`},
		{"the public schema", baseDatabase, `spec: {schemas: [{name: public}]}`, "public and pg_ schemas cannot be managed"},
		{"a pg_ schema", baseDatabase, `spec: {schemas: [{name: pg_temp}]}`, "public and pg_ schemas cannot be managed"},
		{"an extension in pg_catalog", baseDatabase, `spec: {extensions: [{name: citext, schema: pg_catalog}]}`, "an extension cannot go to a pg_ schema or information_schema"},
		{"an extension in information_schema", baseDatabase, `spec: {extensions: [{name: citext, schema: information_schema}]}`, "an extension cannot go to a pg_ schema or information_schema"},
		{"an extension twice", baseDatabase, `spec: {extensions: [{name: hstore}, {name: hstore}]}`, "Duplicate value"},
		{"both all tables and a list", basePublication, `spec: {allTables: true}`, "set either allTables or a list of tables, not both"},
		{"neither all tables nor a list", basePublication, `spec: {tables: null}`, "set either allTables or a list of tables, not both"},
		{"no source", baseSubscription, `spec: {source: {cluster: null, roleSecret: null}}`, "set either source.cluster or source.connectionSecret"},
		{"two sources", baseSubscription, `spec: {source: {connectionSecret: {name: s, key: conninfo}}}`, "set either source.cluster or source.connectionSecret"},
		{"a Tusk source without a role", baseSubscription, `spec: {source: {roleSecret: null}}`, "source.cluster needs source.roleSecret"},
		{"no publications", baseSubscription, `spec: {publications: []}`, "spec.publications: Invalid value"},
		{"a slot name in capitals", baseSubscription, `spec: {name: Orders}`, "spec.name in body should match"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := object(t, tc.base, tc.overlay)
			obj.SetNamespace(ns)
			expectRejected(t, env.Client.Create(context.Background(), obj), tc.want)
		})
	}
}

const longName = "a234567890123456789012345678901234567890123456789012345678901234"

// TestSQLObjectUpdates: what may change after creation and what may not.
func TestSQLObjectUpdates(t *testing.T) {
	cases := []struct {
		name, base, patch, want string // want "" means accepted
	}{
		{"role attributes change", baseRole, `spec: {createdb: true, connectionLimit: 5, parameters: {work_mem: 8MB}}`, ""},
		{"role renamed", baseRole, `spec: {name: other}`, "spec.name cannot change"},
		{"role moved to another cluster", baseRole, `spec: {cluster: {name: other}}`, "spec.cluster cannot change"},
		{"database owner changes", baseDatabase, `spec: {owner: other, connectionLimit: 10}`, ""},
		{"database renamed", baseDatabase, `spec: {name: other}`, "spec.name cannot change"},
		{"encoding set after creation", baseDatabase, `spec: {encoding: LATIN1}`, "spec.encoding applies at creation only and cannot change"},
		{"locale set after creation", baseDatabase, `spec: {locale: C}`, "spec.locale applies at creation only and cannot change"},
		{"template set after creation", baseDatabase, `spec: {template: template0}`, "spec.template applies at creation only and cannot change"},
		{"extension added", baseDatabase, `spec: {extensions: [{name: hstore, schema: public}]}`, ""},
		{"publication tables change", basePublication, `spec: {tables: [orders, customers]}`, ""},
		{"publication moved to another database", basePublication, `spec: {database: other}`, "cannot change: create a new PostgresPublication instead"},
		{"subscription disabled", baseSubscription, `spec: {enabled: false}`, ""},
		{"subscription renamed", baseSubscription, `spec: {name: other}`, "cannot change: create a new PostgresSubscription instead"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := object(t, tc.base, `{}`)
			obj.SetNamespace(newNamespace(t))
			if err := env.Client.Create(context.Background(), obj); err != nil {
				t.Fatalf("creating: %v", err)
			}
			err := mergePatchObject(obj, tc.patch)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			expectRejected(t, err, tc.want)
		})
	}
}
