# shellcheck shell=bash
# Finds a Postgres for modelplane and exports DATABASE_URL. Sourced by run.sh and test.sh.
#
# In order: DATABASE_URL if set; a server already answering on 127.0.0.1:5432 (user
# postgres, trust auth); a private cluster under .dev/postgres started with the local
# initdb/pg_ctl; on Debian/Ubuntu under CI, the `postgresql` package installed first;
# else a message saying how to get one.

MODELPLANE_ROOT=${MODELPLANE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
PRIVATE_PG_DIR="$MODELPLANE_ROOT/.dev/postgres"
PRIVATE_PG_PORT=${MODELPLANE_PRIVATE_PG_PORT:-54329}

log() { printf '\033[1;34m==>\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31merror:\033[0m %s\n' "$*" >&2; exit 1; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pg_bindir() {
  local dir
  for dir in /usr/lib/postgresql/*/bin; do
    [ -x "$dir/initdb" ] && { echo "$dir"; return 0; }
  done
  command -v initdb >/dev/null 2>&1 && { dirname "$(command -v initdb)"; return 0; }
  return 1
}

# Runs a command as the postgres user when we are root (initdb refuses to run as root).
as_pg_user() {
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
  else
    "$@"
  fi
}

start_private_cluster() {
  local bin=$1
  mkdir -p "$PRIVATE_PG_DIR"
  [ "$(id -u)" = 0 ] && { id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres; chown -R postgres "$PRIVATE_PG_DIR"; }
  if [ ! -f "$PRIVATE_PG_DIR/data/PG_VERSION" ]; then
    log "creating a private Postgres cluster in .dev/postgres"
    as_pg_user "$bin/initdb" -D "$PRIVATE_PG_DIR/data" -U postgres --auth=trust >/dev/null
  fi
  if ! port_open "$PRIVATE_PG_PORT"; then
    log "starting the private Postgres on 127.0.0.1:$PRIVATE_PG_PORT"
    as_pg_user "$bin/pg_ctl" -D "$PRIVATE_PG_DIR/data" -l "$PRIVATE_PG_DIR/server.log" -w \
      -o "-h 127.0.0.1 -p $PRIVATE_PG_PORT -k $PRIVATE_PG_DIR" start >/dev/null
  fi
  export DATABASE_URL="postgres://postgres@127.0.0.1:$PRIVATE_PG_PORT/modelplane"
}

# Exports DATABASE_URL pointing at database `$1` (default modelplane).
ensure_postgres() {
  local dbname=${1:-modelplane} bin
  if [ -n "${DATABASE_URL:-}" ]; then
    log "using DATABASE_URL from the environment"
    return 0
  fi
  if port_open 5432; then
    export DATABASE_URL="postgres://postgres@127.0.0.1:5432/$dbname"
    log "using the Postgres server on 127.0.0.1:5432"
    return 0
  fi
  if ! bin=$(pg_bindir); then
    if [ "${CI:-}" = true ] && command -v apt-get >/dev/null 2>&1; then
      log "installing postgresql from the Debian packages"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
      bin=$(pg_bindir) || die "postgresql was installed but initdb was not found"
    else
      die "no Postgres found. Set DATABASE_URL, start a server on 127.0.0.1:5432, or install PostgreSQL (Debian/Ubuntu: apt-get install postgresql) so a private one can be started."
    fi
  fi
  start_private_cluster "$bin"
  export DATABASE_URL="${DATABASE_URL%/*}/$dbname"
}

# Creates the database named in DATABASE_URL if it does not exist yet.
ensure_database() {
  local url=$1 base name
  base=${url%/*}
  name=${url##*/}
  name=${name%%\?*}
  if command -v psql >/dev/null 2>&1; then
    if ! psql "$base/postgres" -tAc "select 1 from pg_database where datname = '$name'" 2>/dev/null | grep -q 1; then
      log "creating database $name"
      psql "$base/postgres" -qc "create database \"$name\"" >/dev/null
    fi
  else
    ensure_sqlx_cli
    DATABASE_URL=$url sqlx database create
  fi
}

# Drops the database at `url` if it exists (connections to it are ended).
drop_database() {
  local url=$1 base name
  base=${url%/*}
  name=${url##*/}
  name=${name%%\?*}
  if command -v psql >/dev/null 2>&1; then
    psql "$base/postgres" -qc "drop database if exists \"$name\" with (force)" >/dev/null
  else
    ensure_sqlx_cli
    DATABASE_URL=$url sqlx database drop -y >/dev/null
  fi
}

# sqlx-cli, only where there is no psql to create and drop databases with.
ensure_sqlx_cli() {
  if ! command -v sqlx >/dev/null 2>&1 || ! sqlx --version 2>/dev/null | grep -q '0\.9\.'; then
    log "installing sqlx-cli 0.9.0 (about two minutes, once)"
    cargo install sqlx-cli --version 0.9.0 --locked --no-default-features --features postgres,rustls >&2
  fi
}
