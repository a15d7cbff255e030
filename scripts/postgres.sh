#!/usr/bin/env bash
# Starts a throwaway PostgreSQL on loopback for the durable layer's tests.
#
#   eval "$(bash scripts/postgres.sh start)"   # prints `export DATABASE_URL=...; export TTW_PG_DIR=...`
#   bash scripts/postgres.sh stop "$TTW_PG_DIR"
#
# Installs the server from the system packages if it is missing. The server
# refuses to run as root, so it runs as the `postgres` user the package
# creates (or the current user when not root).
set -euo pipefail
port="${TTW_PG_PORT:-55432}"

bindir() {
    local v
    v=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -1 || true)
    [ -n "$v" ] && [ -x "/usr/lib/postgresql/$v/bin/initdb" ] && echo "/usr/lib/postgresql/$v/bin"
}

as_pg() {
    if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$1"; else sh -c "$1"; fi
}

case "${1:-}" in
start)
    if [ -z "$(bindir)" ]; then
        echo "installing postgresql from the system packages" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    fi
    bin=$(bindir)
    dir=$(mktemp -d /tmp/ttw-pg.XXXXXX)
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    as_pg "$bin/initdb -D $dir -A trust -U postgres >/dev/null"
    as_pg "$bin/pg_ctl -D $dir -o '-p $port -k /tmp -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off -c shared_preload_libraries=pg_stat_statements' -l $dir/log -w start" >&2
    echo "export DATABASE_URL=postgres://postgres@127.0.0.1:$port/postgres"
    echo "export TTW_PG_DIR=$dir"
    ;;
stop)
    dir="${2:?usage: postgres.sh stop DIR}"
    bin=$(bindir)
    as_pg "$bin/pg_ctl -D $dir -m fast stop" >&2 || true
    rm -rf "$dir"
    ;;
*)
    echo "usage: postgres.sh start | stop DIR" >&2
    exit 2
    ;;
esac
