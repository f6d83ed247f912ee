// Package apiauth is the client-certificate gate of the managers' HTTPS
// APIs (the instance manager's and the pooler manager's): a few paths are
// open (the kubelet's probes and a scrape present no certificate), every
// other needs the operator's client certificate. A leaf package (the
// standard library and internal/pki only), so both managers share one
// check rather than two that drift apart.
package apiauth

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"tusk.dev/tusk/internal/pki"
)

// Gate says who passes.
type Gate struct {
	// OpenPaths are served to anyone.
	OpenPaths []string
	// OpenPathWriteTimeout bounds writing an open path's answer to a
	// client that does not read it (none when zero). The other paths have
	// no such bound: some commands take minutes, and only the operator
	// may send them.
	OpenPathWriteTimeout time.Duration
	// CommonName is the only client certificate CommonName let through.
	CommonName string
	// Identity is a URI the client certificate must name besides: the
	// client CA also issues PostgresRoles' certificates, with the role's
	// name as CommonName, and only the operator's names its identity.
	Identity string
	// NoTLS lets every request through: an API served over plain HTTP
	// (a manager run without certificates, in development) has no client
	// certificate to check. Open paths keep their write timeout.
	NoTLS bool
}

// Wrap lets through to next the requests for an open path, and the others
// only with a client certificate verified in the handshake (by the
// server's tls.Config) whose CommonName and identity are the Gate's. A
// request without a verified certificate is answered 401, one with
// another certificate 403, with a JSON {"error": …} saying why.
func (g Gate) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(g.OpenPaths, r.URL.Path) {
			if g.OpenPathWriteTimeout > 0 {
				// Best effort: a connection that cannot set a deadline is served anyway.
				_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(g.OpenPathWriteTimeout))
			}
			next.ServeHTTP(w, r)
			return
		}
		if g.NoTLS {
			next.ServeHTTP(w, r)
			return
		}
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			writeError(w, http.StatusUnauthorized, "a client certificate signed by the cluster's CA is required")
			return
		}
		if msg := g.refusal(r.TLS.VerifiedChains[0][0]); msg != "" {
			writeError(w, http.StatusForbidden, msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refusal says why leaf may not pass, or nothing when it may.
func (g Gate) refusal(leaf *x509.Certificate) string {
	if cn := leaf.Subject.CommonName; cn != g.CommonName {
		return fmt.Sprintf("the client certificate's common name %q is not allowed here; only %q is", cn, g.CommonName)
	}
	if !pki.HasIdentity(leaf, g.Identity) {
		return fmt.Sprintf("the client certificate %q lacks the operator's identity (URI %s): a certificate issued "+
			"for a PostgreSQL role is not allowed here, whatever its name", leaf.Subject.CommonName, g.Identity)
	}
	return ""
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
