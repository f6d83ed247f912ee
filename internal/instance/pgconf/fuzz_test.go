package pgconf

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// unquoteValue reads a value as PostgreSQL's configuration lexer does for
// the quoting quoteValue uses: two quotes are one, two backslashes one.
func unquoteValue(q string) (string, bool) {
	if len(q) < 2 || q[0] != '\'' || q[len(q)-1] != '\'' {
		return "", false
	}
	inner := q[1 : len(q)-1]
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		switch {
		case inner[i] == '\'' && i+1 < len(inner) && inner[i+1] == '\'',
			inner[i] == '\\' && i+1 < len(inner) && inner[i+1] == '\\':
			b.WriteByte(inner[i])
			i++
		case inner[i] == '\'' || inner[i] == '\\':
			return "", false // a lone quote ends the value early; a lone backslash escapes
		default:
			b.WriteByte(inner[i])
		}
	}
	return b.String(), true
}

// FuzzPostgresqlConfValue: a user's value either is refused or becomes
// exactly one line of postgresql.conf that reads back as the value: no
// value injects a setting.
func FuzzPostgresqlConfValue(f *testing.F) {
	for _, seed := range []string{"4MB", "", "it's", `C:\path\`, "a\nshared_preload_libraries = 'evil'", "x\x00y", "''", `\'`, "é ü \t tab", "#comment", "a = b"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		in := base(15)
		in.UserParameters = map[string]string{"application_name": value}
		conf, err := PostgresqlConf(in)
		if err != nil {
			if !strings.ContainsAny(value, "\n\r\x00") {
				t.Fatalf("value %q refused: %v", value, err)
			}
			return
		}
		var lines []string
		for _, l := range strings.Split(conf.Text, "\n") {
			if strings.HasPrefix(l, "application_name = ") {
				lines = append(lines, l)
			}
		}
		if len(lines) != 1 {
			t.Fatalf("value %q gave %d application_name lines", value, len(lines))
		}
		got, ok := unquoteValue(strings.TrimPrefix(lines[0], "application_name = "))
		if !ok || got != value {
			t.Fatalf("value %q reads back as %q (well quoted: %v)", value, got, ok)
		}
		base, err := PostgresqlConf(base(15))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(conf.Text, "\n") != strings.Count(base.Text, "\n")+1 {
			t.Fatalf("value %q added more than one line", value)
		}
	})
}

// FuzzPrimaryConnInfo: libpq's own parser (as pgx implements it) reads the
// rendered connection string back as the values it was made from.
func FuzzPrimaryConnInfo(f *testing.F) {
	f.Add("orders-rw", "tusk_replication", "orders-2", "/run/tusk/pgpass")
	f.Add("h", "u s'e\\r", `it's a \ test`, "")
	f.Add("", "", "", "with space")
	f.Fuzz(func(t *testing.T, host, user, app, passfile string) {
		for _, s := range []string{host, user, app, passfile} {
			if strings.ContainsRune(s, 0) || strings.Contains(s, ",") {
				t.Skip("NUL cannot be sent; a comma makes a host list")
			}
		}
		if host == "" || strings.HasPrefix(host, "/") || strings.HasPrefix(host, "[") || strings.Contains(host, ":") {
			t.Skip("not a host name")
		}
		s := PrimaryConnInfo(ConnInfo{Host: host, Port: 5432, User: user, ApplicationName: app, SSLMode: "disable"})
		cfg, err := pgconn.ParseConfig(s)
		if err != nil {
			t.Fatalf("%q does not parse: %v", s, err)
		}
		if cfg.Host != host || (user != "" && cfg.User != user) || cfg.RuntimeParams["application_name"] != app {
			t.Fatalf("%q reads back as host %q user %q application_name %q", s, cfg.Host, cfg.User, cfg.RuntimeParams["application_name"])
		}
	})
}

// FuzzPgHBAExtraRule: a rule the renderer accepts is exactly one line and
// never trust nor an include.
func FuzzPgHBAExtraRule(f *testing.F) {
	for _, seed := range []string{"hostssl app reporting 10.0.0.0/8 scram-sha-256", "host all all all trust", "include x",
		"host all all 0.0.0.0/0 reject\nlocal all all trust", `hostssl all "Mixed Case" all cert`, "host all all all TRUST", "host all @f all md5"} {
		f.Add(seed)
	}
	plain, err := PgHBA(HBAConfig{ReplicationUser: "tusk_replication"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, rule string) {
		text, err := PgHBA(HBAConfig{ReplicationUser: "tusk_replication", ExtraRules: []string{rule}})
		if err != nil {
			return
		}
		if got, want := len(records(text)), len(records(plain))+1; got != want {
			t.Fatalf("rule %q became %d records, want %d", rule, got-len(records(plain)), 1)
		}
		for _, r := range records(text) {
			for _, field := range r {
				if strings.EqualFold(strings.Trim(field, `"`), "trust") {
					t.Fatalf("rule %q let trust in: %v", rule, r)
				}
			}
			if strings.HasPrefix(r[0], "include") {
				t.Fatalf("rule %q is an include: %v", rule, r)
			}
		}
	})
}
