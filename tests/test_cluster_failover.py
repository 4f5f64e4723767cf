"""A manual failover of every primary of a Redis Cluster while workers append: nothing
acknowledged is lost, nothing is stored twice.

The test starts its own cluster (3 primaries, 3 replicas, of Redis and again of Valkey, each
node in its own temporary directory: ``_local_cluster.py``) because it changes the cluster's
topology; the shared clusters are left alone. Worker tasks,
each with its own ``RedisCluster`` client, append events (session-only, ``user:`` and
``app:`` deltas) to sessions of users on every shard, while ``CLUSTER FAILOVER`` promotes
the replica of each primary in turn. redis-py follows the MOVED replies itself; anything it
still raises (connection errors, timeouts, CLUSTERDOWN) the worker retries with the same
event, which the store makes idempotent. Afterwards every acknowledged append is stored
exactly once, the session and ``user:`` state are the fold of the stored deltas, and every
``app:`` key holds its newest acknowledged write.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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
from _local_cluster import SERVERS, LocalCluster, parse_nodes, settled, throwaway_cluster

APP = "failover_app"
# A manual failover does not wait on it; a node starved for this long on a loaded runner
# must not be failed over automatically behind the test's back.
NODE_TIMEOUT_MS = 5000
# The whole test stays under a minute, whatever fails: each phase has its own bound, with
# room for a loaded 2-core runner.
SETUP_SECONDS = 30  # starting the nodes and forming the cluster (about 3 s)
BODY_SECONDS = 40  # the workers, the three failovers and the checks (about 5 s)
SWITCH_SECONDS = 8  # one failover, until every node agrees on the new roles
WARMUP_SECONDS = 0.7  # appends before the first failover
AFTER_SECONDS = 1.0  # appends after the last failover completed
WORKERS = 3  # each owns one user on every shard

# What a worker may get from redis-py while a primary hands over (after redis-py's own
# retries): it retries the append with the same event; any other error ends the test.
LOAD = Load(APP, FAILOVER_ERRORS)


@pytest.fixture(params=SERVERS)
def local_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """A new 3-primary + 3-replica cluster (Redis, then Valkey) on free loopback ports; every
    node is killed at teardown, whatever happened."""
    with throwaway_cluster(
        tmp_path,
        node_timeout_ms=NODE_TIMEOUT_MS,
        setup_seconds=SETUP_SECONDS,
        kind=request.param,
    ) as cluster:
        yield cluster


# -- failover --------------------------------------------------------------------------------


@dataclass
class Failover:
    primary: int  # port of the primary handing over
    replica: int  # port of its replica, the new primary
    started: float = 0.0  # time.monotonic() when CLUSTER FAILOVER was sent
    done: float = 0.0  # when every node agreed on the new roles


async def topology(port: int) -> dict[int, int]:
    """{primary port: its replica's port}, as the node at ``port`` sees it."""
    async with Redis(port=port, socket_timeout=2) as client:
        view = parse_nodes(await client.execute_command("CLUSTER", "NODES"))
    return {view[n["master"]]["port"]: n["port"] for n in view.values() if "slave" in n["flags"]}


async def fail_over(ports: list[int], step: Failover) -> None:
    """``CLUSTER FAILOVER`` on ``step.replica`` (the default, coordinated kind), then waits
    until every node sees it as the primary and the old primary as its replica, and the old
    primary has resynced from it."""
    clients = {p: Redis(port=p, socket_timeout=2) for p in ports}
    try:
        step.started = time.monotonic()
        assert await clients[step.replica].execute_command("CLUSTER", "FAILOVER")
        deadline = step.started + SWITCH_SECONDS
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            try:
                views = [
                    parse_nodes(await c.execute_command("CLUSTER", "NODES"))
                    for c in clients.values()
                ]
                old = await clients[step.primary].info("replication")
            except redis.RedisError:
                continue
            by_port = [{n["port"]: (i, n) for i, n in v.items()} for v in views]
            if (
                all(settled(v) for v in views)
                and all(
                    "master" in b[step.replica][1]["flags"]
                    and b[step.primary][1]["master"] == b[step.replica][0]
                    for b in by_port
                )
                and old["role"] == "slave"
                and old.get("master_port") == step.replica
                and old.get("master_link_status") == "up"
            ):
                step.done = time.monotonic()
                return
        pytest.fail(f"the replica on {step.replica} did not take over from {step.primary}")
    finally:
        for c in clients.values():
            await c.aclose()


# -- workers ---------------------------------------------------------------------------------


# -- the test --------------------------------------------------------------------------------


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.cluster
async def test_manual_failover_of_every_primary_loses_no_acknowledged_append(
    local_cluster: LocalCluster,
) -> None:
    try:
        await asyncio.wait_for(failover_under_load(local_cluster), BODY_SECONDS)
    except asyncio.TimeoutError:
        pytest.fail(f"not done after {BODY_SECONDS} s; the nodes' logs:\n{local_cluster.logs()}")


async def failover_under_load(cluster: LocalCluster) -> None:
    ports = [n.port for n in cluster.nodes]
    pairs = await topology(ports[0])
    assert len(pairs) == 3

    # Users spread over every shard: one per shard for each worker.
    async with Redis(port=ports[0], socket_timeout=2) as probe:
        ranges = await probe.execute_command("CLUSTER", "SLOTS")
    owned, shard_of = spread_users(APP, ranges, list(pairs), WORKERS)
    users = list(shard_of)

    hard_deadline = time.monotonic() + BODY_SECONDS - 6  # leaves time for the checks
    stop, logs, tasks = await start(LOAD, cluster.url, owned, hard_deadline)
    steps = [Failover(primary, replica) for primary, replica in pairs.items()]
    try:
        await asyncio.sleep(WARMUP_SECONDS)
        for step in steps:
            assert not any(t.done() for t in tasks), "a worker stopped early"
            await fail_over(ports, step)
        await asyncio.sleep(AFTER_SECONDS)
    finally:
        stop.set()
        await asyncio.gather(*tasks)

    # The roles really switched: every old primary now replicates from its old replica.
    assert await topology(ports[0]) == {s.replica: s.primary for s in steps}

    acks = [a for log in logs for a in log.acks]

    def phase(ack: Ack) -> str:
        """When an append was acknowledged, relative to the handovers."""
        if ack.acked < steps[0].started:
            return "before the first handover"
        if any(s.started <= ack.acked <= s.done for s in steps):
            return "during a handover"
        return "after the last handover" if ack.acked > steps[-1].done else "between handovers"

    # Every worker kept working after the last handover, on every shard.
    last_done = max(s.done for s in steps)
    after = [a for a in acks if a.sent > last_done]
    assert {a.user for a in after} == set(users)
    assert any(phase(a) == "during a handover" for a in acks)

    # CLUSTER FAILOVER (without FORCE or TAKEOVER) is coordinated: the primary pauses its
    # writers, the replica waits until it has processed the primary's whole replication
    # stream, and only then takes over; the paused writers are then redirected to it. So
    # whatever the old primary acknowledged is on the new one: with asynchronous
    # replication a write acknowledged just before an *unplanned* failover may be lost,
    # but here not one acknowledged append may be missing, before, during or after.
    app_state = await check_stored(APP, cluster.url, acks, shard_of, phase)
    # Every app: key holds its newest acknowledged write, whichever shard recorded it.
    await check_app_writes(APP, cluster.url, logs, shard_of, set(pairs), app_state)

    # What the handovers looked like to the workers (shown with -s, or on failure).
    retried = sum((log.retried for log in logs), Counter())
    during = [a for a in acks if phase(a) == "during a handover"]
    print(
        f"\n{len(acks)} appends acknowledged ({len(during)} during a handover, "
        f"{len(after)} after the last); switches took "
        + ", ".join(f"{(s.done - s.started) * 1000:.0f} ms" for s in steps)
        + f"; slowest append {max(a.acked - a.sent for a in acks) * 1000:.0f} ms; "
        + f"appends needing a retry: {sum(a.attempts > 1 for a in acks)}; "
        + f"worker retries by error: {dict(retried) or 'none'}"
    )
