#!/usr/bin/env bash
# Regenerates deepcopy code, CRDs and RBAC and fails if anything changed:
# what is committed must be what the markers say.
set -euo pipefail
cd "$(dirname "$0")/.."
generated=(api/v1alpha1/zz_generated.deepcopy.go config/crd/bases config/rbac/role.yaml)
before=$(find "${generated[@]}" -type f -print0 2>/dev/null | sort -z | xargs -0 sha256sum)
make --no-print-directory generate manifests >/dev/null
after=$(find "${generated[@]}" -type f -print0 | sort -z | xargs -0 sha256sum)
if [ "$before" != "$after" ]; then
  echo "Generated files were stale and have been regenerated; review and commit them:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  exit 1
fi
echo "Generated files are up to date."
