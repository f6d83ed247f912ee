package pgconf

import (
	"slices"
	"strings"
	"testing"
)

func TestPgHBAGolden(t *testing.T) {
	tests := map[string]HBAConfig{
		"pg_hba-scram": {ReplicationUser: "tusk_replication"},
		"pg_hba-tls-cert-extra": {
			ReplicationUser:   "tusk_replication",
			TLS:               true,
			ReplicationAuth:   ReplicationAuthCert,
			Monitor:           &MonitorLogin{Role: "tusk_monitor", SystemUser: "postgres"},
			CertificateLogins: []CertificateLogin{{Role: "tusk_probe", Database: "postgres"}},
			CertificateGroup:  "tusk_cert_login",
			ExtraRules: []string{
				"hostssl app reporting 10.0.0.0/8 scram-sha-256",
				"  host all all 192.168.0.0/16 reject  ",
				`hostssl all "Mixed Case" all cert`,
				"host all all 10.1.2.3 255.255.255.255 scram-sha-256",
				"hostgssenc all all all gss include_realm=0",
			},
		},
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := PgHBA(in)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, got)
		})
	}
}

// records returns the non-comment lines of a pg_hba.conf as fields.
func records(text string) [][]string {
	var out [][]string
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			out = append(out, f)
		}
	}
	return out
}

func TestPgHBAPolicy(t *testing.T) {
	tests := []struct {
		in          HBAConfig
		replication string // the replication record, joined by spaces
		rewind      string // pg_rewind's record
		superuser   string // the superuser's remote record; "" for none
		apps        string
	}{
		{HBAConfig{ReplicationUser: "repl"}, "host replication repl all scram-sha-256", "host postgres repl all scram-sha-256",
			"host all postgres all reject", "host all all all scram-sha-256"},
		{HBAConfig{ReplicationUser: "repl", TLS: true}, "hostssl replication repl all scram-sha-256", "hostssl postgres repl all scram-sha-256",
			"host all postgres all reject", "hostssl all all all scram-sha-256"},
		{HBAConfig{ReplicationUser: "repl", TLS: true, ReplicationAuth: ReplicationAuthCert}, "hostssl replication repl all cert", "hostssl postgres repl all cert",
			"host all postgres all reject", "hostssl all all all scram-sha-256"},
		{HBAConfig{ReplicationUser: "repl", ReplicationAuth: ReplicationAuthSCRAM}, "host replication repl all scram-sha-256", "host postgres repl all scram-sha-256",
			"host all postgres all reject", "host all all all scram-sha-256"},
		// Opted in: the superuser logs in as applications do.
		{HBAConfig{ReplicationUser: "repl", TLS: true, SuperuserRemoteAccess: true}, "hostssl replication repl all scram-sha-256", "hostssl postgres repl all scram-sha-256",
			"", "hostssl all all all scram-sha-256"},
	}
	for _, tt := range tests {
		text, err := PgHBA(tt.in)
		if err != nil {
			t.Fatalf("%+v: %v", tt.in, err)
		}
		recs := records(text)
		var joined []string
		for _, r := range recs {
			joined = append(joined, strings.Join(r, " "))
			for _, f := range r {
				if f == "trust" {
					t.Errorf("%+v: a trust record: %v", tt.in, r)
				}
			}
		}
		want := []string{
			"local all all scram-sha-256",
			"local replication postgres scram-sha-256", // the manager's base backups
			tt.replication,
			tt.rewind,
		}
		if tt.superuser != "" {
			want = append(want, tt.superuser)
		}
		want = append(want,
			tt.apps,
			"host all all all reject",
			"host replication all all reject",
			"local replication all reject",
		)
		if strings.Join(joined, "\n") != strings.Join(want, "\n") {
			t.Errorf("%+v: records\n%s\nwant\n%s", tt.in, strings.Join(joined, "\n"), strings.Join(want, "\n"))
		}
	}
}

func TestPgHBAExtraRulesComeBeforeApplications(t *testing.T) {
	text, err := PgHBA(HBAConfig{ReplicationUser: "repl", ExtraRules: []string{"host all bob 10.0.0.1/32 reject"}})
	if err != nil {
		t.Fatal(err)
	}
	// After Tusk's own records (the superuser's refusal among them: an
	// extra rule cannot let it in), before the applications'.
	recs := records(text)
	if got := strings.Join(recs[5], " "); got != "host all bob 10.0.0.1/32 reject" {
		t.Errorf("sixth record %q, want the extra rule (after Tusk's own, before applications)", got)
	}
}

func TestPgHBARejects(t *testing.T) {
	tests := map[string]HBAConfig{
		"no replication user":       {},
		"replication user all":      {ReplicationUser: "all"},
		"replication user sameuser": {ReplicationUser: "sameuser"},
		"replication user group":    {ReplicationUser: "+admins"},
		"replication user quoted":   {ReplicationUser: `a"b`},
		"replication user spaces":   {ReplicationUser: "a b"},
		"replication user too long": {ReplicationUser: strings.Repeat("r", 64)},
		"cert without TLS":          {ReplicationUser: "r", ReplicationAuth: ReplicationAuthCert},
		"unknown method":            {ReplicationUser: "r", ReplicationAuth: "md5"},
		"trust rule":                {ReplicationUser: "r", ExtraRules: []string{"host all all all trust"}},
		"TRUST rule":                {ReplicationUser: "r", ExtraRules: []string{"host all all all TRUST"}},
		"local trust rule":          {ReplicationUser: "r", ExtraRules: []string{"local all all trust"}},
		"newline in rule":           {ReplicationUser: "r", ExtraRules: []string{"host all all 10.0.0.0/8 reject\nlocal all all trust"}},
		"CR in rule":                {ReplicationUser: "r", ExtraRules: []string{"host all all 10.0.0.0/8 reject\rx"}},
		"NUL in rule":               {ReplicationUser: "r", ExtraRules: []string{"host all all all reject\x00"}},
		"continuation":              {ReplicationUser: "r", ExtraRules: []string{`host all all all \`}},
		"continuation and space":    {ReplicationUser: "r", ExtraRules: []string{"host all all all \\  "}},
		"include":                   {ReplicationUser: "r", ExtraRules: []string{"include /etc/other_hba.conf"}},
		"include_dir":               {ReplicationUser: "r", ExtraRules: []string{"include_dir conf.d"}},
		"@file":                     {ReplicationUser: "r", ExtraRules: []string{"host all @admins all scram-sha-256"}},
		"empty rule":                {ReplicationUser: "r", ExtraRules: []string{"   "}},
		"comment only":              {ReplicationUser: "r", ExtraRules: []string{"# hello"}},
		"typo":                      {ReplicationUser: "r", ExtraRules: []string{"hots all all all reject"}},
		"md5 rule":                  {ReplicationUser: "r", ExtraRules: []string{"host all all 10.0.0.0/8 md5"}},
		"password rule":             {ReplicationUser: "r", ExtraRules: []string{"hostssl all all all password"}},
		"peer rule":                 {ReplicationUser: "r", ExtraRules: []string{"local all all peer"}},
		"ident rule":                {ReplicationUser: "r", ExtraRules: []string{"host all all 10.0.0.1 255.255.255.255 ident"}},
		"ldap rule":                 {ReplicationUser: "r", ExtraRules: []string{`host all "Mixed Case" all ldap ldapserver=x`}},
		"no method":                 {ReplicationUser: "r", ExtraRules: []string{"host all all 10.0.0.0/8"}},
		"monitor role all":          {ReplicationUser: "r", Monitor: &MonitorLogin{Role: "all", SystemUser: "postgres"}},
		"monitor role group":        {ReplicationUser: "r", Monitor: &MonitorLogin{Role: "+pg_monitor", SystemUser: "postgres"}},
		"monitor OS user regex":     {ReplicationUser: "r", Monitor: &MonitorLogin{Role: "m", SystemUser: "/^.*$"}},
		"monitor OS user spaces":    {ReplicationUser: "r", Monitor: &MonitorLogin{Role: "m", SystemUser: "post gres"}},
		"monitor OS user quoted":    {ReplicationUser: "r", Monitor: &MonitorLogin{Role: "m", SystemUser: `"postgres"`}},
		"monitor OS user empty":     {ReplicationUser: "r", Monitor: &MonitorLogin{Role: "m"}},
	}
	for name, in := range tests {
		if text, err := PgHBA(in); err == nil {
			t.Errorf("%s: no error; rendered:\n%s", name, text)
		}
	}
}

// The monitoring role logs in by peer authentication over the socket, is
// matched before any password line, and is refused over the network
// before any rule a user writes could let it in.
// TestPgHBACertificateLogins: a certificate login reaches its one database
// with a certificate, before any rule that would take a password from it,
// and is refused anything else; without TLS it is an error, not a rule
// that never matches.
func TestPgHBACertificateLogins(t *testing.T) {
	text, err := PgHBA(HBAConfig{ReplicationUser: "repl", TLS: true, ReplicationAuth: ReplicationAuthCert,
		CertificateLogins: []CertificateLogin{{Role: "tusk_probe", Database: "postgres"}},
		ExtraRules:        []string{"hostssl all all 10.0.0.0/8 scram-sha-256"}})
	if err != nil {
		t.Fatal(err)
	}
	var joined []string
	for _, r := range records(text) {
		joined = append(joined, strings.Join(r, " "))
	}
	cert := slices.Index(joined, "hostssl postgres tusk_probe all cert")
	refused := slices.Index(joined, "host all tusk_probe all reject")
	extra := slices.Index(joined, "hostssl all all 10.0.0.0/8 scram-sha-256")
	if cert < 0 || refused != cert+1 || extra < refused {
		t.Errorf("certificate login at record %d, its refusal at %d, the user's rule at %d:\n%s", cert, refused, extra, strings.Join(joined, "\n"))
	}
	for _, bad := range []HBAConfig{
		{ReplicationUser: "repl", CertificateLogins: []CertificateLogin{{Role: "tusk_probe", Database: "postgres"}}},
		{ReplicationUser: "repl", TLS: true, CertificateLogins: []CertificateLogin{{Role: "all", Database: "postgres"}}},
		{ReplicationUser: "repl", TLS: true, CertificateLogins: []CertificateLogin{{Role: "tusk_probe", Database: "all"}}},
	} {
		if _, err := PgHBA(bad); err == nil {
			t.Errorf("PgHBA took %+v", bad.CertificateLogins)
		}
	}
}

// TestPgHBACertificateGroup: the group's members log in to any database
// with a client certificate only: after Tusk's refusals (a membership
// cannot let the superuser, the monitoring or the probe's role in), before
// the user's rules and the applications' password rule, and refused over
// the network otherwise; without TLS it is an error.
func TestPgHBACertificateGroup(t *testing.T) {
	text, err := PgHBA(HBAConfig{ReplicationUser: "repl", TLS: true, ReplicationAuth: ReplicationAuthCert,
		Monitor:           &MonitorLogin{Role: "tusk_monitor", SystemUser: "postgres"},
		CertificateLogins: []CertificateLogin{{Role: "tusk_probe", Database: "postgres"}},
		CertificateGroup:  "tusk_cert_login",
		ExtraRules:        []string{"host all all 10.0.0.0/8 scram-sha-256"}})
	if err != nil {
		t.Fatal(err)
	}
	var joined []string
	for _, r := range records(text) {
		joined = append(joined, strings.Join(r, " "))
	}
	at := func(record string) int {
		i := slices.Index(joined, record)
		if i < 0 {
			t.Fatalf("no record %q in:\n%s", record, strings.Join(joined, "\n"))
		}
		return i
	}
	cert, refused := at("hostssl all +tusk_cert_login all cert"), at("host all +tusk_cert_login all reject")
	before := []string{"host all tusk_probe all reject", "host all tusk_monitor all reject", "host all postgres all reject"}
	after := []string{"host all all 10.0.0.0/8 scram-sha-256", "hostssl all all all scram-sha-256"}
	for _, r := range before {
		if at(r) > cert {
			t.Errorf("%q comes after the group's certificate rule:\n%s", r, strings.Join(joined, "\n"))
		}
	}
	if refused != cert+1 {
		t.Errorf("the group's refusal is record %d, want %d, right after its certificate rule", refused, cert+1)
	}
	for _, r := range after {
		if at(r) < refused {
			t.Errorf("%q comes before the group's rules:\n%s", r, strings.Join(joined, "\n"))
		}
	}
	if strings.Count(text, "+tusk_cert_login") != 2 {
		t.Errorf("the group is named %d times, want 2:\n%s", strings.Count(text, "+tusk_cert_login"), text)
	}

	none, err := PgHBA(HBAConfig{ReplicationUser: "repl", TLS: true})
	if err != nil || strings.Contains(none, "tusk_cert_login") {
		t.Errorf("without a group, pg_hba.conf names it (%v):\n%s", err, none)
	}
	for _, bad := range []HBAConfig{
		{ReplicationUser: "repl", CertificateGroup: "tusk_cert_login"},
		{ReplicationUser: "repl", TLS: true, CertificateGroup: "all"},
		{ReplicationUser: "repl", TLS: true, CertificateGroup: "+admins"},
	} {
		if _, err := PgHBA(bad); err == nil {
			t.Errorf("PgHBA took certificate group %q with TLS %v", bad.CertificateGroup, bad.TLS)
		}
	}
}

func TestPgHBAMonitor(t *testing.T) {
	text, err := PgHBA(HBAConfig{ReplicationUser: "repl", TLS: true, SuperuserRemoteAccess: true,
		Monitor:    &MonitorLogin{Role: "tusk_monitor", SystemUser: "postgres"},
		ExtraRules: []string{"hostssl all tusk_monitor 10.0.0.0/8 scram-sha-256"}})
	if err != nil {
		t.Fatal(err)
	}
	var joined []string
	for _, r := range records(text) {
		joined = append(joined, strings.Join(r, " "))
	}
	if joined[0] != "local all tusk_monitor peer map=tusk_monitor" {
		t.Errorf("first record %q, want the monitoring role's peer login", joined[0])
	}
	refused, extra := -1, -1
	for i, r := range joined {
		switch r {
		case "host all tusk_monitor all reject":
			refused = i
		case "hostssl all tusk_monitor 10.0.0.0/8 scram-sha-256":
			extra = i
		}
	}
	if refused < 0 || refused > extra {
		t.Errorf("the monitoring role's network refusal is at record %d, the user's rule at %d:\n%s", refused, extra, strings.Join(joined, "\n"))
	}

	ident, err := PgIdent(&MonitorLogin{Role: "tusk_monitor", SystemUser: "postgres"})
	if err != nil {
		t.Fatal(err)
	}
	if got := records(ident); len(got) != 1 || strings.Join(got[0], " ") != "tusk_monitor postgres tusk_monitor" {
		t.Errorf("pg_ident.conf maps %v, want only the manager's OS user to the monitoring role", got)
	}
	none, err := PgIdent(nil)
	if err != nil || len(records(none)) != 0 {
		t.Errorf("pg_ident.conf without a monitoring login maps %v (%v), want nothing", records(none), err)
	}
	if _, err := PgIdent(&MonitorLogin{Role: "tusk_monitor", SystemUser: "/.*"}); err == nil {
		t.Error("pg_ident.conf took a regular expression for the OS user")
	}
}
