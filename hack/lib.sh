# Shared helpers for hack/ scripts. Source it; do not run it.
# Every heavy artefact lives under TUSK_CACHE_DIR (outside the checkout) so a
# fresh clone on the same machine reuses it; keys include the version and a
# hash of the recipe that built it, so a changed recipe rebuilds.

TUSK_CACHE_DIR=${TUSK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tusk}
export TUSK_CACHE_DIR

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# recipe_key FILE... prints a short hash of the given files' contents.
recipe_key() { cat "$@" | sha256sum | cut -c1-12; }

# timed LABEL CMD... runs CMD and logs how long it took.
timed() {
  local label=$1 start=$SECONDS
  shift
  "$@"
  local rc=$?
  log "$label took $((SECONDS - start))s (rc=$rc)"
  return $rc
}
