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
# module that requires it builds the server's main package. The key includes
# the Go version and this recipe, so a change rebuilds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"

MINIO_VERSION=${MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}
key=$(recipe_key "$here/install-minio.sh" <(echo "$MINIO_VERSION $(go env GOVERSION)"))
out="$TUSK_CACHE_DIR/minio/$MINIO_VERSION-$key"

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

[ -x "$out/bin/minio" ] || build_minio
echo "$out/bin/minio"
