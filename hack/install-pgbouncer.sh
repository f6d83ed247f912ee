#!/usr/bin/env bash
# Usage: hack/install-pgbouncer.sh
#
# Makes PgBouncer run on this machine and prints the path of its program,
# for the pooler's integration tests. The host's Debian (bookworm) ships
# 1.18; Tusk's pooler needs 1.24 or later, so the program comes from
# PgBouncer's root filesystem (hack/images.sh rootfs pgbouncer, the
# pooler image's), unpacked under /opt/tusk (TUSK_PG_HOST_DIR) where the
# postgres OS user that runs it when the tests run as root can reach it
# (PgBouncer refuses to run as root), and pointed at that root's own C
# library and libraries (relocate_elf in hack/lib.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"

tarball=$("$here/images.sh" rootfs pgbouncer)
key=$(recipe_key "$0" <(basename "$tarball") <(declare -f relocate_elf))
root="${TUSK_PG_HOST_DIR:-/opt/tusk}/pgbouncer-$key"
program="$root/usr/sbin/pgbouncer"

unpack() {
  [ ! -x "$program" ] || return 0
  local tmp
  tmp=$(mktemp -d "$(dirname "$root")/build.XXXX")
  log "Unpacking PgBouncer from $tarball"
  tar -xf "$tarball" -C "$tmp" ./usr/sbin/pgbouncer ./usr/lib/x86_64-linux-gnu
  relocate_elf "$root/usr/lib/x86_64-linux-gnu" "$tmp/usr/sbin/pgbouncer"
  chmod -R a+rX "$tmp"
  chmod 755 "$tmp"
  mv "$tmp" "$root"
}

mkdir -p "$(dirname "$root")"
locked "$root.lock" unpack
"$program" --version >/dev/null || die "PgBouncer from $tarball does not run here"
echo "$program"
