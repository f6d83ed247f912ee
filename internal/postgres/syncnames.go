package postgres

import (
	"slices"
	"strconv"
	"strings"
)

// SynchronousStandbyNames renders synchronous_standby_names for quorum
// commit: "ANY n (s1, s2, ...)". With it, a commit on the primary returns
// only once any number of the listed standbys have flushed its WAL, so
// an acknowledged write survives losing the primary.
//
// The standbys are application_name values (the replicas' instance names,
// see ConnInfo.ApplicationName), written as double-quoted identifiers with
// embedded " doubled so that any name is taken literally (unquoted, a name
// like "first" would read as a keyword). They are sorted and
// de-duplicated so the text, and therefore the reload decision, depends
// only on the set. Empty names are left out: no standby can have one.
//
// It returns "" (asynchronous replication) when number <= 0 or there are
// no standbys. A number larger than the list is rendered as asked, never
// capped: PostgreSQL accepts it and then every commit waits until that
// many standbys are connected, which can be forever. That is the "block"
// behaviour; a caller that wants "degrade" must lower the number (or
// return "") itself, and report that it did.
func SynchronousStandbyNames(number int, standbys []string) string {
	names := slices.DeleteFunc(slices.Clone(standbys), func(s string) bool { return s == "" })
	slices.Sort(names)
	names = slices.Compact(names)
	if number <= 0 || len(names) == 0 {
		return ""
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = `"` + strings.ReplaceAll(n, `"`, `""`) + `"`
	}
	return "ANY " + strconv.Itoa(number) + " (" + strings.Join(quoted, ", ") + ")"
}
