#!/usr/bin/env bash
# Fetches the Prometheus Operator's CRDs (PodMonitor, PrometheusRule...)
# from the Go module proxy, once, and prints their directory: a test
# installs them in envtest and applies config/monitoring with strict field
# validation, so a misspelt field in a PodMonitor fails here rather than in
# a user's cluster. The module cache keeps them.
#
#   hack/install-prometheus-operator-crds.sh
set -euo pipefail
shopt -s inherit_errexit
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"

PROMETHEUS_OPERATOR_VERSION=${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}
module=github.com/prometheus-operator/prometheus-operator
dir=$(cd / && go mod download -json "$module@$PROMETHEUS_OPERATOR_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$dir" ] || die "go mod download $module@$PROMETHEUS_OPERATOR_VERSION printed no directory"
crds="$dir/example/prometheus-operator-crd"
[ -f "$crds/monitoring.coreos.com_podmonitors.yaml" ] || die "no PodMonitor CRD in $crds"
echo "$crds"
