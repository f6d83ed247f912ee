package pgconf

import (
	"strings"
	"testing"
	"time"
)

const fixedTail = " keepalives=1 keepalives_idle=5 keepalives_interval=2 keepalives_count=3 tcp_user_timeout=10000"

func TestPrimaryConnInfo(t *testing.T) {
	tests := []struct {
		name string
		in   ConnInfo
		want string
	}{
		{"defaults only", ConnInfo{}, "connect_timeout=5" + fixedTail},
		{"all fields in a fixed order", ConnInfo{
			Host: "orders-rw", Port: 5432, User: "tusk_replication", ApplicationName: "orders-2",
			PassFile: "/p/.pgpass", SSLMode: "verify-full", SSLCert: "/t/tls.crt", SSLKey: "/t/tls.key",
			SSLRootCert: "/t/ca.crt", ConnectTimeout: 3 * time.Second,
		}, "host=orders-rw port=5432 user=tusk_replication application_name=orders-2 passfile=/p/.pgpass " +
			"sslmode=verify-full sslcert=/t/tls.crt sslkey=/t/tls.key sslrootcert=/t/ca.crt connect_timeout=3" + fixedTail},
		{"an address to try first, then the name", ConnInfo{Host: "orders-rw", HostAddr: "10.0.0.7", Port: 5432},
			"host=orders-rw,orders-rw hostaddr=10.0.0.7, port=5432 connect_timeout=5" + fixedTail},
		{"space is quoted", ConnInfo{ApplicationName: "a b"}, `application_name='a b' connect_timeout=5` + fixedTail},
		{"tab is quoted", ConnInfo{ApplicationName: "a\tb"}, "application_name='a\tb' connect_timeout=5" + fixedTail},
		{"quote is escaped", ConnInfo{User: "o'neil"}, `user='o\'neil' connect_timeout=5` + fixedTail},
		{"backslash is escaped", ConnInfo{PassFile: `C:\pass`}, `passfile='C:\\pass' connect_timeout=5` + fixedTail},
		{"equals needs no quotes", ConnInfo{ApplicationName: "a=b"}, `application_name=a=b connect_timeout=5` + fixedTail},
		{"sub-second timeout is 2 s", ConnInfo{ConnectTimeout: 100 * time.Millisecond}, "connect_timeout=2" + fixedTail},
		{"timeout rounds up", ConnInfo{ConnectTimeout: 2500 * time.Millisecond}, "connect_timeout=3" + fixedTail},
		{"negative timeout is the default", ConnInfo{ConnectTimeout: -time.Second}, "connect_timeout=5" + fixedTail},
	}
	for _, tt := range tests {
		if got := PrimaryConnInfo(tt.in); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

func TestQuoteConnValue(t *testing.T) {
	for in, want := range map[string]string{
		"":         "''",
		"plain":    "plain",
		"a b":      "'a b'",
		`'`:        `'\''`,
		`\`:        `'\\'`,
		"a\nb":     "'a\nb'",
		`x'\ y`:    `'x\'\\ y'`,
		"ünïcode":  "ünïcode",
		"host,two": "host,two",
	} {
		if got := quoteConnValue(in); got != want {
			t.Errorf("quoteConnValue(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestPrimaryConnInfoTargetSessionAttrs(t *testing.T) {
	got := PrimaryConnInfo(ConnInfo{Host: "orders-rw", User: "tusk_replication", TargetSessionAttrs: "primary"})
	if !strings.Contains(got, " target_session_attrs=primary ") {
		t.Fatalf("primary_conninfo %q lacks target_session_attrs=primary", got)
	}
	if strings.Contains(PrimaryConnInfo(ConnInfo{Host: "orders-rw"}), "target_session_attrs") {
		t.Fatal("target_session_attrs rendered although unset")
	}
}
