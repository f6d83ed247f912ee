#!/usr/bin/env bash
# govulncheck (pinned) against the pinned Go vulnerability database, both
# from the Go module proxy (hack/tools.sh). A vulnerability of a module the
# code reaches fails; one of the standard library is reported, with the Go
# release that fixes it, and does not fail: the toolchain is the machine's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"
cd "$here/.."

govulncheck=$("$here/tools.sh" govulncheck)
db=$("$here/tools.sh" vulndb)
rc=0
out=$("$govulncheck" -db "file://$db" ./... 2>&1) || rc=$?
echo "$out"
# 0: nothing found; 3: vulnerabilities found; anything else: it could not run.
case $rc in
  0) exit 0 ;;
  3) ;;
  *) die "govulncheck failed (exit $rc)" ;;
esac
if grep -Eq 'Found in: [^ ]+@v[0-9]' <<<"$out"; then
  die "modules the code calls have known vulnerabilities (above): upgrade them to the 'Fixed in' versions"
fi
if grep -Eq 'Found in: [^ ]+@go[0-9]' <<<"$out"; then
  log "WARNING: the Go standard library of $(go env GOVERSION) has known vulnerabilities the code reaches (above); build with a Go release that fixes them"
fi
