// Package pgconf renders the configuration files the instance manager
// writes into PGDATA: postgresql.conf, pg_hba.conf, and the two values
// inside them that need their own quoting rules, primary_conninfo (libpq
// keyword/value syntax) and synchronous_standby_names (a list of SQL
// identifiers).
//
// Everything here is a pure function of its input with deterministic
// (sorted) output, so the instance manager can compare what it would write
// with what is on disk and reload only when something changed, and golden
// files pin the exact text. Nothing here reads or writes files.
//
// Values come from users (spec.postgresql.parameters, extra pg_hba rules),
// so rendering is defensive: names are checked, values are quoted, and
// anything that could smuggle in a second setting or rule (a line break) is
// an error rather than text.
package pgconf
