package pgconf

import (
	"fmt"
	"regexp"
	"strings"
)

// settingName is what PostgreSQL's configuration file lexer reads as a
// name (an identifier, or two joined by a dot for extension settings such
// as pg_stat_statements.max), restricted to lowercase as the CRD is:
// PostgreSQL folds names to lowercase, so "Port" would otherwise be a way
// around the reserved list.
var settingName = regexp.MustCompile(`^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$`)

// includeDirectives look like settings in postgresql.conf but make
// PostgreSQL read another file, which would let a parameter pull in
// settings nobody reviewed.
var includeDirectives = []string{"include", "include_dir", "include_if_exists"}

// checkName refuses a name that is not a setting name.
func checkName(name string) error {
	if !settingName.MatchString(name) {
		return fmt.Errorf("parameter name %q is not a PostgreSQL setting name: lowercase letters, digits and '_', with at most one '.' for extension settings", name)
	}
	return nil
}

// quoteValue single-quotes a value for postgresql.conf. PostgreSQL reads
// any value in quotes (numbers and booleans too), so quoting always is
// simpler than deciding when it is needed. Inside the quotes ' is doubled
// and \ is doubled, because PostgreSQL processes backslash escapes there
// (\n, \t, octal...) and would otherwise change values such as Windows-like
// paths or regular expressions. A line break cannot be quoted at all: the
// rest of the value would become a new line, that is a new setting, so it
// is an error. So is NUL, which would cut the value short.
func quoteValue(name, value string) (string, error) {
	if i := strings.IndexAny(value, "\n\r\x00"); i >= 0 {
		return "", fmt.Errorf("value of %s contains %q at byte %d: postgresql.conf values cannot contain line breaks or NUL", name, value[i], i)
	}
	v := strings.ReplaceAll(value, `\`, `\\`)
	v = strings.ReplaceAll(v, `'`, `''`)
	return "'" + v + "'", nil
}
