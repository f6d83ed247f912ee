#!/usr/bin/env bash
# Builds container images without a Docker engine or a registry, and loads
# them into the cluster that will run them.
#
#   hack/images.sh build [IMAGE...]   write docker-archive tarballs, print their paths
#   hack/images.sh load  [IMAGE...]   build if needed, then import into the local
#                                     cluster's containerd, or `kind load` them
#   hack/images.sh images [IMAGE...]  build, then load when KUBECONFIG points at
#                                     the local cluster or kind (`make images`)
#   hack/images.sh rootfs MAJOR       print the path of the PostgreSQL MAJOR root
#                                     filesystem tarball (the upgrade tests run
#                                     pg_upgrade in them), building it if needed
#   hack/images.sh rootfs pgbouncer   the same for PgBouncer's root filesystem
#                                     (hack/install-pgbouncer.sh runs its binary)
#
# IMAGE: operator postgres-15 postgres-17 postgres-18 pgbouncer pause coredns
# minio prometheus (default: operator postgres-15 postgres-17 postgres-18 pgbouncer, the
# images a deployed operator runs; minio is the S3 server the
# backup e2e tests run in the cluster, prometheus the server the monitoring
# e2e test runs). Images are written by hack/imagebuild
# (go-containerregistry, the library behind crane). PostgreSQL root
# filesystems come from Debian packages via debootstrap and are cached under
# TUSK_CACHE_DIR keyed by their recipe; the operator image is rebuilt from
# bin/tusk every time because it changes with every commit.
set -euo pipefail
# A failed build inside $(build_one ...) must stop the script, not load the
# image of an older binary.
shopt -s inherit_errexit
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"
root=$(repo_root)

DEFAULT_IMAGES=(operator postgres-15 postgres-17 postgres-18 pgbouncer)
OPERATOR_TAG=tusk/operator:dev
PAUSE_TAG=tusk/pause:dev
COREDNS_TAG=tusk/coredns:1.15.0
MINIO_TAG=tusk/minio:dev
PROMETHEUS_TAG=tusk/prometheus:dev
PGBOUNCER_TAG=tusk/pgbouncer:dev
NONROOT=65532:65532

# imagebuild prints the path of the image writer, built once per recipe (its
# own module, with the Go its go.mod asks for).
imagebuild() {
  local key
  key=$(recipe_key "$here/imagebuild/main.go" "$here/imagebuild/go.mod" "$here/imagebuild/go.sum")
  imagebuild_dir="$TUSK_CACHE_DIR/tools/imagebuild-$key"
  build_once "$imagebuild_dir" "$(legacy_entry "$key" 670d657f9a77 "$TUSK_CACHE_DIR/tools/imagebuild-9ca0b5fee98d")" build_imagebuild imagebuild
  echo "$imagebuild_dir/imagebuild"
}

build_imagebuild() {
  mkdir -p "$imagebuild_dir"
  (cd "$here/imagebuild" && CGO_ENABLED=0 go build -trimpath -o "$imagebuild_dir/imagebuild" .) >&2
}

# debian_mirror prints the Debian mirror the host's apt already uses, so the
# images come from the same place as the host's packages.
debian_mirror() {
  local m=${DEBIAN_MIRROR:-}
  [ -n "$m" ] || m=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)[[:space:]]*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
  [ -n "$m" ] || m=$(sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\/debian\)[[:space:]].*/\2/p' /etc/apt/sources.list 2>/dev/null | head -n1)
  [ -n "$m" ] || die "cannot tell which Debian mirror apt uses: set DEBIAN_MIRROR to a Debian archive URL."
  echo "$m"
}

# pg_rootfs SUITE MAJOR prints the path of a cached tarball of a minimal
# Debian SUITE root filesystem with postgresql-MAJOR installed, building it
# once. A sidecar file .user holds the postgres uid:gid.
pg_rootfs() {
  local suite=$1 major=$2 key out
  # Keyed by the recipe itself (the function below), not by this whole file.
  key=$(recipe_key <(declare -f debootstrap_pg) <(echo "$suite $major"))
  out="$TUSK_CACHE_DIR/rootfs/postgres-$major-$suite-$key.tar"
  locked "$out.lock" ensure_rootfs "$suite" "$major" "$out"
  echo "$out"
}

ensure_rootfs() {
  local suite=$1 major=$2 out=$3
  [ ! -f "$out" ] || [ ! -f "$out.user" ] || return 0
  need_root "building the PostgreSQL root filesystem (debootstrap)"
  apt_ensure debootstrap:debootstrap
  timed "debootstrap $suite with postgresql-$major" debootstrap_pg "$suite" "$major" "$out"
}

debootstrap_pg() {
  local suite=$1 major=$2 out=$3 dir script=()
  dir=$(mktemp -d "$TUSK_CACHE_DIR/rootfs/build.XXXX")
  # A debootstrap older than the suite has no script of that name; Debian's
  # testing suite is built like sid.
  [ -e "/usr/share/debootstrap/scripts/$suite" ] || script=(/usr/share/debootstrap/scripts/sid)
  log "Running debootstrap $suite + postgresql-$major (2 to 10 minutes)"
  if ! debootstrap --variant=minbase --include="postgresql-$major" "$suite" "$dir" "$(debian_mirror)" "${script[@]}" >"$dir.log" 2>&1; then
    unmount_under "$dir" # debootstrap mounts /proc and /sys in the target
    die "debootstrap $suite failed: see $dir.log"
  fi
  rm -f "$dir.log"
  unmount_under "$dir"
  # The package creates a default cluster; the image ships only the server,
  # whoever runs it chooses where the data lives.
  chroot "$dir" sh -c "pg_dropcluster --stop $major main 2>/dev/null || true"
  # The package creates the postgres user with the first free system id,
  # which differs between suites (100 in bookworm, 101 in forky). Every
  # image gets uid 999, as the official images have: a pod that runs a new
  # major's image must own the data the old one wrote. (The group stays the
  # suite's: gid 999 is taken in forky, and PostgreSQL's data is the
  # owner's alone.)
  chroot "$dir" sh -c 'set -e; u=$(id -u postgres); usermod -u 999 postgres
    find / -xdev -uid "$u" -exec chown -h 999 {} +'
  chroot "$dir" install -d -o postgres -g postgres -m 2775 /run/postgresql
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/* "$dir"/usr/share/doc/* "$dir"/usr/share/man/*
  echo "$(chroot "$dir" id -u postgres):$(chroot "$dir" id -g postgres)" >"$out.user.tmp"
  tar --numeric-owner -C "$dir" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -cf "$out.tmp" .
  rm -rf "$dir"
  mv "$out.user.tmp" "$out.user" && mv "$out.tmp" "$out"
}

unmount_under() {
  local m
  awk -v d="$1" '$2 ~ "^"d {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m"
  done
}

# PgBouncer comes from the Debian suite whose release is new enough for
# what Tusk's pooler uses (1.24: trixie).
PGBOUNCER_SUITE=trixie

# pgbouncer_rootfs prints the path of a cached tarball of a minimal Debian
# root filesystem with pgbouncer installed, building it once (the same
# sidecar .user as pg_rootfs: the uid:gid the image runs as).
pgbouncer_rootfs() {
  local key out
  key=$(recipe_key <(declare -f debootstrap_pgbouncer) <(echo "$PGBOUNCER_SUITE"))
  out="$TUSK_CACHE_DIR/rootfs/pgbouncer-$PGBOUNCER_SUITE-$key.tar"
  locked "$out.lock" ensure_pgbouncer_rootfs "$out"
  echo "$out"
}

ensure_pgbouncer_rootfs() {
  local out=$1
  [ ! -f "$out" ] || [ ! -f "$out.user" ] || return 0
  need_root "building PgBouncer's root filesystem (debootstrap)"
  apt_ensure debootstrap:debootstrap
  timed "debootstrap $PGBOUNCER_SUITE with pgbouncer" debootstrap_pgbouncer "$out"
}

# debootstrap_pgbouncer is debootstrap_pg's recipe for the pgbouncer
# package (kept apart so that changing one never rebuilds the other's
# cached root filesystems). PgBouncer refuses to run as root; the package's
# postgres user runs it, with the uid the PostgreSQL images give theirs.
debootstrap_pgbouncer() {
  local out=$1 dir
  dir=$(mktemp -d "$TUSK_CACHE_DIR/rootfs/build.XXXX")
  log "Running debootstrap $PGBOUNCER_SUITE + pgbouncer (2 to 10 minutes)"
  if ! debootstrap --variant=minbase --include=pgbouncer "$PGBOUNCER_SUITE" "$dir" "$(debian_mirror)" >"$dir.log" 2>&1; then
    unmount_under "$dir"
    die "debootstrap $PGBOUNCER_SUITE failed: see $dir.log"
  fi
  rm -f "$dir.log"
  unmount_under "$dir"
  chroot "$dir" sh -c 'set -e; u=$(id -u postgres); usermod -u 999 postgres
    find / -xdev -uid "$u" -exec chown -h 999 {} +'
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/* "$dir"/usr/share/doc/* "$dir"/usr/share/man/*
  echo "$(chroot "$dir" id -u postgres):$(chroot "$dir" id -g postgres)" >"$out.user.tmp"
  tar --numeric-owner -C "$dir" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -cf "$out.tmp" .
  rm -rf "$dir"
  mv "$out.user.tmp" "$out.user" && mv "$out.tmp" "$out"
}

# Each build_* writes one image tarball and prints its path.
build_operator() {
  local out="$root/.cache/images/operator.tar"
  mkdir -p "$(dirname "$out")"
  make -C "$root" --no-print-directory build >&2
  "$(imagebuild)" -tag "$OPERATOR_TAG" -out "$out" -file "$root/bin/tusk:/tusk" \
    -user "$NONROOT" -entrypoint /tusk
  echo "$out"
}

build_postgres() {
  local suite=$1 major=$2 rootfs key out
  rootfs=$(pg_rootfs "$suite" "$major")
  key=$(recipe_key "$rootfs.user" <(echo "$rootfs") <(declare -f write_postgres_image))
  out="$TUSK_CACHE_DIR/images/postgres-$major-$key.tar"
  locked "$out.lock" write_postgres_image "$major" "$rootfs" "$out"
  echo "$out"
}

write_postgres_image() {
  local major=$1 rootfs=$2 out=$3
  [ ! -f "$out" ] || return 0
  log "Writing image tusk/postgres:$major"
  "$(imagebuild)" -tag "tusk/postgres:$major" -out "$out" -layer "$rootfs" -user "$(cat "$rootfs.user")" \
    -env "PATH=/usr/lib/postgresql/$major/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    -env LANG=C.UTF-8 -workdir /var/lib/postgresql
}

build_pgbouncer() {
  local rootfs key out
  rootfs=$(pgbouncer_rootfs)
  key=$(recipe_key "$rootfs.user" <(echo "$rootfs") <(declare -f write_pgbouncer_image))
  out="$TUSK_CACHE_DIR/images/pgbouncer-$key.tar"
  locked "$out.lock" write_pgbouncer_image "$rootfs" "$out"
  echo "$out"
}

# The operator's pods give PgBouncer its configuration file; the image only
# says which program runs.
write_pgbouncer_image() {
  local rootfs=$1 out=$2
  [ ! -f "$out" ] || return 0
  log "Writing image $PGBOUNCER_TAG"
  "$(imagebuild)" -tag "$PGBOUNCER_TAG" -out "$out" -layer "$rootfs" -user "$(cat "$rootfs.user")" \
    -env LANG=C.UTF-8 -workdir /var/lib/postgresql -entrypoint /usr/sbin/pgbouncer
}

# build_static NAME TAG BINARY DEST: an image holding one static binary.
build_static() {
  local name=$1 tag=$2 bin=$3 dest=$4 key out
  key=$(recipe_key "$bin" <(declare -f write_static_image))
  out="$TUSK_CACHE_DIR/images/$name-$key.tar"
  locked "$out.lock" write_static_image "$tag" "$bin" "$dest" "$out"
  echo "$out"
}

# Two builds of one image at once wrote the same temporary file (seen when
# make cluster-up and another images.sh ran together): one lock per image.
write_static_image() {
  local tag=$1 bin=$2 dest=$3 out=$4
  [ ! -f "$out" ] || return 0
  "$(imagebuild)" -tag "$tag" -out "$out" -file "$bin:$dest" -user "$NONROOT" -entrypoint "$dest"
}

build_pause() {
  local bin
  bin="$TUSK_CACHE_DIR/tools/pause-$(recipe_key "$here/pause/main.go" <(go env GOVERSION))"
  [ -x "$bin" ] || (cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin" ./hack/pause)
  build_static pause "$PAUSE_TAG" "$bin" /pause
}

build_coredns() { build_static coredns "$COREDNS_TAG" "$("$here/build-coredns.sh")" /coredns; }

build_minio() { build_static minio "$MINIO_TAG" "$("$here/install-minio.sh")" /minio; }

build_prometheus() { build_static prometheus "$PROMETHEUS_TAG" "$("$here/install-prometheus.sh")/prometheus" /prometheus; }

# pg_suite MAJOR prints the Debian suite whose postgresql-MAJOR Tusk's
# image of that major is built from.
pg_suite() {
  case $1 in
    15) echo bookworm ;;
    17) echo trixie ;;
    18) echo forky ;;
    *) die "no PostgreSQL $1 image: want 15, 17 or 18." ;;
  esac
}

build_one() {
  case $1 in
    operator) build_operator ;;
    postgres-*) build_postgres "$(pg_suite "${1#postgres-}")" "${1#postgres-}" ;;
    pgbouncer) build_pgbouncer ;;
    pause) build_pause ;;
    coredns) build_coredns ;;
    minio) build_minio ;;
    prometheus) build_prometheus ;;
    *) die "unknown image $1: want operator, postgres-15, postgres-17, postgres-18, pgbouncer, pause, coredns, minio or prometheus." ;;
  esac
}

# load_target prints "local", "kind:<name>" or "none" for the cluster in
# KUBECONFIG (the local cluster's kubeconfig when KUBECONFIG is unset).
load_target() {
  local kc=${KUBECONFIG:-$LOCAL_CLUSTER_KUBECONFIG} ctx
  ctx=$(KUBECONFIG=$kc kubectl config current-context 2>/dev/null || true)
  case $ctx in
    tusk-local) if [ -S "$LOCAL_CLUSTER_SOCK" ]; then echo local; else echo none; fi ;;
    kind-*) echo "kind:${ctx#kind-}" ;;
    *) echo none ;;
  esac
}

load_one() {
  local tar=$1 target=$2
  case $target in
    local) ctr --address "$LOCAL_CLUSTER_SOCK" -n k8s.io images import "$tar" >/dev/null ||
      die "importing $tar into the local cluster's containerd failed." ;;
    kind:*) kind load image-archive "$tar" --name "${target#kind:}" >&2 || die "kind load of $tar failed." ;;
    *) die "the cluster in KUBECONFIG is neither the local cluster nor kind: push the images in $(dirname "$tar") to a registry it can pull from." ;;
  esac
}

load_all() {
  local target=$1 tar i
  shift
  for i in "$@"; do
    tar=$(build_one "$i")
    log "Loading $i into $target"
    timed "load $i" load_one "$tar" "$target"
    [ "$i" != operator ] || restart_operator
  done
}

# restart_operator makes a deployed operator run the image just loaded: the
# tag stays tusk/operator:dev, so the Deployment itself does not change.
restart_operator() {
  local kc=${KUBECONFIG:-$LOCAL_CLUSTER_KUBECONFIG}
  if KUBECONFIG=$kc kubectl -n tusk-system get deployment/tusk-operator >/dev/null 2>&1; then
    log "Restarting the deployed operator on the new image"
    KUBECONFIG=$kc kubectl -n tusk-system rollout restart deployment/tusk-operator >/dev/null
  fi
}

main() {
  local cmd=${1:-build}
  shift || true
  local images=("$@")
  [ ${#images[@]} -gt 0 ] || images=("${DEFAULT_IMAGES[@]}")
  case $cmd in
    build) for i in "${images[@]}"; do build_one "$i"; done ;;
    load) load_all "$(load_target)" "${images[@]}" ;;
    rootfs)
      if [ "${images[0]:-}" = pgbouncer ]; then
        pgbouncer_rootfs
      else
        pg_rootfs "$(pg_suite "${images[0]:-}")" "${images[0]:-}"
      fi
      ;;
    images)
      local target
      target=$(load_target)
      if [ "$target" = none ]; then
        for i in "${images[@]}"; do build_one "$i"; done
        log "Built; KUBECONFIG points at neither the local cluster nor kind, so nothing was loaded."
      else
        load_all "$target" "${images[@]}"
      fi
      ;;
    *) die "usage: $0 build|load|images [IMAGE...] or $0 rootfs MAJOR|pgbouncer" ;;
  esac
}

main "$@"
