"""Benchmark of the Redis Cluster layout (not a test): one node vs a 3-primary cluster.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.cluster            # full run, ~2 minutes
    .venv/bin/python -m benchmarks.cluster --quick    # smoke run, well under a minute
    .venv/bin/python -m benchmarks.cluster --single-url redis://127.0.0.1:6379/0 \\
        --cluster-url redis://127.0.0.1:7000
    .venv/bin/python -m benchmarks.cluster --registration   # only the sweep's registration cost

Without the URLs it starts its own throwaway servers on free loopback ports
(``benchmarks.harness.servers``: a Redis 7 node, and three cluster-enabled Redis 7 nodes
joined by ``redis-cli --cluster create``, 3 primaries, no replicas); it stops exactly those,
also on an error, Ctrl-C or SIGTERM. With a URL it uses that server instead, writes only
keys under a random prefix and deletes them at the end (the CPU figures then include
whatever else that server is doing).

Everything is measured in one run, alternating between the targets (appends in short
blocks, gets call by call) so that drift (CPU frequency, other load) hits them alike:

1. ``append_event`` latency, one client, sequential: the cluster (``RedisCluster`` client)
   against one node (``Redis`` client), for a session-only delta, one with ``user:`` keys and
   one with ``app:`` keys (which on a cluster takes a second script in the app's slot). For
   attribution: the cluster layout on the single node (``cluster=True``, ``Redis`` client);
   a raw ``EVALSHA 'return 1'`` on each client and on the key's ``ClusterNode`` directly; a
   raw HGETALL + HGET pipeline on each client; and the commands the scripts ran (``INFO
   commandstats`` around each block).
2. ``get_session`` of a 1,000-event session, full and last 20 events.
3. Server CPU per append: a fixed number of appends, spread over many users (so keys hash to
   every shard), from K client processes; ``INFO cpu`` on every node before and after.

``--registration`` runs only what registering users for the sweep costs on the cluster
(``sessions/_sweep.py``): ``append_event`` with ``app:`` keys and ``create_session`` of a new
user, each with the registration as shipped (a worker registers a user again once a minute),
switched off, switched off with a create's apps index written before its app step instead of
alongside it (the path before the registry), and on every write (``REGISTER_EVERY`` = 0: the
round trip it adds when it is paid), in interleaved rounds.

Latencies come from ``time.perf_counter_ns`` around each awaited call, with the garbage
collector run and its survivors frozen before each round (it stays enabled while timing).
Ratios are of p50s over all rounds; "per-round IQR" is the spread of the same ratio taken
round by round (percentiles 25 and 75, ``benchmarks.harness.timing.percentile``), a guide
to how much a verdict near its target can be trusted.

The package: this module holds what its parts share (the plan, the labels, sessions and
turns); ``latency`` runs phases 1 and 2, ``cpu`` phase 3, ``registration`` the
``--registration`` run and its table, ``report`` the other tables and the JSON result, and
``__main__`` the arguments, the servers and the run.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from benchmarks.harness import report
from benchmarks.harness.workloads import initial_state, make_kind_turn
from redis_agent_sessions import Event, RedisSessionService, Session

APP = "bench_app"
GET_SESSION_EVENTS = 1000
RECENT = 20
LATENCY_USERS = 48  # sessions (one per user) per target and delta kind
CPU_USERS = 384  # users per throughput run, split across the processes
CPU_TASKS = 4  # concurrent asyncio tasks per client process
TARGET_APPEND = {"session": 1.2, "user": 1.2, "app": 2.2}
TARGET_GET = 1.3

KINDS = ("session", "user", "app")
KIND_LABELS = {
    "session": "session keys only",
    "user": "session + user: keys",
    "app": "session + app: keys",
}
TARGETS = ("single", "layout", "cluster")
TARGET_LABELS = {
    "single": "1 node, Redis client",
    "layout": "1 node, Redis client, cluster layout (cluster=True)",
    "cluster": "3-primary cluster, RedisCluster client",
}
RAW_OPS = ("single", "cluster", "cluster-node", "pipe-single", "pipe-cluster")
RAW_LABELS = {
    "single": "raw EVALSHA 'return 1', 1 node, Redis client",
    "cluster": "raw EVALSHA 'return 1', cluster, RedisCluster client (routed)",
    "cluster-node": "raw EVALSHA 'return 1', cluster, the key's ClusterNode (no routing)",
    "pipe-single": "raw pipeline HGETALL + HGET, 1 node, Redis client",
    "pipe-cluster": "raw pipeline HGETALL + HGET, cluster, RedisCluster client",
}
RAW_LUA = "return 1"


@dataclass(frozen=True)
class Plan:
    """How many operations each phase runs."""

    name: str
    rounds: int  # interleaved rounds of the latency phases
    append_block: int  # appends per (target, delta kind) per round
    raw_block: int  # raw EVALSHAs per client per round
    get_full_block: int  # full get_session calls per target per round
    get_recent_block: int  # last-20 get_session calls per target per round
    warmup: int  # untimed calls per series before the first round
    cpu_appends: int  # appends per throughput run (N), split across the processes
    cpu_processes: tuple[int, ...]  # K values
    cpu_kinds: tuple[str, ...]
    cpu_rounds: int  # each (K, kind, target) runs this often, alternating
    idle_seconds: float  # how long the servers' idle CPU is measured (then subtracted)


FULL = Plan("full", 24, 120, 150, 5, 60, 300, 6000, (2, 4), ("user", "app"), 3, 2.0)
QUICK = Plan("quick", 3, 20, 40, 2, 10, 20, 400, (2,), ("user", "app"), 1, 0.3)

progress = report.Progress("cluster")


# -- servers ---------------------------------------------------------------------------------


def node_addresses(url: str, *, cluster: bool) -> list[tuple[str, int]]:
    """The node of ``url``, or the primaries of the cluster it belongs to."""
    if not cluster:
        with redis.Redis.from_url(url) as client:
            kwargs = client.get_connection_kwargs()
            return [(str(kwargs.get("host", "127.0.0.1")), int(kwargs.get("port", 6379)))]
    with redis.RedisCluster.from_url(url) as rc:
        return sorted((node.host, int(node.port)) for node in rc.get_primaries())


def slot_owner(url: str, key: str) -> tuple[str, int]:
    with redis.RedisCluster.from_url(url) as rc:
        node = rc.get_node_from_key(key)
        assert node is not None
        return node.host, int(node.port)


# -- workload --------------------------------------------------------------------------------


async def new_sessions(
    service: RedisSessionService, users: Sequence[str], limit: int = 16
) -> list[Session]:
    gate = asyncio.Semaphore(limit)

    async def one(user: str) -> Session:
        async with gate:
            return await service.create_session(app_name=APP, user_id=user, state=initial_state())

    return list(await asyncio.gather(*(one(u) for u in users)))


class Turns:
    """Prebuilt (session, event) pairs, round-robin over sessions."""

    def __init__(self, sessions: Sequence[Session], kind: str) -> None:
        self.sessions = sessions
        self.kind = kind
        self.turn = 0
        self.invocation = str(uuid.uuid4())

    def take(self, count: int) -> list[tuple[Session, Event]]:
        out = []
        for _ in range(count):
            session = self.sessions[self.turn % len(self.sessions)]
            out.append((session, make_kind_turn(self.turn, self.kind, self.invocation)))
            self.turn += 1
        return out
