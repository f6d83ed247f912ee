package pgconf

import "slices"

// reservedParameters are the settings Tusk owns. It must stay identical to
// the list in the CRD's validation rule for spec.postgresql.parameters
// (api/v1alpha1, PostgreSQLSpec.Parameters); a unit test reads the CRD and
// fails when the two drift. The CRD refuses these names at kubectl apply;
// the renderer drops them again in case one arrives by another path (an
// older CRD, a hand-edited object), because each one breaks Services,
// replication, failover, archiving, TLS or log capture when set by hand.
var reservedParameters = []string{
	"listen_addresses", "port", "unix_socket_directories",
	"data_directory", "config_file", "hba_file", "ident_file", "external_pid_file",
	"archive_mode", "archive_command", "archive_library", "archive_timeout",
	"restore_command", "archive_cleanup_command", "recovery_end_command",
	"primary_conninfo", "primary_slot_name", "promote_trigger_file",
	"recovery_target", "recovery_target_lsn", "recovery_target_name",
	"recovery_target_time", "recovery_target_xid", "recovery_target_inclusive",
	"recovery_target_timeline", "recovery_target_action",
	"synchronous_standby_names",
	"ssl", "ssl_cert_file", "ssl_key_file", "ssl_ca_file", "ssl_crl_file",
	"cluster_name", "hot_standby",
	"logging_collector", "log_destination", "log_directory", "log_filename",
}

// ReservedParameters returns the names of the settings Tusk owns and users
// cannot set, sorted. The result is a copy.
func ReservedParameters() []string {
	names := slices.Clone(reservedParameters)
	slices.Sort(names)
	return names
}

// IsReserved says whether Tusk owns the setting name.
func IsReserved(name string) bool {
	return slices.Contains(reservedParameters, name)
}
