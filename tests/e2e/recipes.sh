#!/usr/bin/env bash
# The lock-service recipes against real services: starts its own redis-server, PostgreSQL and
# etcd on free loopback ports in a temporary directory, runs examples/recipes/redis.sh,
# examples/recipes/postgres.sh, examples/etcd/zombie.sh and examples/recipes/fencegate-lease.sh
# against the fencegate at FENCEGATE, and stops the services on exit. Each recipe must show its
# zombie refused (409 StaleFencingToken, the object keeping B's data).
#
#   FENCEGATE=127.0.0.1:8080 tests/e2e/recipes.sh [redis|postgres|etcd|lease|zookeeper ...]
#
# Without arguments it runs redis, postgres, etcd and lease. `zookeeper` (not run by default:
# scripts/test does not install it) also starts a ZooKeeper from Debian's zookeeper package and
# runs examples/recipes/zookeeper.py with a python3 that has kazoo (Debian's python3-kazoo).
#
# fencegate must be running in development mode (no keys) with a bucket `default` of object
# scope: `fencegate serve` on its embedded default is enough. The services' own Debian units
# are not used (nor need to run): scripts/test installs the packages. PostgreSQL refuses to run
# as root, so as root its instance runs as the user postgres (or nobody).
#
# Environment: FENCEGATE (host:port, required), BUCKET [default]. Prints each recipe's output,
# then "N passed, M failed"; exits 0 only if every recipe passed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
: "${FENCEGATE:?set FENCEGATE=host:port of a running fencegate}"
export FENCEGATE="${FENCEGATE#http://}" BUCKET="${BUCKET:-default}"
[[ $# -gt 0 ]] || set -- redis postgres etcd lease

T="$(mktemp -d)"
PIDS=()
cleanup() {
    [[ -n "${PGBIN:-}" && -e "$PGT/data/postmaster.pid" ]] &&
        as_pg "$PGBIN/pg_ctl" -D "$PGT/data" -m immediate stop >/dev/null 2>&1
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$T" ${PGT:+"$PGT"}
}
trap cleanup EXIT
trap 'exit 143' INT TERM HUP    # a signal still stops the services (through the EXIT trap)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# until SECONDS CMD...: retry CMD until it succeeds, at most SECONDS.
until_ok() {
    local limit=$(($1 * 10)); shift
    for ((i = 0; i < limit; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    return 1
}
need() { command -v "$1" >/dev/null || { echo "recipes: $1 not found: scripts/test installs it ($2)" >&2; exit 2; }; }
curl -fsS -o /dev/null "http://$FENCEGATE/healthz" || { echo "recipes: no fencegate at $FENCEGATE" >&2; exit 2; }
# Keys of their own, so that a second run against the same fencegate starts on fresh scopes
# (the services below restart their counters at 1).
RUN="recipes-$(date +%s)-$$"

start_redis() {
    need redis-server redis-server
    local port; port="$(free_port)"
    redis-server --bind 127.0.0.1 --port "$port" --dir "$T" --save '' --appendonly no \
        >"$T/redis.log" 2>&1 &
    PIDS+=($!)
    export REDIS_URL="redis://127.0.0.1:$port"
    until_ok 30 redis-cli -u "$REDIS_URL" PING || { cat "$T/redis.log" >&2; echo "recipes: redis-server did not start" >&2; exit 2; }
}

# PostgreSQL's server refuses root: as root, its files and process belong to another user. Its
# directory is in /tmp, which that user can reach (TMPDIR's parents may be private to root) and
# where the socket's path stays under the 107 bytes a Unix socket allows.
as_pg() { if [[ -n "${PGUSER_OS:-}" ]]; then (cd "$PGT" && runuser -u "$PGUSER_OS" -- "$@"); else "$@"; fi; }
start_postgres() {
    need psql postgresql
    PGBIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    [[ -x "$PGBIN/initdb" ]] || { echo "recipes: no PostgreSQL server in /usr/lib/postgresql: scripts/test installs it (postgresql)" >&2; exit 2; }
    PGT="$(mktemp -d /tmp/fencegate-pg.XXXXXX)"
    if [[ "$(id -u)" == 0 ]]; then
        PGUSER_OS=postgres; id postgres >/dev/null 2>&1 || PGUSER_OS=nobody
        chown "$PGUSER_OS" "$PGT"
    fi
    local port; port="$(free_port)"
    as_pg "$PGBIN/initdb" -D "$PGT/data" -U postgres -A trust --no-sync >"$T/initdb.log" 2>&1 ||
        { cat "$T/initdb.log" >&2; exit 2; }
    as_pg "$PGBIN/pg_ctl" -D "$PGT/data" -l "$PGT/log" -w -t 60 \
        -o "-h 127.0.0.1 -p $port -k $PGT -c fsync=off" start >/dev/null ||
        { cat "$PGT/log" >&2; echo "recipes: PostgreSQL did not start" >&2; exit 2; }
    export PGURL="postgresql://postgres@127.0.0.1:$port/postgres"
}

start_etcd() {
    need etcd etcd-server; need etcdctl etcd-client
    local client peer; client="$(free_port)"; peer="$(free_port)"
    etcd --data-dir "$T/etcd" --listen-client-urls "http://127.0.0.1:$client" \
        --advertise-client-urls "http://127.0.0.1:$client" \
        --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "default=http://127.0.0.1:$peer" >"$T/etcd.log" 2>&1 &
    PIDS+=($!)
    export ETCDCTL_API=3 ETCDCTL_ENDPOINTS="http://127.0.0.1:$client"
    until_ok 30 etcdctl endpoint health || { tail -20 "$T/etcd.log" >&2; echo "recipes: etcd did not start" >&2; exit 2; }
}

start_zookeeper() {
    need java zookeeper
    [[ -r /usr/share/java/zookeeper.jar ]] || { echo "recipes: no /usr/share/java/zookeeper.jar: apt-get install zookeeper" >&2; exit 2; }
    KAZOO_PY=""
    for py in python3 /usr/bin/python3 "$ROOT/.venv/bin/python3"; do
        "$py" -c 'import kazoo' 2>/dev/null && { KAZOO_PY="$py"; break; }
    done
    [[ -n "$KAZOO_PY" ]] || { echo "recipes: no python3 with kazoo: apt-get install python3-kazoo" >&2; exit 2; }
    local port; port="$(free_port)"
    printf 'tickTime=500\ndataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n' \
        "$T/zk" "$port" >"$T/zoo.cfg"
    java -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar org.apache.zookeeper.server.ZooKeeperServerMain \
        "$T/zoo.cfg" >"$T/zk.log" 2>&1 &
    PIDS+=($!)
    export ZK_HOSTS="127.0.0.1:$port"
    until_ok 60 "$KAZOO_PY" -c "from kazoo.client import KazooClient; z = KazooClient('$ZK_HOSTS'); z.start(timeout=2); z.stop()" ||
        { tail -20 "$T/zk.log" >&2; echo "recipes: ZooKeeper did not start" >&2; exit 2; }
}

passed=0 failed=0
for recipe in "$@"; do
    case "$recipe" in
        redis) start_redis; cmd=(bash "$ROOT/examples/recipes/redis.sh") ;;
        postgres) start_postgres; cmd=(bash "$ROOT/examples/recipes/postgres.sh") ;;
        etcd) start_etcd; cmd=(bash "$ROOT/examples/etcd/zombie.sh") ;;
        lease) cmd=(bash "$ROOT/examples/recipes/fencegate-lease.sh") ;;
        zookeeper) start_zookeeper; cmd=("$KAZOO_PY" "$ROOT/examples/recipes/zookeeper.py") ;;
        *) echo "recipes: no recipe $recipe (redis, postgres, etcd, lease, zookeeper)" >&2; exit 2 ;;
    esac
    echo "== $recipe: ${cmd[*]#"$ROOT/"}"
    if KEY="$RUN/$recipe.txt" "${cmd[@]}" 2>&1 | sed "s/^/[$recipe] /"; [[ "${PIPESTATUS[0]}" == 0 ]]; then
        echo "== $recipe: passed"; passed=$((passed + 1))
    else
        echo "== $recipe: FAILED"; failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[[ "$failed" == 0 ]]
