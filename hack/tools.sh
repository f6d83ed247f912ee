#!/usr/bin/env bash
# Installs the pinned developer tools from the Go module proxy into the cache
# (once per version) and prints the path of the one asked for.
#
#   hack/tools.sh controller-gen|golangci-lint|gotestsum|govulncheck|vulndb
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"

CONTROLLER_GEN_VERSION=v0.23.0
GOLANGCI_LINT_VERSION=v2.15.0
GOTESTSUM_VERSION=v1.13.0
GOVULNCHECK_VERSION=v1.9.0
# The Go vulnerability database as the module proxy serves it (the
# golang.org/x/vulndb module's data/osv): govulncheck reads it as a
# directory of OSV entries, so no other host is reached. Raise the pin to
# see newer advisories.
VULNDB_VERSION=v0.0.0-20261105234957-e22db6528018

install_tool() { # name module version
  local name=$1 module=$2 version=$3
  local dir="$TUSK_CACHE_DIR/tools/$name-$version-$(go env GOVERSION)"
  if [ ! -x "$dir/$name" ]; then
    log "Installing $name $version from the Go module proxy"
    mkdir -p "$dir"
    GOBIN="$dir" CGO_ENABLED=0 timed "go install $name" go install "$module@$version" >&2
  fi
  echo "$dir/$name"
}

# vulndb downloads the pinned vulnerability database module and prints the
# directory of its OSV entries.
vulndb() {
  local dir
  dir=$(go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir/data/osv" ] || die "golang.org/x/vulndb@$VULNDB_VERSION has no data/osv"
  echo "$dir/data/osv"
}

case ${1:-} in
  controller-gen) install_tool controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen "$CONTROLLER_GEN_VERSION" ;;
  golangci-lint) install_tool golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint "$GOLANGCI_LINT_VERSION" ;;
  gotestsum) install_tool gotestsum gotest.tools/gotestsum "$GOTESTSUM_VERSION" ;;
  govulncheck) install_tool govulncheck golang.org/x/vuln/cmd/govulncheck "$GOVULNCHECK_VERSION" ;;
  vulndb) vulndb ;;
  *) die "usage: $0 controller-gen|golangci-lint|gotestsum|govulncheck|vulndb" ;;
esac
