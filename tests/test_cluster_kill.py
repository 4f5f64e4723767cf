"""SIGKILL of every primary of a Redis Cluster in turn while workers append with
``write_concern="replicas"``: nothing acknowledged is lost, nothing is stored twice, and the
workers see only the errors a failover may cause.

A killed primary hands nothing over: the cluster notices it is gone after
``--cluster-node-timeout`` and promotes its replica, and what the dead primary ran but had
not yet sent on is lost (replication is asynchronous). The write concern is what makes an
*acknowledged* write safe: ``append_event`` returns only once the replica has it (``WAIT``),
and that replica is the one promoted. The killed node is then started again on its port and
directory and rejoins as the new primary's replica (empty: nothing is persisted), resyncs,
and only then is the next primary killed, so that again one replica has every acknowledged
write. The cluster is a throwaway one of its own (``_local_cluster.py``).

A worker retries an append with the same event (the store makes a retry idempotent) after
the errors a failover may legitimately cause: redis-py's connection errors, timeouts,
CLUSTERDOWN and TRYAGAIN, and the library's WriteConcernError (no replica confirmed in
time, or the slot moved while it waited: the write may or may not be kept). Any other error
fails the test with its type and traceback.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.asyncio import Redis

from _cluster_load import (
    FAILOVER_ERRORS,
    Ack,
    Load,
    check_app_writes,
    check_stored,
    spread_users,
    start,
)
from _local_cluster import (
    SERVERS,
    LocalCluster,
    admin,
    cluster_ok,
    parse_nodes,
    ready,
    throwaway_cluster,
)
from redis_agent_sessions import (
    SessionServiceConfig,
    WriteConcernError,
)

APP = "kill_app"
# Short, so that a killed primary is replaced within a few seconds; long enough that a node
# starved on a loaded runner is not failed over behind the test's back.
NODE_TIMEOUT_MS = 1500
WRITE_TIMEOUT_MS = 500  # how long an append waits for the replica before WriteConcernError
CONCERN = SessionServiceConfig(
    write_concern="replicas", min_replicas=1, write_timeout_ms=WRITE_TIMEOUT_MS
)
# The whole test stays under a minute, whatever fails, with room for a loaded 2-core runner.
SETUP_SECONDS = 15  # starting the nodes and forming the cluster (about 3 s)
BODY_SECONDS = 40  # the workers, the three kills and the checks (about 12 s)
PROMOTE_SECONDS = 10  # from a kill until every other node has the replica as primary
REJOIN_SECONDS = 8  # from the restart until the node is a replica in sync
WARMUP_SECONDS = 0.7  # appends before the first kill
AFTER_SECONDS = 1.0  # appends after the last node rejoined
WORKERS = 3  # each owns one user on every shard
MAX_UNEXPECTED = 20  # a worker stops after this many errors a failover does not explain

# What a failover may legitimately raise (after redis-py's own retries): the worker retries
# the append with the same event. Other errors are counted, retried, and fail the test.
LOAD = Load(
    APP,
    (*FAILOVER_ERRORS, WriteConcernError),
    config=CONCERN,
    max_unexpected=MAX_UNEXPECTED,
    # A retry after a WriteConcernError from the app step learns it applied, and drops it.
    app_entry_may_be_gone=True,
)


@pytest.fixture(params=SERVERS)
def local_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with throwaway_cluster(
        tmp_path,
        node_timeout_ms=NODE_TIMEOUT_MS,
        setup_seconds=SETUP_SECONDS,
        kind=request.param,
    ) as cluster:
        yield cluster


# -- kills -----------------------------------------------------------------------------------


@dataclass
class Kill:
    primary: int  # port of the primary killed
    replica: int  # port of its replica, the new primary
    killed: float = 0.0  # time.monotonic() of the SIGKILL
    promoted: float = 0.0  # when every other node had the replica as primary, cluster ok
    rejoined: float = 0.0  # when the restarted node was the new primary's replica, in sync


Check = Callable[[list[Any], list[dict[str, dict[str, Any]]], list[dict[str, Any]]], bool]


async def wait_until(
    cluster: LocalCluster, ports: list[int], check: Check, what: str, seconds: float
) -> float:
    """Polls CLUSTER INFO, CLUSTER NODES and INFO replication of the nodes at ``ports``
    until ``check`` holds for them; when it did (time.monotonic())."""
    deadline = time.monotonic() + seconds
    clients = [Redis(port=p, socket_timeout=2, socket_connect_timeout=1) for p in ports]
    try:
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            try:
                infos = [await c.execute_command("CLUSTER", "INFO") for c in clients]
                views = [parse_nodes(await c.execute_command("CLUSTER", "NODES")) for c in clients]
                repl = [await c.info("replication") for c in clients]
            except redis.RedisError:
                continue
            if check(infos, views, repl):
                return time.monotonic()
        pytest.fail(f"{what}: not within {seconds} s; the nodes' logs:\n{cluster.logs()}")
    finally:
        for c in clients:
            await c.aclose()


async def kill_and_rejoin(cluster: LocalCluster, step: Kill) -> None:
    """SIGKILLs the primary, waits until its replica took over, starts it again and waits
    until it is that replica's replica, in sync."""
    node = cluster.node(step.primary)
    step.killed = time.monotonic()
    node.proc.kill()
    node.proc.wait(5)
    others = [n.port for n in cluster.nodes if n is not node]

    def promoted(infos: list[Any], views: list[Any], repl: list[Any]) -> bool:
        def primary(n: dict[str, Any]) -> bool:
            return n["port"] == step.replica and "master" in n["flags"] and bool(n["slots"])

        return all(cluster_ok(i) for i in infos) and all(
            any(primary(n) for n in view.values()) for view in views
        )

    what = f"the replica on {step.replica} taking over from {step.primary}"
    step.promoted = await wait_until(cluster, others, promoted, what, PROMOTE_SECONDS)
    node.restart()
    ports = [n.port for n in cluster.nodes]

    def rejoined(infos: list[Any], views: list[Any], repl: list[Any]) -> bool:
        mine = repl[ports.index(step.primary)]
        return (
            ready(infos, views, repl)
            and mine["role"] == "slave"
            and mine.get("master_port") == step.replica
        )

    what = f"{step.primary} rejoining as replica of {step.replica}"
    step.rejoined = await wait_until(cluster, ports, rejoined, what, REJOIN_SECONDS)


# -- workers ---------------------------------------------------------------------------------


# -- the test --------------------------------------------------------------------------------


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.cluster
async def test_sigkill_of_every_primary_loses_no_acknowledged_append(
    local_cluster: LocalCluster,
) -> None:
    try:
        await asyncio.wait_for(kills_under_load(local_cluster), BODY_SECONDS)
    except asyncio.TimeoutError:
        pytest.fail(f"not done after {BODY_SECONDS} s; the nodes' logs:\n{local_cluster.logs()}")


def primaries(port: int) -> dict[int, int]:
    """{primary port: its replica's port}, as the node at ``port`` sees it."""
    with admin(port) as client:
        view = parse_nodes(client.execute_command("CLUSTER", "NODES"))
    return {view[n["master"]]["port"]: n["port"] for n in view.values() if "slave" in n["flags"]}


async def kills_under_load(cluster: LocalCluster) -> None:
    ports = [n.port for n in cluster.nodes]
    pairs = primaries(ports[0])
    assert len(pairs) == 3

    # Users spread over every shard (named by its first primary): one per shard per worker.
    with admin(ports[0]) as probe:
        ranges = probe.execute_command("CLUSTER", "SLOTS")
    owned, shard_of = spread_users(APP, ranges, list(pairs), WORKERS)
    users = list(shard_of)

    hard_deadline = time.monotonic() + BODY_SECONDS - 6  # leaves time for the checks
    stop, logs, tasks = await start(LOAD, cluster.url, owned, hard_deadline)
    steps = [Kill(primary, replica) for primary, replica in pairs.items()]
    try:
        await asyncio.sleep(WARMUP_SECONDS)
        for step in steps:
            if any(t.done() for t in tasks):
                break  # a worker failed: its error is raised below
            await kill_and_rejoin(cluster, step)
        await asyncio.sleep(AFTER_SECONDS)
    finally:
        stop.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)

    acks = [a for log in logs for a in log.acks]
    retried = sum((log.retried for log in logs), Counter())
    unexpected = sum((log.unexpected for log in logs), Counter())
    # What the kills looked like to the workers (shown with -s, or on failure).
    summary = (
        f"{len(acks)} appends acknowledged; "
        + "; ".join(
            f"{s.primary} killed: replica took over in {(s.promoted - s.killed) * 1000:.0f} ms, "
            f"rejoined {(s.rejoined - s.promoted) * 1000:.0f} ms later"
            for s in steps
        )
        + f"; slowest append {max((a.acked - a.sent for a in acks), default=0) * 1000:.0f} ms; "
        + f"appends needing a retry: {sum(a.attempts > 1 for a in acks)}; "
        + f"retried errors by type: {dict(retried) or 'none'}; "
        + f"unexpected errors by type: {dict(unexpected) or 'none'}"
    )
    print(f"\n{summary}")
    tracebacks = {name: tb for log in logs for name, tb in log.tracebacks.items()}
    assert not unexpected, (
        f"errors a failover does not explain: {dict(unexpected)}\n{summary}\n"
        + "\n".join(f"--- first {name}:\n{tb}" for name, tb in tracebacks.items())
    )
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome

    # The roles switched: every killed primary came back as its old replica's replica.
    assert primaries(ports[0]) == {s.replica: s.primary for s in steps}
    # The kills were felt, and every worker kept working after the last, on every shard.
    assert retried, "no worker ever had to retry"
    after = [a for a in acks if a.sent > steps[-1].rejoined]
    assert {a.user for a in after} == set(users)

    def phase(ack: Ack) -> str:
        """When an append was acknowledged, relative to the kills."""
        for n, s in enumerate(steps):
            if s.killed <= ack.acked <= s.rejoined:
                return f"between kill {n} and its rejoin"
        return "before the first kill" if ack.acked < steps[0].killed else "between kills"

    # Each acknowledged append was on a replica before any kill could take it (the killed
    # node's own writes are gone, its replica's are not): none may be missing.
    app_state = await check_stored(APP, cluster.url, acks, shard_of, phase)

    # Every app: key holds its newest acknowledged write, whichever shard recorded it: an
    # append with app: keys is acknowledged only once a replica of the app's shard has
    # applied them too, so the kill of either shard's primary cannot take them back.
    await check_app_writes(APP, cluster.url, logs, shard_of, set(pairs), app_state)
