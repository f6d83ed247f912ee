#!/usr/bin/env bash
# Builds Prometheus and promtool from the Go module proxy into the cache,
# once, and prints the directory holding both: tests check the shipped
# alert rules with `promtool test rules`, scrapes with `promtool check
# metrics`, and the e2e suite runs the server in the local cluster.
#
#   hack/install-prometheus.sh
#
# Prometheus publishes its Go module as v0.<minor>.<patch> for release
# 3.<minor>.<patch>. Its go.mod has no replace directives, so a throwaway
# module that requires it builds both main packages. Without the
# builtinassets tag the server has no web UI (it would need npm); its HTTP
# API, which the tests use, is whole. The key is the version and this
# recipe, so a change of either rebuilds.
set -euo pipefail
shopt -s inherit_errexit
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"

PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}

build_prometheus() {
  local src="$out/src" tmp
  mkdir -p "$src"
  if [ ! -f "$src/go.sum" ]; then
    printf 'module tuskbuild/prometheus\ngo 1.26.7\nrequire github.com/prometheus/prometheus %s\n' "$PROMETHEUS_VERSION" >"$src/go.mod"
    printf '//go:build tools\npackage tools\nimport (\n\t_ "github.com/prometheus/prometheus/cmd/prometheus"\n\t_ "github.com/prometheus/prometheus/cmd/promtool"\n)\n' >"$src/tools.go"
    (cd "$src" && timed "go mod tidy (prometheus)" go mod tidy)
  fi
  tmp=$(mktemp -d "$out/tmp.XXXX")
  log "Building Prometheus and promtool $PROMETHEUS_VERSION (several minutes on a cold cache)"
  for cmd in prometheus promtool; do
    (cd "$src" && CGO_ENABLED=0 timed "go build $cmd" \
      go build -trimpath -ldflags "-s -w" -o "$tmp/$cmd" "github.com/prometheus/prometheus/cmd/$cmd")
  done
  mkdir -p "$out/bin"
  mv "$tmp/prometheus" "$tmp/promtool" "$out/bin/" && rmdir "$tmp"
}

# The key: the version and the build function above (not this file's
# comments, nor the Go version).
key=$(recipe_key <(declare -f build_prometheus) <(echo "$PROMETHEUS_VERSION"))
out="$TUSK_CACHE_DIR/prometheus/$PROMETHEUS_VERSION-$key"
build_once "$out" "$(legacy_entry "$key" 7709d36c230e "$TUSK_CACHE_DIR/prometheus/$PROMETHEUS_VERSION-1890685c6611")" build_prometheus bin/prometheus bin/promtool
echo "$out/bin"
