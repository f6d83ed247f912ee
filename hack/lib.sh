# shellcheck shell=bash
# Shared helpers for hack/ scripts. Source it; do not run it.
# Every heavy artefact lives under TUSK_CACHE_DIR (outside the checkout) so a
# fresh clone on the same machine reuses it. A third-party build is keyed by
# its own version and a hash of the recipe that built it, never by the Go
# toolchain: a changed recipe rebuilds it, a new Go release rebuilds only
# Tusk (and the tools that must run the toolchain's own Go, hack/tools.sh).

TUSK_CACHE_DIR=${TUSK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tusk}
export TUSK_CACHE_DIR

# Tusk builds with the toolchain its go.mod names (the `toolchain` line),
# which the go command fetches through the module proxy. Some machines set
# GOTOOLCHAIN=local in Go's own env file, which would silently build with an
# older release; an explicit GOTOOLCHAIN in the environment still wins.
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# recipe_key FILE... prints a short hash of the given files' contents.
recipe_key() { cat "$@" | sha256sum | cut -c1-12; }

# locked LOCKFILE CMD... runs CMD (a command or a function) holding an
# exclusive lock on LOCKFILE, so two builds of one cache key never run at
# once: the second waits, then finds what the first built. The lock is
# held by a subshell's descriptor, released when CMD returns.
locked() {
  local lock=$1
  shift
  mkdir -p "$(dirname "$lock")"
  (
    exec 9>>"$lock"
    flock 9
    "$@"
  )
}

# adopt_legacy DIR OLD renames OLD to DIR when only OLD exists (an empty OLD
# is none). Cache keys used to include the Go version; an entry built then
# from the same recipe is the same build, so it is reused instead of being
# rebuilt (which would cost a warm CI run up to an hour). Call it under the
# entry's lock.
adopt_legacy() {
  local dir=$1 old=$2
  [ -n "$old" ] && [ ! -e "$dir" ] && [ -e "$old" ] || return 0
  log "Reusing $old as $dir (the same recipe, keyed before keys left out the Go version)"
  mkdir -p "$(dirname "$dir")"
  mv "$old" "$dir"
}

# legacy_entry KEY KEY_THEN OLD prints OLD when KEY is KEY_THEN: the entry
# OLD was built by the very recipe that has KEY today, when its key still
# included the Go version. Any other KEY (a changed recipe) has no legacy.
legacy_entry() {
  [ "$1" != "$2" ] || echo "$3"
}

# build_once DIR LEGACY BUILD ARTEFACT... makes DIR hold every ARTEFACT (a
# path under DIR): under DIR's lock it adopts LEGACY (adopt_legacy), then
# runs BUILD unless each ARTEFACT is there.
build_once() {
  locked "$1.lock" build_once_locked "$@"
}

build_once_locked() {
  local dir=$1 legacy=$2 build=$3 a
  shift 3
  adopt_legacy "$dir" "$legacy"
  for a in "$@"; do
    [ -x "$dir/$a" ] || { "$build"; return; }
  done
}

# relocate_elf LIBDIR FILE... makes programs and libraries unpacked from a
# newer Debian's root filesystem run on this host: each ELF FILE is pointed
# at LIBDIR's own dynamic loader (programs) and libraries (DT_RPATH, which,
# unlike RUNPATH, also serves the libraries they load in turn). Files that
# are not ELF are left alone. LIBDIR is where the files will be run from.
relocate_elf() {
  local libdir=$1 f
  shift
  apt_ensure patchelf:patchelf
  for f in "$@"; do
    [ "$(head -c4 "$f" | tail -c3)" = ELF ] || continue
    case $f in
    *.so | *.so.*) patchelf --force-rpath --set-rpath "$libdir" "$f" ;;
    *) patchelf --set-interpreter "$libdir/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$libdir" "$f" ;;
    esac
  done
}

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
