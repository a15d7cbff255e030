#!/usr/bin/env bash
# A PostgreSQL formation with automatic failover on loopback, from Debian's
# pg_auto_failover packages: a monitor and two data nodes, a primary and a
# synchronous secondary, for the tests and the example that go through a
# failover (crates/ttw-tests/tests/failover.rs, the `failover` example).
#
#   eval "$(bash scripts/failover.sh start)"   # prints `export TTW_PGAF_URL=...; export TTW_PGAF_DIR=...`
#   bash scripts/failover.sh state "$TTW_PGAF_DIR"       # the monitor's view of the nodes
#   bash scripts/failover.sh primary "$TTW_PGAF_DIR"     # the primary's port
#   bash scripts/failover.sh kill "$TTW_PGAF_DIR" PORT   # SIGKILLs a node's keeper and postgres (its machine dies)
#   bash scripts/failover.sh freeze "$TTW_PGAF_DIR" PORT # SIGSTOPs a node's keeper and postgres (it hangs, refusing nothing)
#   bash scripts/failover.sh thaw "$TTW_PGAF_DIR" PORT   # SIGCONTs them
#   bash scripts/failover.sh restart "$TTW_PGAF_DIR" PORT # brings a killed node back (it rejoins as a secondary)
#   bash scripts/failover.sh switchover "$TTW_PGAF_DIR"  # a planned switchover
#   bash scripts/failover.sh stop "$TTW_PGAF_DIR"
#
# The monitor's health checks and the keepers' timeouts are tuned for a
# delay service (seconds, not pg_auto_failover's defaults of tens of
# seconds); each setting is named below with its default. Installs the
# packages if they are missing. PostgreSQL refuses to run as root, so every
# process runs as the `postgres` user (or the current user when not root),
# with its pg_autoctl state inside the formation's directory.
set -euo pipefail
# Below the ephemeral ports (32768 and up), which outgoing connections may
# hold when a node starts.
base="${TTW_PGAF_PORT:-25600}"

bindir() {
    local v
    v=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -1 || true)
    [ -n "$v" ] && [ -x "/usr/lib/postgresql/$v/bin/initdb" ] && echo "/usr/lib/postgresql/$v/bin"
}

as_pg() {
    local dir=$1
    shift
    local env="XDG_CONFIG_HOME=$dir/xdg/config XDG_DATA_HOME=$dir/xdg/data XDG_RUNTIME_DIR=$dir/xdg/run"
    if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "cd $dir && env $env $*"; else sh -c "cd $dir && env $env $*"; fi
}

# The data nodes' ports: the base port + 1 and + 2; the monitor's: the base.
node_dir() { echo "$1/node$(($2 - base))"; }

# A process and every process below it.
tree() {
    local child
    echo "$1"
    for child in $(pgrep -P "$1" 2>/dev/null); do tree "$child"; done
}

# SIGKILLs a process and every process below it. All are stopped first:
# pg_autoctl restarts a child that dies, and a child killed before its
# supervisor would come back as an orphan.
kill_tree() {
    local pids
    pids=$(tree "$1")
    # shellcheck disable=SC2086
    kill -STOP $pids 2>/dev/null || true
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
}

# SIGKILLs a pg_autoctl node (its supervisor, keeper and postgres): the
# supervisor is the process whose command line names the data directory.
# Sends SIGSTOP or SIGCONT ($2) to a node's keeper and postgres, every
# process below them: stopped, the node hangs without refusing anything
# (its kernel still accepts connections and acknowledges what is sent).
signal_node() {
    local nd=$1 sig=$2 pid pids=""
    for pid in $(pgrep -f "pg_autoctl (create|run).*--pgdata $nd( |$)"); do pids="$pids $(tree "$pid")"; done
    pid=$(head -1 "$nd/postmaster.pid" 2>/dev/null || true)
    [ -n "$pid" ] && pids="$pids $(tree "$pid")"
    # shellcheck disable=SC2086
    [ -n "$pids" ] && kill "-$sig" $pids 2>/dev/null
    return 0
}

kill_node() {
    local nd=$1 pid
    for pid in $(pgrep -f "pg_autoctl (create|run).*--pgdata $nd( |$)"); do kill_tree "$pid"; done
    pid=$(head -1 "$nd/postmaster.pid" 2>/dev/null || true)
    [ -n "$pid" ] && kill_tree "$pid"
    return 0
}

psql_at() { psql -X -q -t -A -h 127.0.0.1 -U postgres -p "$@"; }

wait_for_states() {
    local dir=$1 want=$2 i
    for i in $(seq 1 240); do
        if [ "$(state "$dir" | grep -cE "$want")" -ge 2 ] && state "$dir" | grep -q '| *primary *| *primary'; then
            return 0
        fi
        sleep 0.5
    done
    echo "the formation did not reach a primary and a secondary in 120 s:" >&2
    state "$dir" >&2 || true
    for log in "$dir"/*.log; do tail -n 20 "$log" >&2; done
    return 1
}

state() { as_pg "$1" pg_autoctl show state --pgdata "$1/monitor" 2>/dev/null; }

start_node() {
    local dir=$1 port=$2 nd
    nd=$(node_dir "$dir" "$port")
    as_pg "$dir" "nohup pg_autoctl create postgres --pgctl $(bindir)/pg_ctl --pgdata $nd --pgport $port \
        --hostname 127.0.0.1 --listen 127.0.0.1 --name node$((port - base)) --auth trust --no-ssl --dbname postgres --username postgres \
        --monitor postgres://autoctl_node@127.0.0.1:$base/pg_auto_failover?sslmode=disable \
        --run >>$dir/node$((port - base)).log 2>&1 &"
}

case "${1:-}" in
start)
    if ! command -v pg_autoctl >/dev/null 2>&1 || [ -z "$(bindir)" ]; then
        echo "installing pg_auto_failover from the system packages" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql pg-auto-failover-cli postgresql-15-auto-failover >&2
    fi
    # pg_autoctl reaches its own server on the packages' socket directory,
    # which only the packages' service would otherwise create.
    if [ ! -d /var/run/postgresql ] && [ "$(id -u)" = 0 ]; then
        mkdir -p /var/run/postgresql && chown postgres /var/run/postgresql
    fi
    dir=$(mktemp -d /tmp/ttw-pgaf.XXXXXX)
    mkdir -p "$dir/xdg/config" "$dir/xdg/data" "$dir/xdg/run"
    chmod 700 "$dir/xdg/run"
    [ "$(id -u)" = 0 ] && chown -R postgres "$dir"
    as_pg "$dir" "nohup pg_autoctl create monitor --pgctl $(bindir)/pg_ctl --pgdata $dir/monitor --pgport $base \
        --hostname 127.0.0.1 --auth trust --no-ssl --run >>$dir/monitor.log 2>&1 &"
    for i in $(seq 1 120); do
        psql_at "$base" -d pg_auto_failover -c 'select 1' >/dev/null 2>&1 && break
        sleep 0.5
    done
    # The monitor's failure detection, tuned from its defaults (in ms):
    # a check every 1 s (5,000), a 1 s timeout (5,000), 1 retry (2) after
    # 0.5 s (2,000); a node is unhealthy after 3 s without news (20,000);
    # a new primary waits 5 s for the old one to demote itself (30,000).
    psql_at "$base" -d pg_auto_failover >/dev/null <<'SQL'
ALTER SYSTEM SET pgautofailover.health_check_period = 1000;
ALTER SYSTEM SET pgautofailover.health_check_timeout = 1000;
ALTER SYSTEM SET pgautofailover.health_check_max_retries = 1;
ALTER SYSTEM SET pgautofailover.health_check_retry_delay = 500;
ALTER SYSTEM SET pgautofailover.node_considered_unhealthy_timeout = 3000;
ALTER SYSTEM SET pgautofailover.primary_demote_timeout = 5000;
SELECT pg_reload_conf();
SQL
    start_node "$dir" $((base + 1))
    # The first node must be the primary before the second one joins.
    for i in $(seq 1 240); do
        state "$dir" | grep -q '| *single *| *single' && break
        sleep 0.5
    done
    start_node "$dir" $((base + 2))
    wait_for_states "$dir" 'secondary *\| *secondary|primary *\| *primary'
    # The keepers' own timeouts (in s), below the monitor's demote timeout:
    # a primary that cannot reach the monitor or a standby demotes itself
    # after 3 s (20).
    for port in $((base + 1)) $((base + 2)); do
        as_pg "$dir" pg_autoctl config set --pgdata "$(node_dir "$dir" "$port")" timeout.network_partition_timeout 3 >/dev/null
    done
    uri=$(as_pg "$dir" pg_autoctl show uri --pgdata "$dir/monitor" --formation default)
    echo "export TTW_PGAF_URL='$uri'"
    echo "export TTW_PGAF_DIR=$dir"
    ;;
state)
    state "${2:?usage: failover.sh state DIR}"
    ;;
primary)
    dir="${2:?usage: failover.sh primary DIR}"
    state "$dir" | awk -F'|' '$6 ~ /primary/ && $7 ~ /primary/ { split($3, hp, ":"); gsub(/ /, "", hp[2]); print hp[2] }'
    ;;
kill)
    dir="${2:?usage: failover.sh kill DIR PORT}"
    port="${3:?usage: failover.sh kill DIR PORT}"
    kill_node "$(node_dir "$dir" "$port")"
    ;;
freeze)
    dir="${2:?usage: failover.sh freeze DIR PORT}"
    port="${3:?usage: failover.sh freeze DIR PORT}"
    signal_node "$(node_dir "$dir" "$port")" STOP
    ;;
thaw)
    dir="${2:?usage: failover.sh thaw DIR PORT}"
    port="${3:?usage: failover.sh thaw DIR PORT}"
    signal_node "$(node_dir "$dir" "$port")" CONT
    ;;
restart)
    dir="${2:?usage: failover.sh restart DIR PORT}"
    port="${3:?usage: failover.sh restart DIR PORT}"
    as_pg "$dir" "nohup pg_autoctl run --pgdata $(node_dir "$dir" "$port") >>$dir/node$((port - base)).log 2>&1 &"
    ;;
switchover)
    dir="${2:?usage: failover.sh switchover DIR}"
    as_pg "$dir" pg_autoctl perform switchover --pgdata "$dir/monitor" --formation default
    ;;
stop)
    dir="${2:?usage: failover.sh stop DIR}"
    for nd in "$dir"/node1 "$dir"/node2 "$dir"/monitor; do kill_node "$nd"; done
    rm -rf "$dir"
    ;;
*)
    echo "usage: failover.sh start | state DIR | primary DIR | kill DIR PORT | restart DIR PORT | switchover DIR | stop DIR" >&2
    exit 2
    ;;
esac
