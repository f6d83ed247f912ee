#!/usr/bin/env bash
# Usage: hack/install-postgres-rootfs.sh MAJOR
#
# Makes PostgreSQL MAJOR's server programs run on this machine and prints
# their bin directory, for the instance manager's integration tests that
# need a newer major than the host's Debian ships (hack/install-postgres.sh
# gives bookworm's 15): subscriptions, say, which Tusk refuses below 16.
#
# The programs come from Tusk's PostgreSQL root filesystem of that major
# (hack/images.sh rootfs MAJOR, the upgrade tests' images), unpacked under
# /opt/tusk (TUSK_PG_HOST_DIR): not under TUSK_CACHE_DIR, which is in
# root's home when the tests run as root, where the postgres OS user that
# runs the servers cannot reach. They were built against a newer C library than the
# host's, so each program is pointed at the image's own dynamic loader and
# libraries (relocate_elf in hack/lib.sh), which also serve the libraries
# postgres loads later, such as libpqwalreceiver's libpq.
# PostgreSQL finds its share and lib directories relative to the program,
# which stay where the image has them under the unpacked root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"

major=${1:-}
[[ "$major" =~ ^[0-9]+$ ]] || die "usage: $0 MAJOR (such as 17)"
tarball=$("$here/images.sh" rootfs "$major")
key=$(recipe_key "$0" <(basename "$tarball") <(declare -f relocate_elf))
root="${TUSK_PG_HOST_DIR:-/opt/tusk}/postgres-$major-$key"
bindir="$root/usr/lib/postgresql/$major/bin"

unpack() {
  [ ! -x "$bindir/postgres" ] || return 0
  local tmp
  tmp=$(mktemp -d "$(dirname "$root")/build.XXXX")
  log "Unpacking PostgreSQL $major's programs from $tarball"
  tar -xf "$tarball" -C "$tmp" ./usr/lib/postgresql/"$major" ./usr/share/postgresql/"$major" ./usr/lib/x86_64-linux-gnu
  relocate_elf "$root/usr/lib/x86_64-linux-gnu" "$tmp/usr/lib/postgresql/$major"/bin/* "$tmp/usr/lib/postgresql/$major"/lib/*.so
  # The tests run postgres as the postgres OS user.
  chmod -R a+rX "$tmp"
  chmod 755 "$tmp"
  mv "$tmp" "$root"
}

mkdir -p "$(dirname "$root")"
locked "$root.lock" unpack
"$bindir/postgres" --version >/dev/null || die "PostgreSQL $major's programs from $tarball do not run here"
echo "$bindir"
