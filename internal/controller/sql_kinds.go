package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

type runtimeObject = runtime.Object

// sqlKind is what the SQLReconciler needs to know of one kind of
// declarative SQL object: how to read it, which request applies it, and
// which one drops it.
type sqlKind struct {
	name      string // the Kind, for messages
	path      string // the instance manager's path
	newObject func() client.Object
	newList   func() client.ObjectList
	status    func(client.Object) *tuskv1alpha1.SQLObjectStatus
	cluster   func(client.Object) string
	sqlName   func(client.Object) string
	// sourceCluster is another cluster the object reads from (a
	// subscription's publisher), or "".
	sourceCluster func(client.Object) string
	// secrets are the Secrets the object names.
	secrets func(client.Object) []string
	// dropsOnDelete says whether deleting the object drops what it made.
	dropsOnDelete func(client.Object) bool
	request       func(context.Context, *SQLReconciler, client.Object, *tuskv1alpha1.PostgresCluster) (any, error)
	drop          func(context.Context, *SQLReconciler, client.Object, *tuskv1alpha1.PostgresCluster) (any, error)
	// observe, when set, looks at what follows an apply (a subscription's
	// slot on its publisher) and sets the object's other conditions.
	observe func(context.Context, *SQLReconciler, client.Object, *tuskv1alpha1.PostgresCluster)
	// afterApply, when set, does what must wait for the apply's outcome
	// (a role's client certificate, once the role is what its spec says)
	// and may change that outcome's condition.
	afterApply func(context.Context, *SQLReconciler, client.Object, *tuskv1alpha1.PostgresCluster, *sqlApply) error
}

// sqlSpecError is what the operator refuses before asking the primary:
// a Secret or cluster the spec names that cannot be used
// (ReasonSourceInvalid), or a spec the cluster does not allow
// (ReasonApplyRefused). The object waits, with a condition saying why.
type sqlSpecError struct{ reason, msg string }

func (e *sqlSpecError) Error() string { return e.msg }

func sourceErrorf(format string, args ...any) error {
	return &sqlSpecError{reason: tuskv1alpha1.ReasonSourceInvalid, msg: fmt.Sprintf(format, args...)}
}

func refusedErrorf(format string, args ...any) error {
	return &sqlSpecError{reason: tuskv1alpha1.ReasonApplyRefused, msg: fmt.Sprintf(format, args...)}
}

func noSourceCluster(client.Object) string { return "" }

// sqlKinds are the four kinds, each with its SQLReconciler.
func sqlKinds() []sqlKind {
	return []sqlKind{roleKind(), databaseKind(), publicationKind(), subscriptionKind()}
}

func roleKind() sqlKind {
	role := func(o client.Object) *tuskv1alpha1.PostgresRole { return o.(*tuskv1alpha1.PostgresRole) }
	return sqlKind{
		name: "PostgresRole", path: instanceapi.PathSQLRoles,
		newObject:     func() client.Object { return &tuskv1alpha1.PostgresRole{} },
		newList:       func() client.ObjectList { return &tuskv1alpha1.PostgresRoleList{} },
		status:        func(o client.Object) *tuskv1alpha1.SQLObjectStatus { return &role(o).Status },
		cluster:       func(o client.Object) string { return role(o).Spec.Cluster.Name },
		sqlName:       func(o client.Object) string { return role(o).Spec.Name },
		sourceCluster: noSourceCluster,
		secrets: func(o client.Object) []string {
			if s := role(o).Spec.PasswordSecret; s != nil {
				return []string{s.Name}
			}
			return nil
		},
		// Deleting a PostgresRole leaves the role: ensure: absent drops it.
		dropsOnDelete: func(client.Object) bool { return false },
		afterApply: func(ctx context.Context, r *SQLReconciler, o client.Object, c *tuskv1alpha1.PostgresCluster, outcome *sqlApply) error {
			return r.issueRoleCertificateWhenApplied(ctx, role(o), c, outcome)
		},
		request: func(ctx context.Context, r *SQLReconciler, o client.Object, c *tuskv1alpha1.PostgresCluster) (any, error) {
			if err := superuserAllowed(role(o).Spec, c); err != nil {
				return nil, err
			}
			if err := r.removeUnwantedRoleCertificate(ctx, role(o)); err != nil {
				return nil, err
			}
			var password *string
			if s := role(o).Spec.PasswordSecret; s != nil && role(o).Spec.Ensure != tuskv1alpha1.EnsureAbsent {
				p, err := r.secretKey(ctx, o.GetNamespace(), s.Name, "password")
				if err != nil {
					return nil, err
				}
				password = &p
			}
			return roleRequest(role(o).Spec, password), nil
		},
	}
}

// superuserAllowed refuses, on a cluster whose spec.superuserAccess keeps
// superuser rights from every role that logs in, a role that logs in and
// asks for them in its own spec: SUPERUSER, a membership that reaches the
// server's files or programs, or CREATEROLE where it grants itself such a
// membership (below PostgreSQL 16). A database superuser reads any file
// the server can (its key, the pod's token, the object store's keys).
// Rights reached through other roles' memberships are the catalog's to
// tell: the instance manager refuses those where it applies the role.
func superuserAllowed(spec tuskv1alpha1.PostgresRoleSpec, c *tuskv1alpha1.PostgresCluster) error {
	if !spec.Login || spec.Ensure == tuskv1alpha1.EnsureAbsent || c.Spec.SuperuserAccess {
		return nil
	}
	why := ""
	if major := int(c.Status.PostgresMajor); spec.CreateRole && major > 0 && instanceapi.CreateRoleGrantsAnyRole(major) {
		why = fmt.Sprintf("a role with CREATEROLE (which on PostgreSQL %d grants itself pg_execute_server_program)", major)
	}
	if spec.Superuser {
		why = "a superuser"
	}
	for _, r := range spec.InRoles {
		if slices.Contains(instanceapi.ServerFileRoles, r) {
			why = "a member of " + r
		}
	}
	if why == "" {
		return nil
	}
	return refusedErrorf("role %s would be %s that logs in over the network, and the PostgresCluster %s keeps the server's files "+
		"off the network (spec.superuserAccess is false): set it to true, or drop login", spec.Name, why, c.Name)
}

// roleRequest is the instance manager's request for a role's spec.
func roleRequest(spec tuskv1alpha1.PostgresRoleSpec, password *string) instanceapi.RoleRequest {
	req := instanceapi.RoleRequest{
		Name: spec.Name, Ensure: ensure(spec.Ensure),
		Login: spec.Login, Superuser: spec.Superuser, CreateDB: spec.CreateDB, CreateRole: spec.CreateRole,
		Replication: spec.Replication, BypassRLS: spec.BypassRLS, Inherit: spec.Inherit,
		ConnectionLimit: spec.ConnectionLimit, InRoles: spec.InRoles, Parameters: spec.Parameters,
		Password: password, ReassignOwnedTo: spec.ReassignOwnedTo, CertificateLogin: spec.ClientCertificate,
	}
	if spec.ValidUntil != nil {
		req.ValidUntil = spec.ValidUntil.UTC().Format(time.RFC3339)
	}
	return req
}

func ensure(e tuskv1alpha1.Ensure) instanceapi.Ensure {
	if e == tuskv1alpha1.EnsureAbsent {
		return instanceapi.EnsureAbsent
	}
	return instanceapi.EnsurePresent
}

func databaseKind() sqlKind {
	db := func(o client.Object) *tuskv1alpha1.PostgresDatabase { return o.(*tuskv1alpha1.PostgresDatabase) }
	return sqlKind{
		name: "PostgresDatabase", path: instanceapi.PathSQLDatabases,
		newObject:     func() client.Object { return &tuskv1alpha1.PostgresDatabase{} },
		newList:       func() client.ObjectList { return &tuskv1alpha1.PostgresDatabaseList{} },
		status:        func(o client.Object) *tuskv1alpha1.SQLObjectStatus { return &db(o).Status },
		cluster:       func(o client.Object) string { return db(o).Spec.Cluster.Name },
		sqlName:       func(o client.Object) string { return db(o).Spec.Name },
		sourceCluster: noSourceCluster,
		secrets:       func(client.Object) []string { return nil },
		dropsOnDelete: func(o client.Object) bool {
			return db(o).Spec.ReclaimPolicy == tuskv1alpha1.DatabaseReclaimDelete
		},
		request: func(_ context.Context, _ *SQLReconciler, o client.Object, c *tuskv1alpha1.PostgresCluster) (any, error) {
			req := databaseRequest(db(o).Spec)
			req.AllowUntrustedExtensions = c.Spec.AllowUntrustedExtensions
			return req, nil
		},
		drop: func(_ context.Context, _ *SQLReconciler, o client.Object, _ *tuskv1alpha1.PostgresCluster) (any, error) {
			req := databaseRequest(db(o).Spec)
			req.Ensure, req.Extensions, req.Schemas = instanceapi.EnsureAbsent, nil, nil
			return req, nil
		},
	}
}

// databaseRequest is the instance manager's request for a database's spec.
func databaseRequest(spec tuskv1alpha1.PostgresDatabaseSpec) instanceapi.DatabaseRequest {
	req := instanceapi.DatabaseRequest{
		Name: spec.Name, Ensure: ensure(spec.Ensure), Owner: spec.Owner,
		Encoding: spec.Encoding, Locale: spec.Locale, Template: spec.Template,
		ConnectionLimit: spec.ConnectionLimit, ForceDrop: spec.ForceDrop,
	}
	for _, e := range spec.Extensions {
		req.Extensions = append(req.Extensions, instanceapi.ExtensionRequest{Name: e.Name, Ensure: ensure(e.Ensure), Version: e.Version, Schema: e.Schema})
	}
	for _, s := range spec.Schemas {
		req.Schemas = append(req.Schemas, instanceapi.SchemaRequest{Name: s.Name, Ensure: ensure(s.Ensure), Owner: s.Owner})
	}
	return req
}

func publicationKind() sqlKind {
	pub := func(o client.Object) *tuskv1alpha1.PostgresPublication { return o.(*tuskv1alpha1.PostgresPublication) }
	request := func(o client.Object) instanceapi.PublicationRequest {
		s := pub(o).Spec
		return instanceapi.PublicationRequest{Name: s.Name, Database: s.Database, Ensure: instanceapi.EnsurePresent,
			AllTables: s.AllTables, Tables: s.Tables}
	}
	return sqlKind{
		name: "PostgresPublication", path: instanceapi.PathSQLPublications,
		newObject:     func() client.Object { return &tuskv1alpha1.PostgresPublication{} },
		newList:       func() client.ObjectList { return &tuskv1alpha1.PostgresPublicationList{} },
		status:        func(o client.Object) *tuskv1alpha1.SQLObjectStatus { return &pub(o).Status },
		cluster:       func(o client.Object) string { return pub(o).Spec.Cluster.Name },
		sqlName:       func(o client.Object) string { return pub(o).Spec.Database + "/" + pub(o).Spec.Name },
		sourceCluster: noSourceCluster,
		secrets:       func(client.Object) []string { return nil },
		dropsOnDelete: func(client.Object) bool { return true },
		request: func(_ context.Context, _ *SQLReconciler, o client.Object, _ *tuskv1alpha1.PostgresCluster) (any, error) {
			return request(o), nil
		},
		drop: func(_ context.Context, _ *SQLReconciler, o client.Object, _ *tuskv1alpha1.PostgresCluster) (any, error) {
			req := request(o)
			req.Ensure = instanceapi.EnsureAbsent
			return req, nil
		},
	}
}

// secretKey reads one key of a Secret the user named; a missing Secret or
// key is a source error.
func (r *SQLReconciler) secretKey(ctx context.Context, namespace, name, key string) (string, error) {
	data, err := r.secrets.data(ctx, namespace, name)
	if err != nil {
		return "", err
	}
	if data == nil {
		return "", sourceErrorf("the Secret %s does not exist in namespace %s", name, namespace)
	}
	value, ok := data[key]
	if !ok || len(value) == 0 {
		return "", sourceErrorf("the Secret %s has no key %q", name, key)
	}
	return string(value), nil
}
