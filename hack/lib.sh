# shellcheck shell=bash
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

# repo_root prints the checkout this script belongs to.
repo_root() { cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd; }

# The local single-node cluster (hack/local-cluster) keeps its host state in
# dirs of its own, so it never touches what the host already runs. The
# sourcing scripts use these.
# shellcheck disable=SC2034
{
LOCAL_CLUSTER_STATE=${TUSK_LOCAL_CLUSTER_STATE:-/var/lib/tusk-local-cluster}
LOCAL_CLUSTER_RUN=${TUSK_LOCAL_CLUSTER_RUN:-/run/tusk-local-cluster}
LOCAL_CLUSTER_SOCK=$LOCAL_CLUSTER_RUN/containerd/containerd.sock
LOCAL_CLUSTER_KUBECONFIG=$(repo_root)/.cache/local-cluster/kubeconfig
}

# need_root exits with one sentence unless the script runs as root.
need_root() {
  [ "$(id -u)" -eq 0 ] || die "$1 needs root (it runs containerd, the kubelet and changes host networking): run it with sudo."
}

# apt_ensure CMD:PACKAGE... installs the Debian packages whose commands are
# missing (CI machines start with none of them).
apt_ensure() {
  local missing=() pair
  for pair in "$@"; do
    [ -e "${pair%%:*}" ] || command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them: install them with your package manager."
  log "Installing Debian packages: ${missing[*]}"
  apt-get update -qq >&2 || die "apt-get update failed: check that the Debian package mirror is reachable."
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
    die "apt-get install ${missing[*]} failed: see the messages above."
}
