package instance

import (
	"encoding/json"
	"testing"

	"tusk.dev/tusk/internal/instance/pgconf"
	"tusk.dev/tusk/internal/instanceapi"
)

// FuzzConfigRequest: whatever JSON a PUT /v1/config carries, a
// configuration that passes Validate (the check made before anything is
// stored) renders: a stored configuration that cannot be rendered would
// break every later start, restart, demote and promote (issue 21 #4).
func FuzzConfigRequest(f *testing.F) {
	for _, seed := range []string{
		`{"parameters":{"work_mem":"8MB"}}`,
		`{"parameters":{"work_mem":"4MB\nshared_preload_libraries = 'evil'"}}`,
		`{"parameters":{"pg_stat_statements.max":"10000","port":"1"},"synchronousStandbyNames":"ANY 1 (\"a\")"}`,
		`{"parameters":{"Work_Mem":"1"}}`, `{"parameters":{"a.b.c":"1"}}`, `{"synchronousStandbyNames":"x\u0000"}`,
		`{"parameters":{"include":"/etc/passwd"}}`, `{"superuserRemoteAccess":true}`, `[]`, `{"parameters":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var cfg instanceapi.Config
		if json.Unmarshal(body, &cfg) != nil || cfg.Validate() != nil {
			return
		}
		in := pgconf.ServerConfig{MajorVersion: 15, Port: 5432, ListenAddresses: "*", SocketDir: "/run/tusk/socket", ClusterName: "pg-1",
			UserParameters: cfg.Parameters, SynchronousStandbyNames: cfg.SynchronousStandbyNames}
		if _, err := pgconf.PostgresqlConf(in); err != nil {
			t.Fatalf("%s passed validation but does not render: %v", body, err)
		}
		if _, err := pgconf.PgHBA(pgconf.HBAConfig{ReplicationUser: replicationUser, SuperuserRemoteAccess: cfg.SuperuserRemoteAccess}); err != nil {
			t.Fatalf("%s: pg_hba.conf does not render: %v", body, err)
		}
	})
}
