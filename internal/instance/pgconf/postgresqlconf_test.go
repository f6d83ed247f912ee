package pgconf

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"tusk.dev/tusk/internal/postgres"
)

// base is a valid primary configuration the tests vary.
func base(major int) ServerConfig {
	return ServerConfig{
		MajorVersion:    major,
		Port:            5432,
		ListenAddresses: "*",
		SocketDir:       "/controller/run",
		ClusterName:     "orders-1",
	}
}

func render(t *testing.T, in ServerConfig) Conf {
	t.Helper()
	conf, err := PostgresqlConf(in)
	if err != nil {
		t.Fatalf("PostgresqlConf: %v", err)
	}
	return conf
}

func TestPostgresqlConfGolden(t *testing.T) {
	primary := base(15)
	primary.UserParameters = map[string]string{
		"max_connections":          "200",
		"shared_buffers":           "1GB",
		"shared_preload_libraries": "pg_stat_statements,auto_explain",
		"pg_stat_statements.max":   "10000",
		"search_path":              `"$user", public`,
		"log_line_prefix":          `%m [%p] it's \x `,
		"max_wal_senders":          "16",
		"wal_level":                "logical",
		"port":                     "6543",
	}
	primary.SynchronousStandbyNames = postgres.SynchronousStandbyNames(1, []string{"orders-3", "orders-2"})

	replica := base(15)
	replica.ClusterName = "orders-2"
	replica.PrimaryConnInfo = PrimaryConnInfo(ConnInfo{
		Host: "orders-rw", Port: 5432, User: "tusk_replication", ApplicationName: "orders-2",
		PassFile: "/controller/replication.pgpass", SSLMode: "disable",
	})
	replica.PrimarySlotName = "orders_2"
	replica.RestoreCommand = "/controller/tusk instance wal-restore %f %p"

	tls := base(15)
	tls.TLS = &TLSFiles{CertFile: "/tls/server.crt", KeyFile: "/tls/server.key", CAFile: "/tls/ca.crt"}

	archive := func(major int) ServerConfig {
		in := base(major)
		in.ArchiveCommand = "/controller/tusk instance wal-archive %p"
		in.ArchiveTimeout = "60s"
		in.UserParameters = map[string]string{"vacuum_defer_cleanup_age": "0", "wal_keep_size": "1GB"}
		return in
	}

	logging := func(major int) ServerConfig {
		in := base(major)
		if major >= 15 {
			in.JSONLog = &JSONLogFiles{Directory: "/run/tusk/log", FileName: "postgres.log"}
		}
		slow, wait, on := 250*time.Millisecond, 2*time.Second, true
		in.Logging = &Logging{SlowStatementThreshold: &slow, LockWaits: &on, LockWaitThreshold: &wait}
		return in
	}

	for name, in := range map[string]ServerConfig{
		"postgresql-logging-pg13": logging(13),
		"postgresql-logging-pg15": logging(15),
		"postgresql-primary-pg15": primary,
		"postgresql-replica-pg15": replica,
		"postgresql-tls-pg15":     tls,
		"postgresql-archive-pg13": archive(13),
		"postgresql-archive-pg15": archive(15),
		"postgresql-archive-pg17": archive(17),
	} {
		t.Run(name, func(t *testing.T) { golden(t, name, render(t, in).Text) })
	}
}

func TestLoggingRefusesWhatPostgreSQLCannotTake(t *testing.T) {
	negative, tiny, huge := -time.Second, time.Microsecond, 30*24*time.Hour
	for name, in := range map[string]ServerConfig{
		"jsonlog on 14": func() ServerConfig {
			in := base(14)
			in.JSONLog = &JSONLogFiles{Directory: "/d", FileName: "f.log"}
			return in
		}(),
		"a negative slow statement time": func() ServerConfig {
			in := base(15)
			in.Logging = &Logging{SlowStatementThreshold: &negative}
			return in
		}(),
		"a threshold past INT_MAX ms": func() ServerConfig { in := base(15); in.Logging = &Logging{SlowStatementThreshold: &huge}; return in }(),
		"a lock wait under 1ms":       func() ServerConfig { in := base(15); in.Logging = &Logging{LockWaitThreshold: &tiny}; return in }(),
	} {
		if _, err := PostgresqlConf(in); err == nil {
			t.Errorf("%s: rendered, want an error", name)
		}
	}
}

// lines returns the value of every "name = value" line for name.
func lines(text, name string) []string {
	var values []string
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, name+" = "); ok {
			values = append(values, v)
		}
	}
	return values
}

func TestTuskOwnedSettingsWin(t *testing.T) {
	in := base(17)
	in.UserParameters = map[string]string{
		"port": "1", "ssl": "on", "primary_conninfo": "host=evil", "archive_command": "rm -rf /",
		"hot_standby": "off", "logging_collector": "on", "include": "/etc/passwd",
		"include_dir": "/tmp", "include_if_exists": "/tmp/x", "work_mem": "8MB",
	}
	conf := render(t, in)
	for name, want := range map[string]string{
		"port": "'5432'", "ssl": "'off'", "primary_conninfo": "''", "archive_command": "''",
		"hot_standby": "'on'", "logging_collector": "'off'", "work_mem": "'8MB'",
	} {
		if got := lines(conf.Text, name); !slices.Equal(got, []string{want}) {
			t.Errorf("%s rendered as %q, want exactly [%s]", name, got, want)
		}
	}
	for _, name := range []string{"include", "include_dir", "include_if_exists"} {
		if got := lines(conf.Text, name); len(got) != 0 {
			t.Errorf("include directive %s rendered: %q", name, got)
		}
	}
	var ignored []string
	for _, p := range conf.Ignored {
		ignored = append(ignored, p.Name)
		if p.Reason == "" {
			t.Errorf("%s ignored without a reason", p.Name)
		}
	}
	want := []string{"archive_command", "hot_standby", "include", "include_dir", "include_if_exists", "logging_collector", "port", "primary_conninfo", "ssl"}
	if !slices.Equal(ignored, want) {
		t.Errorf("Ignored = %q, want %q (sorted)", ignored, want)
	}
}

func TestDefaultsAndWALLevel(t *testing.T) {
	tests := []struct {
		user        map[string]string
		wantLevel   string
		wantIgnored bool
	}{
		{nil, "'logical'", false},
		{map[string]string{"wal_level": "logical"}, "'logical'", false},
		{map[string]string{"wal_level": "replica"}, "'replica'", false},
		{map[string]string{"wal_level": "minimal"}, "'logical'", true},
		{map[string]string{"wal_level": "LOGICAL"}, "'logical'", true},
	}
	for _, tt := range tests {
		in := base(16)
		in.UserParameters = tt.user
		conf := render(t, in)
		if got := lines(conf.Text, "wal_level"); !slices.Equal(got, []string{tt.wantLevel}) {
			t.Errorf("user %v: wal_level = %q, want [%s]", tt.user, got, tt.wantLevel)
		}
		if got := len(conf.Ignored) == 1; got != tt.wantIgnored {
			t.Errorf("user %v: ignored %v, want ignored=%v", tt.user, conf.Ignored, tt.wantIgnored)
		}
	}
	conf := render(t, base(16))
	for name, want := range tuskDefaults {
		if got := lines(conf.Text, name); !slices.Equal(got, []string{"'" + want + "'"}) {
			t.Errorf("default %s = %q, want ['%s']", name, got, want)
		}
	}
}

func TestOwnedSettingsAreReservedAndKnown(t *testing.T) {
	for major := MinMajorVersion; major <= MaxMajorVersion; major++ {
		in := base(major)
		in.TLS = &TLSFiles{CertFile: "c", KeyFile: "k", CAFile: "ca"}
		in.ArchiveCommand = "x"
		for _, s := range ownedSettings(in) {
			if !IsReserved(s.name) {
				t.Errorf("PostgreSQL %d: Tusk sets %s but does not reserve it, so a user value could come first and confuse readers", major, s.name)
			}
			if why := unknownIn(s.name, major); why != "" {
				t.Errorf("PostgreSQL %d: Tusk renders %s: %s", major, s.name, why)
			}
		}
		hasLibrary := len(lines(render(t, in).Text, "archive_library")) == 1
		if hasLibrary != (major >= 15) {
			t.Errorf("PostgreSQL %d: archive_library rendered = %v; it exists from 15", major, hasLibrary)
		}
	}
}

func TestVersionUnknownUserSettingsAreIgnored(t *testing.T) {
	tests := []struct {
		major   int
		name    string
		ignored bool
	}{
		{15, "vacuum_defer_cleanup_age", false},
		{16, "vacuum_defer_cleanup_age", true},
		{13, "wal_keep_segments", true},
		{13, "wal_keep_size", false},
		{16, "allow_alter_system", true},
		{17, "allow_alter_system", false},
		{16, "old_snapshot_threshold", false},
		{17, "old_snapshot_threshold", true},
		{15, "debug_parallel_query", true},
		{16, "force_parallel_mode", true},
		{18, "work_mem", false},
	}
	for _, tt := range tests {
		in := base(tt.major)
		in.UserParameters = map[string]string{tt.name: "0"}
		conf := render(t, in)
		rendered := len(lines(conf.Text, tt.name)) == 1
		if rendered == tt.ignored || (len(conf.Ignored) == 1) != tt.ignored {
			t.Errorf("PostgreSQL %d, %s: rendered %v, ignored %v; want ignored=%v", tt.major, tt.name, rendered, conf.Ignored, tt.ignored)
		}
	}
}

func TestPostgresqlConfRejects(t *testing.T) {
	tests := map[string]func(*ServerConfig){
		"major 12":                   func(c *ServerConfig) { c.MajorVersion = 12 },
		"major 19":                   func(c *ServerConfig) { c.MajorVersion = 19 },
		"port 0":                     func(c *ServerConfig) { c.Port = 0 },
		"port 65536":                 func(c *ServerConfig) { c.Port = 65536 },
		"no listen addresses":        func(c *ServerConfig) { c.ListenAddresses = "" },
		"no socket dir":              func(c *ServerConfig) { c.SocketDir = "" },
		"slot name with dash":        func(c *ServerConfig) { c.PrimarySlotName, c.PrimaryConnInfo = "orders-2", "host=x" },
		"slot name too long":         func(c *ServerConfig) { c.PrimarySlotName, c.PrimaryConnInfo = strings.Repeat("a", 64), "host=x" },
		"slot without conninfo":      func(c *ServerConfig) { c.PrimarySlotName = "orders_2" },
		"TLS without key":            func(c *ServerConfig) { c.TLS = &TLSFiles{CertFile: "c"} },
		"newline in archive_command": func(c *ServerConfig) { c.ArchiveCommand = "true\nssl = off" },
		"CR in conninfo":             func(c *ServerConfig) { c.PrimaryConnInfo = "host=a\rssl=off" },
		"newline in user value":      func(c *ServerConfig) { c.UserParameters = map[string]string{"work_mem": "1MB'\nport = '1"} },
		"NUL in user value":          func(c *ServerConfig) { c.UserParameters = map[string]string{"work_mem": "1MB\x00"} },
		"uppercase name":             func(c *ServerConfig) { c.UserParameters = map[string]string{"Port": "1"} },
		"name with space":            func(c *ServerConfig) { c.UserParameters = map[string]string{"work mem": "1"} },
		"name with =":                func(c *ServerConfig) { c.UserParameters = map[string]string{"a=b": "1"} },
		"empty name":                 func(c *ServerConfig) { c.UserParameters = map[string]string{"": "1"} },
		"two dots":                   func(c *ServerConfig) { c.UserParameters = map[string]string{"a.b.c": "1"} },
		"leading digit":              func(c *ServerConfig) { c.UserParameters = map[string]string{"1a": "1"} },
		"trailing dot":               func(c *ServerConfig) { c.UserParameters = map[string]string{"a.": "1"} },
		"newline in name":            func(c *ServerConfig) { c.UserParameters = map[string]string{"a\nport": "1"} },
	}
	for name, mutate := range tests {
		in := base(15)
		mutate(&in)
		conf, err := PostgresqlConf(in)
		if err == nil {
			t.Errorf("%s: no error; rendered:\n%s", name, conf.Text)
		} else if conf.Text != "" {
			t.Errorf("%s: error %v but text rendered anyway", name, err)
		}
	}
}

// settingLine is the only shape a non-comment line may have: a name and
// one quoted value with every ' doubled and every \ doubled.
var settingLine = regexp.MustCompile(`^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)? = '([^'\\]|''|\\\\)*'$`)

func TestRenderedLinesCannotInjectSettings(t *testing.T) {
	in := base(17)
	in.ArchiveCommand = `cp '%p' "/archive/%f" \'; ssl = off`
	in.RestoreCommand = `\`
	in.PrimaryConnInfo = `host='a b' password=x\'y`
	in.PrimarySlotName = "s"
	in.UserParameters = map[string]string{"application_name": `'; port = '1`, "search_path": `\\'`, "x.y": "'"}
	conf := render(t, in)
	for _, l := range strings.Split(conf.Text, "\n") {
		if l == "" || strings.HasPrefix(l, "# ") {
			continue
		}
		if !settingLine.MatchString(l) {
			t.Errorf("line %q is not one quoted setting", l)
		}
	}
	if got := lines(conf.Text, "archive_command"); !slices.Equal(got, []string{`'cp ''%p'' "/archive/%f" \\''; ssl = off'`}) {
		t.Errorf("archive_command quoted as %q", got)
	}
}

func TestPostgresqlConfIsDeterministic(t *testing.T) {
	in := base(16)
	in.UserParameters = map[string]string{}
	for i := range 50 {
		in.UserParameters[string(rune('a'+i%26))+strings.Repeat("x", i)] = "1"
		in.UserParameters["port"] = "1"
		in.UserParameters["ssl"] = "1"
	}
	first := render(t, in)
	for range 20 {
		again := render(t, ServerConfig{
			MajorVersion: in.MajorVersion, Port: in.Port, ListenAddresses: in.ListenAddresses,
			SocketDir: in.SocketDir, ClusterName: in.ClusterName, UserParameters: maps.Clone(in.UserParameters),
		})
		if again.Text != first.Text || !slices.Equal(again.Ignored, first.Ignored) {
			t.Fatal("two renderings of the same input differ")
		}
	}
}

func TestPostgresqlConfHeader(t *testing.T) {
	text := render(t, base(15)).Text
	if !strings.HasPrefix(text, "# postgresql.conf for PostgreSQL 15.\n# This file is managed by Tusk and will be overwritten") {
		t.Errorf("header missing or changed:\n%s", text)
	}
}

func TestReservedParameters(t *testing.T) {
	got := ReservedParameters()
	if !slices.IsSorted(got) {
		t.Error("ReservedParameters is not sorted")
	}
	got[0] = "changed"
	if ReservedParameters()[0] == "changed" {
		t.Error("ReservedParameters returns the package's own slice")
	}
	if !IsReserved("primary_conninfo") || IsReserved("work_mem") {
		t.Error("IsReserved is wrong about primary_conninfo or work_mem")
	}
}
