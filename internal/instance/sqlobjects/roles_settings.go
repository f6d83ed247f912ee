package sqlobjects

import (
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// listSettings are the parameters a role may set whose value is a list of
// names (GUC_LIST_QUOTE): PostgreSQL stores each item quoted as an
// identifier when needed, so their values are compared item by item.
var listSettings = []string{"search_path", "temp_tablespaces", "local_preload_libraries", "session_preload_libraries"}

// SettingName is a parameter's name in SQL, each part quoted.
func SettingName(name string) string {
	return pgx.Identifier(strings.Split(name, ".")).Sanitize()
}

// SettingValue is a parameter's value in ALTER ROLE ... SET: one literal,
// or one per item of a list parameter.
func SettingValue(name, value string) string {
	if !slices.Contains(listSettings, name) {
		return Literal(value)
	}
	items := splitSettingList(value)
	for i, item := range items {
		items[i] = Literal(item)
	}
	return strings.Join(items, ", ")
}

// sameSetting says whether stored, as pg_db_role_setting has it, is the
// value asked for.
func sameSetting(name, stored, value string) bool {
	if !slices.Contains(listSettings, name) {
		return stored == value
	}
	return slices.Equal(splitSettingList(stored), splitSettingList(value))
}

// splitSettingList splits a list parameter's value as PostgreSQL reads it
// (SplitIdentifierString): items separated by commas, each a name in
// double quotes ("" for a quote) or a bare name, downcased.
func splitSettingList(value string) []string {
	var items []string
	var item strings.Builder
	quoted, inQuotes := false, false
	flush := func() {
		s := item.String()
		if !quoted {
			s = strings.ToLower(strings.TrimSpace(s))
		}
		items = append(items, s)
		item.Reset()
		quoted = false
	}
	for i := 0; i < len(value); i++ {
		c := value[i]
		switch {
		case inQuotes && c == '"' && i+1 < len(value) && value[i+1] == '"':
			item.WriteByte('"')
			i++
		case c == '"':
			if !inQuotes && !quoted {
				item.Reset() // spaces before a quoted item
			}
			inQuotes = !inQuotes
			quoted = true
		case !inQuotes && c == ',':
			flush()
		case !inQuotes && quoted && (c == ' ' || c == '\t'):
			// spaces around a quoted item
		default:
			item.WriteByte(c)
		}
	}
	flush()
	return items
}
