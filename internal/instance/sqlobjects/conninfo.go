package sqlobjects

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// A subscription's connection string is the user's (a Secret they name),
// and the subscriber's libpq reads it in the instance's pod. Keywords that
// make libpq read or write the pod's files are refused: passfile (the
// manager's holds the replication password, which a password request
// from any host would then carry), service and servicefile (files of
// connection settings), sslcert, sslkey and sslpassword (the pod's keys
// as a client's), sslcrl and sslcrldir, and sslkeylogfile (which writes
// the session's TLS secrets to a file). Authentication is SCRAM only
// (require_auth), so a publisher that asks for the password in clear or
// as MD5 gets nothing it can replay.

// refusedConnKeywords are the keywords a subscription's connection string
// may not set.
var refusedConnKeywords = []string{"passfile", "service", "servicefile", "sslcert", "sslkey", "sslpassword", "sslcrl", "sslcrldir", "sslkeylogfile"}

// requiredAuth is the only require_auth a subscription's connection
// string may set, and the one added when it sets none.
const requiredAuth = "scram-sha-256"

// checkSubscriptionConnInfo refuses a connection string that sets a
// keyword of refusedConnKeywords, another require_auth than SCRAM's, or
// that libpq could not read.
func checkSubscriptionConnInfo(name, connInfo string) error {
	keywords, err := connInfoKeywords(connInfo)
	if err != nil {
		return refuse("the connection string of subscription %s cannot be read: %v", name, err)
	}
	for _, k := range refusedConnKeywords {
		if _, ok := keywords[k]; ok {
			return refuse("the connection string of subscription %s sets %s, which makes the subscriber read or write files of its pod "+
				"(its keys, its passwords): give the publisher's CA as the subscription's CA, and the password in the string", name, k)
		}
	}
	if v, ok := keywords["require_auth"]; ok && v != requiredAuth {
		return refuse("the connection string of subscription %s sets require_auth=%s: a subscription authenticates with %s only, "+
			"which a publisher cannot replay", name, v, requiredAuth)
	}
	return nil
}

// withSCRAMOnly is connInfo asking libpq for SCRAM authentication only,
// unless it says so already.
func withSCRAMOnly(connInfo string) string {
	if keywords, err := connInfoKeywords(connInfo); err != nil || keywords["require_auth"] != "" {
		return connInfo
	}
	if isConnURI(connInfo) {
		sep := "?"
		if strings.Contains(connInfo, "?") {
			sep = "&"
		}
		return connInfo + sep + "require_auth=" + requiredAuth
	}
	return strings.TrimRight(connInfo, " \t\n") + " require_auth=" + requiredAuth
}

func isConnURI(s string) bool {
	return strings.HasPrefix(s, "postgresql://") || strings.HasPrefix(s, "postgres://")
}

// connInfoKeywords reads the keywords of a connection string, in libpq's
// key=value form or as a URI (its query's parameters). Not with pgconn's
// ParseConfig: it acts on what it reads (it opens a service file, a
// passfile, the certificate and key files), which is what is refused here.
func connInfoKeywords(s string) (map[string]string, error) {
	if isConnURI(s) {
		u, err := url.Parse(s)
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for k, v := range u.Query() {
			out[k] = v[len(v)-1]
		}
		return out, nil
	}
	return keywordPairs(s)
}

// keywordPairs reads libpq's key = value pairs: a value is single-quoted
// (\' and \\ escaped) or runs to the next space (backslash escapes).
func keywordPairs(s string) (map[string]string, error) {
	out := map[string]string{}
	for i := 0; ; {
		i = skipSpaces(s, i)
		if i == len(s) {
			return out, nil
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return nil, fmt.Errorf("%q has no value", strings.TrimSpace(s[i:]))
		}
		key := strings.TrimSpace(s[i : i+eq])
		if key == "" || strings.ContainsAny(key, " \t\n") {
			return nil, fmt.Errorf("%q is not a keyword", key)
		}
		value, next, err := connValue(s, skipSpaces(s, i+eq+1))
		if err != nil {
			return nil, fmt.Errorf("the value of %s: %w", key, err)
		}
		out[key], i = value, next
	}
}

func skipSpaces(s string, i int) int {
	for i < len(s) && slices.Contains([]byte(" \t\n\r"), s[i]) {
		i++
	}
	return i
}

// connValue reads the value that starts at i, and says where it ends.
func connValue(s string, i int) (string, int, error) {
	var b strings.Builder
	quoted := i < len(s) && s[i] == '\''
	if quoted {
		i++
	}
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case quoted && c == '\'':
			return b.String(), i + 1, nil
		case !quoted && slices.Contains([]byte(" \t\n\r"), c):
			return b.String(), i, nil
		default:
			b.WriteByte(c)
		}
	}
	if quoted {
		return "", i, fmt.Errorf("a quote is not closed")
	}
	return b.String(), i, nil
}
