//go:build integration

package pgconf

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"tusk.dev/tusk/internal/testenv"

	"tusk.dev/tusk/internal/postgres"
)

// TestRenderedConfigurationRunsOnPostgreSQL writes rendered files into a
// fresh data directory, starts a real server and checks that PostgreSQL
// read every setting with exactly the value Tusk meant (quoting included),
// that Tusk's settings won over the user's attempts, and that pg_hba.conf
// lets in what it should (TLS with a password, replication with a client
// certificate, primary_conninfo through libpq) and rejects the rest.
func TestRenderedConfigurationRunsOnPostgreSQL(t *testing.T) {
	s := newPGServer(t)
	port := testenv.FreePort(t)
	pki := newTestPKI(t, s, "tusk_replication")
	clusterName := fmt.Sprintf("tusk-pgconf-it-%d-%d", os.Getpid(), time.Now().UnixNano())
	in := serverConfigFor(s, port, pki, clusterName)
	conf, err := PostgresqlConf(in)
	if err != nil {
		t.Fatal(err)
	}
	hba, err := PgHBA(HBAConfig{
		ReplicationUser: "tusk_replication", TLS: true, ReplicationAuth: ReplicationAuthCert,
		ExtraRules: []string{"hostssl all nobody 127.0.0.1/32 reject"},
		Monitor:    s.monitorLogin(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ident, err := PgIdent(s.monitorLogin())
	if err != nil {
		t.Fatal(err)
	}
	s.writeFile("data/postgresql.conf", conf.Text)
	s.writeFile("data/pg_hba.conf", hba)
	s.writeFile("data/pg_ident.conf", ident)

	if got := s.run("postgres", "-D", s.data, "-C", "port"); got != strconv.Itoa(port) {
		t.Errorf("postgres -C port = %q, want Tusk's %d (the user asked for 1)", got, port)
	}
	s.start(clusterName)
	local := fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", in.SocketDir, port)
	// An ordinary role with the superuser's password (psql's PGPASSWORD):
	// the superuser itself may not log in over TCP.
	s.mustPSQL(local, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD %s", testLogin, quoteSQLLiteral(s.password)))

	checkNoConfigErrors(t, s, local)
	checkEverySettingAsRendered(t, s, local, conf.Text)
	checkTuskWon(t, s, local, port, conf.Ignored)
	checkTLSAndHBA(t, s, port, pki)
	checkMonitorLogin(t, s, port, pki)
	checkPrimaryConnInfoThroughLibpq(t, s, in.PrimaryConnInfo)
}

// serverConfigFor is a primary with TLS and archiving, hostile user
// parameters (reserved names, an include directive) and values that need
// quoting in both postgresql.conf and libpq syntax.
func serverConfigFor(s *pgServer, port int, pki testPKI, clusterName string) ServerConfig {
	passfile := s.writeFile("pgpass", fmt.Sprintf("127.0.0.1:%d:*:%s:%s\n", port, testLogin,
		strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(s.password)))
	return ServerConfig{
		MajorVersion: s.major, Port: port, ListenAddresses: "127.0.0.1",
		SocketDir: filepath.Join(s.dir, "run"), ClusterName: clusterName,
		UserParameters: map[string]string{
			"port": "1", "ssl": "off", "hot_standby": "off", "logging_collector": "on",
			"log_destination": "csvlog", "include_if_exists": "/nonexistent.conf",
			"log_line_prefix": `%m [%p] it's \d `, "max_wal_senders": "7", "shared_buffers": "16MB",
		},
		PrimaryConnInfo: PrimaryConnInfo(ConnInfo{
			Host: "127.0.0.1", Port: port, User: testLogin, ApplicationName: `it's a \ test`,
			PassFile: passfile, SSLMode: "verify-full", SSLRootCert: pki.CA,
		}),
		PrimarySlotName:         "orders_2",
		SynchronousStandbyNames: postgres.SynchronousStandbyNames(2, []string{"orders-3", `we"ird`}),
		ArchiveCommand:          `test ! -f '/nonexistent/%f' && echo "a\b" > /dev/null`,
		RestoreCommand:          `cp '/nonexistent/%f' "%p"`,
		TLS:                     &TLSFiles{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CAFile: pki.CA},
	}
}

func checkNoConfigErrors(t *testing.T, s *pgServer, local string) {
	t.Helper()
	if got := s.mustPSQL(local, "SELECT count(*) FROM pg_file_settings WHERE error IS NOT NULL"); got != "0" {
		t.Errorf("pg_file_settings has %s errors: %s", got, s.mustPSQL(local, "SELECT * FROM pg_file_settings WHERE error IS NOT NULL"))
	}
	if got := s.mustPSQL(local, "SELECT count(*) FROM pg_hba_file_rules WHERE error IS NOT NULL"); got != "0" {
		t.Errorf("pg_hba_file_rules has %s errors: %s", got, s.mustPSQL(local, "SELECT * FROM pg_hba_file_rules WHERE error IS NOT NULL"))
	}
}

// checkEverySettingAsRendered reads each rendered line back with SHOW.
func checkEverySettingAsRendered(t *testing.T, s *pgServer, local, text string) {
	t.Helper()
	n := 0
	for _, line := range strings.Split(text, "\n") {
		name, quoted, ok := strings.Cut(line, " = ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		n++
		want := unquoteConfValue(t, quoted)
		if got := s.mustPSQL(local, "SHOW "+name); got != want {
			t.Errorf("SHOW %s = %q, want %q (rendered as %s)", name, got, want, quoted)
		}
	}
	if n < 20 {
		t.Errorf("only %d settings checked; the rendered file looks wrong:\n%s", n, text)
	}
}

// unquoteConfValue undoes quoteValue: a doubled quote or backslash is one.
func unquoteConfValue(t *testing.T, quoted string) string {
	t.Helper()
	inner, ok := strings.CutPrefix(quoted, "'")
	inner, ok2 := strings.CutSuffix(inner, "'")
	if !ok || !ok2 {
		t.Fatalf("value %s is not quoted", quoted)
	}
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		if (inner[i] == '\'' || inner[i] == '\\') && i+1 < len(inner) && inner[i+1] == inner[i] {
			i++
		}
		b.WriteByte(inner[i])
	}
	return b.String()
}

func checkTuskWon(t *testing.T, s *pgServer, local string, port int, ignored []IgnoredParameter) {
	t.Helper()
	for name, want := range map[string]string{
		"port": strconv.Itoa(port), "ssl": "on", "hot_standby": "on", "logging_collector": "off",
		"log_destination": "stderr", "max_wal_senders": "7", "wal_level": "logical",
	} {
		if got := s.mustPSQL(local, "SHOW "+name); got != want {
			t.Errorf("SHOW %s = %q, want %q", name, got, want)
		}
	}
	var names []string
	for _, p := range ignored {
		names = append(names, p.Name)
	}
	want := []string{"hot_standby", "include_if_exists", "log_destination", "logging_collector", "port", "ssl"}
	if !slices.Equal(names, want) {
		t.Errorf("ignored %q, want %q", names, want)
	}
}

func checkTLSAndHBA(t *testing.T, s *pgServer, port int, pki testPKI) {
	t.Helper()
	tcp := fmt.Sprintf("host=127.0.0.1 port=%d dbname=postgres sslrootcert=%s", port, pki.CA)
	if got := s.mustPSQL(tcp+" user="+testLogin+" sslmode=verify-full", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"); got != "t" {
		t.Errorf("a verify-full connection is not using TLS: %q", got)
	}
	if out, err := s.psql(tcp+" user="+testLogin+" sslmode=disable", "SELECT 1"); err == nil || !strings.Contains(out, "rejects connection") {
		t.Errorf("a connection without TLS was not rejected by pg_hba.conf: %v %s", err, out)
	}
	if out, err := s.psql(tcp+" user=postgres sslmode=verify-full", "SELECT 1"); err == nil || !strings.Contains(out, "rejects connection") {
		t.Errorf("the superuser logged in over TCP with its password: %v %s", err, out)
	}
	s.mustPSQL(fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", filepath.Join(s.dir, "run"), port), "CREATE ROLE tusk_replication REPLICATION LOGIN")
	repl := tcp + " user=tusk_replication replication=true sslmode=verify-full"
	if out, err := s.psql(repl+" sslcert="+pki.ClientCert+" sslkey="+pki.ClientKey, "IDENTIFY_SYSTEM"); err != nil {
		t.Errorf("replication with a client certificate failed: %v\n%s", err, out)
	}
	if out, err := s.psql(repl, "IDENTIFY_SYSTEM"); err == nil {
		t.Errorf("replication without a client certificate was let in: %s", out)
	}
	// pg_rewind's session: the replication role to the postgres database.
	rewind := tcp + " user=tusk_replication sslmode=verify-full"
	if out, err := s.psql(rewind+" sslcert="+pki.ClientCert+" sslkey="+pki.ClientKey, "SELECT current_user"); err != nil || out != "tusk_replication" {
		t.Errorf("pg_rewind's session with the replication certificate: %v %q", err, out)
	}
}

// checkMonitorLogin: the monitoring role logs in over the socket from the
// server's OS user without a password, and from nowhere else: not over
// TCP even with a password, not from another OS user.
func checkMonitorLogin(t *testing.T, s *pgServer, port int, pki testPKI) {
	t.Helper()
	socket := fmt.Sprintf("host=%s port=%d dbname=postgres", filepath.Join(s.dir, "run"), port)
	s.mustPSQL(socket+" user=postgres", "CREATE ROLE tusk_monitor LOGIN IN ROLE pg_monitor PASSWORD "+quoteSQLLiteral(s.password))
	cmd := s.command("psql", "-XAtc", "SELECT current_user", socket+" user=tusk_monitor")
	cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool { return strings.HasPrefix(kv, "PGPASSWORD=") })
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "tusk_monitor" {
		t.Errorf("the server's OS user as the monitoring role, without a password: %v %s", err, out)
	}
	tcp := fmt.Sprintf("host=127.0.0.1 port=%d dbname=postgres sslrootcert=%s sslmode=verify-full user=tusk_monitor", port, pki.CA)
	if out, err := s.psql(tcp, "SELECT 1"); err == nil || !strings.Contains(out, "rejects connection") {
		t.Errorf("the monitoring role logged in over TCP with a password: %v %s", err, out)
	}
	if s.cred == nil {
		return // the test runs as the server's user: there is no other one to try
	}
	other := exec.Command(filepath.Join(s.bin, "psql"), "-XAtc", "SELECT 1", socket+" user=tusk_monitor")
	other.Env = []string{"PGPASSWORD=" + s.password}
	if out, err := other.CombinedOutput(); err == nil || !strings.Contains(string(out), "Peer authentication failed") {
		t.Errorf("another OS user (%d) logged in as the monitoring role: %v %s", os.Geteuid(), err, out)
	}
}

// testLogin is the ordinary role the test logs in as over TCP.
const testLogin = "tusk_it_app"

func quoteSQLLiteral(s string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// checkPrimaryConnInfoThroughLibpq connects with the rendered
// primary_conninfo, so libpq itself parses its quoting and keywords.
func checkPrimaryConnInfoThroughLibpq(t *testing.T, s *pgServer, conninfo string) {
	t.Helper()
	if got := s.mustPSQL(conninfo+" dbname=postgres", "SELECT current_setting('application_name')"); got != `it's a \ test` {
		t.Errorf("application_name through libpq = %q, want %q", got, `it's a \ test`)
	}
}
