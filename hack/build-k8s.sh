#!/usr/bin/env bash
# Builds Kubernetes components and etcd from the Go module proxy into the
# cache, once, and prints the directory holding them.
#
#   hack/build-k8s.sh [component...]   (default: kube-apiserver etcd)
#
# Components: kube-apiserver kube-controller-manager kube-scheduler kubelet
# kube-proxy etcd. Nothing is downloaded except Go modules: a throwaway module
# requires k8s.io/kubernetes and replaces each staging module (the
# "=> ./staging/..." lines of that version's go.mod) with its published v0.x
# twin; the version ldflags make the binaries report their real version.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"

K8S_VERSION=${K8S_VERSION:-v1.34.4}
ETCD_VERSION=${ETCD_VERSION:-v3.5.21}

components=("$@")
[ ${#components[@]} -gt 0 ] || components=(kube-apiserver etcd)

for c in "${components[@]}"; do
  case $c in
    etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy) ;;
    *) die "unknown component $c" ;;
  esac
done

# ldflags stamps both places client and server code read the version from.
version_ldflags() {
  local v=$1 major minor
  major=$(echo "${v#v}" | cut -d. -f1)
  minor=$(echo "${v#v}" | cut -d. -f2)
  local f=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    f+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$f"
}

# write_k8s_module DIR writes a module that can build k8s.io/kubernetes/cmd/*.
write_k8s_module() {
  local dir=$1 gomod staging
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
  [ -f "$gomod" ] || die "could not fetch go.mod of k8s.io/kubernetes@$K8S_VERSION"
  staging="v0.${K8S_VERSION#v1.}"
  {
    echo "module tuskbuild/k8s"
    echo "go 1.24.0"
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo "replace ("
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 '"$staging"'#p' "$gomod"
    echo ")"
  } >"$dir/go.mod"
  {
    echo "//go:build tools"
    echo "package tools"
    echo "import ("
    for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
      echo "	_ \"k8s.io/kubernetes/cmd/$c\""
    done
    echo ")"
  } >"$dir/tools.go"
}

build_k8s() {
  local src="$out/src/k8s"
  mkdir -p "$src"
  [ -f "$src/go.sum" ] || { write_k8s_module "$src" && (cd "$src" && timed "go mod tidy (k8s)" go mod tidy); }
  local pkgs=() tmp
  for c in "${missing_k8s[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  tmp=$(mktemp -d "$out/tmp.XXXX")
  log "Building ${missing_k8s[*]} $K8S_VERSION (several minutes on a cold cache)"
  (cd "$src" && CGO_ENABLED=0 timed "go build ${missing_k8s[*]}" \
    go build -trimpath -ldflags "-s -w $(version_ldflags "$K8S_VERSION")" -o "$tmp/" "${pkgs[@]}")
  mv "$tmp"/* "$bin/" && rmdir "$tmp"
}

build_etcd() {
  local src="$out/src/etcd" tmp
  mkdir -p "$src"
  if [ ! -f "$src/go.sum" ]; then
    printf 'module tuskbuild/etcd\ngo 1.24.0\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$src/go.mod"
    printf '//go:build tools\npackage tools\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$src/tools.go"
    (cd "$src" && timed "go mod tidy (etcd)" go mod tidy)
  fi
  tmp=$(mktemp -d "$out/tmp.XXXX")
  log "Building etcd $ETCD_VERSION"
  (cd "$src" && CGO_ENABLED=0 timed "go build etcd" go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
  mv "$tmp/etcd" "$bin/etcd" && rmdir "$tmp"
}

# The key: the versions and the build functions above (not this file's
# comments, nor the Go version).
key=$(recipe_key <(declare -f version_ldflags write_k8s_module build_k8s build_etcd) <(echo "$K8S_VERSION $ETCD_VERSION"))
out="$TUSK_CACHE_DIR/k8s/$K8S_VERSION-$key"
bin="$out/bin"
legacy=$(legacy_entry "$key" 3ba1c973025b "$TUSK_CACHE_DIR/k8s/$K8S_VERSION-72c70e143eae")

# build_missing builds the components asked for that the entry lacks.
build_missing() {
  adopt_legacy "$out" "$legacy"
  mkdir -p "$bin"
  missing_k8s=()
  local c need_etcd=false
  for c in "${components[@]}"; do
    [ -x "$bin/$c" ] && continue
    if [ "$c" = etcd ]; then need_etcd=true; else missing_k8s+=("$c"); fi
  done
  if $need_etcd; then build_etcd; fi
  [ ${#missing_k8s[@]} -eq 0 ] || build_k8s
}

locked "$out.lock" build_missing
echo "$bin"
