package poolermanager

import (
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"tusk.dev/tusk/internal/metricsdoc"
	"tusk.dev/tusk/internal/pki"
)

var descCertExpiry = define(metricsdoc.Gauge, "tusk_pooler_certificate_expiry_timestamp_seconds",
	"When each of the pooler's certificates expires (Unix time), read from its file at every scrape: server (the one PgBouncer shows clients and the pooler API serves), auth (the auth role's client certificate PgBouncer logs in to PostgreSQL with). Absent while its file cannot be read.",
	"certificate")

// certificateFiles are the files of the certificates whose expiry the
// manager exports, by the metric's certificate label. They are read at
// every scrape: the kubelet rewrites a mounted Secret's files in place
// when the operator renews them.
type certificateFiles struct {
	server, auth string
}

func (f certificateFiles) samples() []prometheus.Metric {
	var out []prometheus.Metric
	for _, c := range []struct{ name, file string }{{"server", f.server}, {"auth", f.auth}} {
		if expiry, ok := certificateExpiry(c.file); ok {
			out = append(out, gauge(descCertExpiry, expiry, c.name))
		}
	}
	return out
}

// certificateExpiry is when the first certificate of the PEM file ends,
// in Unix seconds; false when there is no file or it holds none.
func certificateExpiry(file string) (float64, bool) {
	if file == "" {
		return 0, false
	}
	data, err := os.ReadFile(file) //nolint:gosec // a mounted Secret's file, named on the command line
	if err != nil {
		return 0, false
	}
	cert, err := pki.ParseCertificate(data)
	if err != nil {
		return 0, false
	}
	return float64(cert.NotAfter.Unix()), true
}
