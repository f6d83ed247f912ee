// Package sqlobjects applies the SQL objects a user declares — roles,
// databases with their extensions and schemas, publications and
// subscriptions — on a writable primary: each apply observes the
// catalogs, plans the statements that close the difference (pure
// functions, table-tested) and runs them.
//
// It holds nothing of the instance manager but its Port: no lock, no run
// loop state, no postgres process. The manager keeps the HTTP routes and
// the writability check, and hands the package a way to connect.
package sqlobjects

import (
	"context"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
)

// Port is all the package needs of the instance.
type Port struct {
	// ConnectWritable opens a superuser session to database on a writable
	// primary. It fails with ErrNotWritable or ErrPostgresDown (wrapped),
	// or with MissingDatabase's refusal.
	ConnectWritable func(ctx context.Context, database string) (*pgx.Conn, error)
	// Log is where each statement's change is logged.
	Log logr.Logger
	// Owner is the cluster's bootstrap owner: Tusk manages it, so no apply
	// may.
	Owner string
	// SuperuserAccess says whether the cluster lets roles that log in
	// have superuser rights (spec.superuserAccess); nil means it does not.
	SuperuserAccess func() bool
	// RunDir holds the subscriptions' CA files: they are no part of the
	// data, and a backup or a replica has no use for them.
	RunDir string
}

// Objects applies declared SQL objects through its Port.
type Objects struct {
	port Port
}

// New returns the applier of SQL objects over port.
func New(port Port) *Objects {
	return &Objects{port: port}
}
