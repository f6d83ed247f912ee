#!/usr/bin/env bash
# Makes sure PostgreSQL 15's server programs are installed (from Debian's
# packages): the instance manager's integration tests run real postgres
# processes with them. Prints the bin directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"

PG_MAJOR=${PG_MAJOR:-15}
bindir=/usr/lib/postgresql/$PG_MAJOR/bin
if [ ! -x "$bindir/postgres" ] || [ ! -x "$bindir/pg_rewind" ]; then
  [ "$(id -u)" = 0 ] || die "PostgreSQL $PG_MAJOR is not installed; run as root or: apt-get install postgresql-$PG_MAJOR"
  log "Installing postgresql-$PG_MAJOR from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  # Only the programs are needed: keep Debian from creating and starting a
  # cluster of its own.
  mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/tusk-no-main.conf
  apt-get install -y -qq --no-install-recommends "postgresql-$PG_MAJOR" >&2
fi
echo "$bindir"
