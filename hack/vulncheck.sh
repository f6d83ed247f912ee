#!/usr/bin/env bash
# govulncheck (pinned) against the pinned Go vulnerability database, both
# from the Go module proxy (hack/tools.sh). Any vulnerability the code
# reaches fails: of a module (upgrade it) or of the standard library (raise
# the `toolchain` line of go.mod; the binary we ship carries it).
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
  die "the Go standard library of $(go env GOVERSION) has known vulnerabilities the code reaches (above): raise go.mod's toolchain line to a release that fixes them"
fi
die "govulncheck found vulnerabilities (above) it did not attribute to a module or to the standard library"
