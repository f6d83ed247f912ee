#!/usr/bin/env bash
# Builds the MinIO server from the Go module proxy into the cache, once, and
# prints the path of the binary: the backup code's integration tests run it
# on loopback as a real S3 server (internal/testenv.StartS3).
#
#   hack/install-minio.sh
#
# MinIO tags its releases RELEASE.<date>, which are not semantic versions, so
# the module is pinned at a pseudo-version (`go list -m github.com/minio/minio@latest`
# names the newest). Its go.mod has no replace directives, so a throwaway
# module that requires it builds the server's main package. The key is the
# version and this recipe, so a change of either rebuilds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"

MINIO_VERSION=${MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}

build_minio() {
  local src="$out/src" tmp
  mkdir -p "$src"
  if [ ! -f "$src/go.sum" ]; then
    printf 'module tuskbuild/minio\ngo 1.24.0\nrequire github.com/minio/minio %s\n' "$MINIO_VERSION" >"$src/go.mod"
    printf '//go:build tools\npackage tools\nimport _ "github.com/minio/minio"\n' >"$src/tools.go"
    (cd "$src" && timed "go mod tidy (minio)" go mod tidy)
  fi
  tmp=$(mktemp -d "$out/tmp.XXXX")
  log "Building the MinIO server $MINIO_VERSION (a few minutes on a cold cache)"
  (cd "$src" && CGO_ENABLED=0 timed "go build minio" \
    go build -trimpath -ldflags "-s -w" -o "$tmp/minio" github.com/minio/minio)
  mkdir -p "$out/bin"
  mv "$tmp/minio" "$out/bin/minio" && rmdir "$tmp"
}

# The key: the version and the build function above (not this file's
# comments, nor the Go version).
key=$(recipe_key <(declare -f build_minio) <(echo "$MINIO_VERSION"))
out="$TUSK_CACHE_DIR/minio/$MINIO_VERSION-$key"
build_once "$out" "$(legacy_entry "$key" d69a52f2de9c "$TUSK_CACHE_DIR/minio/$MINIO_VERSION-8507b840d003")" build_minio bin/minio
echo "$out/bin/minio"
