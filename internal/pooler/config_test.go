package pooler

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the current output")

// golden compares got with testdata/<name>.golden, or rewrites the file
// when the test runs with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/pooler -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (run go test ./internal/pooler -update and review the diff):\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

func validConfig() Config {
	return Config{
		ListenAddr: "*", ListenPort: 5432, SocketDir: "/run/pgbouncer",
		ServerHost: "db-rw.tenant.svc", ServerPort: 5432, PoolMode: PoolModeTransaction,
		AuthRole: "tusk_pooler_auth", AuthDatabase: "postgres",
		ServerTLS: ServerTLS{CAFile: "/tls/ca.crt", CertFile: "/tls/auth.crt", KeyFile: "/tls/auth.key"},
		ClientTLS: ClientTLS{CertFile: "/tls/tls.crt", KeyFile: "/tls/tls.key", CAFile: "/tls/ca.crt", Required: true},
	}
}

func TestINIGolden(t *testing.T) {
	for name, change := range map[string]func(*Config){
		"transaction-defaults": func(*Config) {},
		"session-sizes-parameters": func(c *Config) {
			c.PoolMode = PoolModeSession
			c.ClientTLS.Required = false
			c.Pools = PoolSizes{DefaultPoolSize: 20, MinPoolSize: 2, ReservePoolSize: 5, MaxClientConn: 1000, MaxDBConnections: 50}
			c.Parameters = map[string]string{"server_idle_timeout": "30", "ignore_startup_parameters": "extra_float_digits,options"}
		},
		"peers": func(c *Config) {
			c.Peers = []Peer{{ID: 1, Host: "pool-0.pool-peers.tenant.svc", Port: 5432}, {ID: 2, Host: "pool-1.pool-peers.tenant.svc", Port: 5432}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := validConfig()
			change(&c)
			ini, err := INI(c)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name+".ini", ini)
			// PeerINI's peer_id joins the section the file ends in.
			if last := strings.LastIndex(ini, "\n["); ini[last+1:last+13] != "[pgbouncer]\n" {
				t.Errorf("the file's last section is %q, want [pgbouncer]", ini[last+1:strings.Index(ini[last+1:], "\n")+last+1])
			}
		})
	}
}

func TestINIRefusesWithAReason(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*Config)
		want   []string
	}{
		"reserved parameters": {func(c *Config) { c.Parameters = map[string]string{"auth_type": "trust", "listen_port": "1"} },
			[]string{`"auth_type" is set by Tusk`, `"listen_port" is set by Tusk`, "remove it"}},
		"a name PgBouncer would misread": {func(c *Config) { c.Parameters = map[string]string{"pool mode": "x"} },
			[]string{`"pool mode": a name is lower-case letters`}},
		"a value with a line break": {func(c *Config) { c.Parameters = map[string]string{"server_idle_timeout": "1\nauth_type = trust"} },
			[]string{`"server_idle_timeout": its value has a line break`}},
		"an unknown pool mode": {func(c *Config) { c.PoolMode = "statement" },
			[]string{`pool mode "statement": want "transaction" or "session"`}},
		"a host to be quoted": {func(c *Config) { c.ServerHost = "db port=1" },
			[]string{`server host "db port=1": want a DNS name or an IP address`}},
		"no port":       {func(c *Config) { c.ServerPort = 0 }, []string{"server port 0: want 1 to 65535"}},
		"no auth role":  {func(c *Config) { c.AuthRole = "" }, []string{"the auth role and its database are required"}},
		"no server TLS": {func(c *Config) { c.ServerTLS.CAFile = "" }, []string{"server TLS needs the cluster's CA"}},
		"no client TLS": {func(c *Config) { c.ClientTLS.KeyFile = "" }, []string{"client TLS needs the pooler's server certificate"}},
		"a [peers] section by a parameter": {func(c *Config) { c.Parameters = map[string]string{"x": "1\n[peers]\n1 = host=evil"} },
			[]string{`"x": its value has a line break`}},
		"peer ids out of range or twice": {func(c *Config) {
			c.Peers = []Peer{{ID: 0, Host: "a", Port: 1}, {ID: 16384, Host: "b", Port: 1}, {ID: 3, Host: "c", Port: 1}, {ID: 3, Host: "d", Port: 1}}
		}, []string{"peer id 0: want 1 to 16383", "peer id 16384: want 1 to 16383", "peer 3 is listed twice"}},
		"a peer host to be quoted": {func(c *Config) { c.Peers = []Peer{{ID: 1, Host: "a port=1", Port: 5432}} },
			[]string{`peer 1 at "a port=1" port 5432: want a DNS name`}},
	} {
		t.Run(name, func(t *testing.T) {
			c := validConfig()
			tc.change(&c)
			ini, err := INI(c)
			if err == nil {
				t.Fatalf("accepted:\n%s", ini)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestAuthFunctionSQLGolden(t *testing.T) {
	golden(t, "auth-function.sql", strings.Join(AuthFunctionSQL(`pooler "auth"`), ";\n")+";\n")
}

func TestPeerINI(t *testing.T) {
	ini, err := PeerINI("/etc/tusk/pooler/pgbouncer.ini", 7)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "peer.ini", ini)
	for name, tc := range map[string]struct {
		include string
		id      int
		want    string
	}{
		"no peer id":          {"/etc/pgbouncer.ini", 0, "peer id 0: want 1 to 16383"},
		"a peer id too large": {"/etc/pgbouncer.ini", MaxPeerID + 1, "peer id 16384: want 1 to 16383"},
		"a relative path":     {"pgbouncer.ini", 1, `"pgbouncer.ini" is not an absolute path`},
		"a line break":        {"/etc/x.ini\n[pgbouncer]", 1, "is not an absolute path"},
	} {
		t.Run(name, func(t *testing.T) {
			if ini, err := PeerINI(tc.include, tc.id); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("PeerINI(%q, %d) = %q, %v; want an error saying %q", tc.include, tc.id, ini, err, tc.want)
			}
		})
	}
}

func TestPeerIDFromPodName(t *testing.T) {
	for name, want := range map[string]int{"pool-0": 1, "pool-1": 2, "my-pool-31": 32, "a-16382": 16383} {
		if got, err := PeerIDFromPodName(name); err != nil || got != want {
			t.Errorf("PeerIDFromPodName(%q) = %d, %v; want %d", name, got, err, want)
		}
	}
	// A Deployment's pod, a machine's hostname, an ordinal PgBouncer
	// cannot hold, a sign or leading zero no StatefulSet writes.
	for _, name := range []string{"pool-7c9f8d-x2k4q", "vm", "7", "pool-", "pool-16383", "pool-01", "pool-+1"} {
		if got, err := PeerIDFromPodName(name); err == nil {
			t.Errorf("PeerIDFromPodName(%q) = %d; want an error", name, got)
		}
	}
}
