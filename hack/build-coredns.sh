#!/usr/bin/env bash
# Builds CoreDNS from the Go module proxy into the cache, once, and prints the
# path of the binary.
#
#   hack/build-coredns.sh
#
# A throwaway module requires github.com/coredns/coredns at the pinned version
# (its go.mod has no replace directives, so `go build <module main>` works);
# the key is the version and this recipe, so a change of either rebuilds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"

COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}

build_coredns() {
  local src="$out/src" tmp
  mkdir -p "$src"
  if [ ! -f "$src/go.sum" ]; then
    printf 'module tuskbuild/coredns\ngo 1.26.0\nrequire github.com/coredns/coredns %s\n' "$COREDNS_VERSION" >"$src/go.mod"
    printf '//go:build tools\npackage tools\nimport _ "github.com/coredns/coredns"\n' >"$src/tools.go"
    (cd "$src" && timed "go mod tidy (coredns)" go mod tidy)
  fi
  tmp=$(mktemp -d "$out/tmp.XXXX")
  log "Building CoreDNS $COREDNS_VERSION (about 3 minutes on a cold cache)"
  (cd "$src" && CGO_ENABLED=0 timed "go build coredns" \
    go build -trimpath -ldflags "-s -w" -o "$tmp/coredns" github.com/coredns/coredns)
  mkdir -p "$out/bin"
  mv "$tmp/coredns" "$out/bin/coredns" && rmdir "$tmp"
}

# The key: the version and the build function above (not this file's
# comments, nor the Go version).
key=$(recipe_key <(declare -f build_coredns) <(echo "$COREDNS_VERSION"))
out="$TUSK_CACHE_DIR/coredns/$COREDNS_VERSION-$key"
build_once "$out" "$(legacy_entry "$key" 7873eb1f6e1c "$TUSK_CACHE_DIR/coredns/$COREDNS_VERSION-6222b77d76a8")" build_coredns bin/coredns
echo "$out/bin/coredns"
