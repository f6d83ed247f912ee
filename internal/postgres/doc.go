// Package postgres holds PostgreSQL naming and arithmetic that both the
// operator and the instance manager need: write-ahead log locations (LSNs)
// and WAL file names.
//
// It is a leaf package that imports only the standard library, so the
// operator (which reads LSNs from instance status reports) and the instance
// manager (which archives and restores WAL) can share it without importing
// each other. Everything here is a pure function.
package postgres
