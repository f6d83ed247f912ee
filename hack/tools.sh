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

# install_tool NAME MODULE VERSION [per-toolchain] installs NAME once and
# prints its path. Built with the toolchain of Tusk's go.mod (from the
# checkout, so its `toolchain` line applies). A tool that type-checks Go
# code, the standard library included, with the go/types it was built with
# is keyed by that toolchain too (per-toolchain): it must know the language
# and library of the Go that builds Tusk. The others are keyed by their own
# version only, so a new Go release does not rebuild them.
install_tool() {
  local name=$1 version=$3 key=$3 legacy
  tool_module=$2 tool_name=$1
  legacy="$TUSK_CACHE_DIR/tools/$name-$version-go1.26.8" # the key before it left out the Go version
  if [ "${4:-}" = per-toolchain ]; then
    key+="-$(cd "$here/.." && go env GOVERSION)"
    legacy=""
  fi
  tool_dir="$TUSK_CACHE_DIR/tools/$name-$key" tool_version=$version
  build_once "$tool_dir" "$legacy" go_install_tool "$name"
  echo "$tool_dir/$name"
}

go_install_tool() {
  log "Installing $tool_name $tool_version from the Go module proxy"
  mkdir -p "$tool_dir"
  (cd "$here/.." && GOBIN="$tool_dir" CGO_ENABLED=0 timed "go install $tool_name" go install "$tool_module@$tool_version" >&2)
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
  controller-gen) install_tool controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen "$CONTROLLER_GEN_VERSION" per-toolchain ;;
  golangci-lint) install_tool golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint "$GOLANGCI_LINT_VERSION" per-toolchain ;;
  gotestsum) install_tool gotestsum gotest.tools/gotestsum "$GOTESTSUM_VERSION" ;;
  govulncheck) install_tool govulncheck golang.org/x/vuln/cmd/govulncheck "$GOVULNCHECK_VERSION" per-toolchain ;;
  vulndb) vulndb ;;
  *) die "usage: $0 controller-gen|golangci-lint|gotestsum|govulncheck|vulndb" ;;
esac
