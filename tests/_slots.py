"""Clients for running the cluster code path: a slot-checking fakeredis, and a real cluster.

``SlotCheckedRedis`` is a fakeredis client that fails any script call, and any MULTI, whose
keys do not all hash to one Redis Cluster slot, as a real cluster would (CROSSSLOT). With
:func:`cluster_layout` the services treat it as a cluster client, so every contract test
run on it checks the slot discipline of the cluster code path without a cluster.
"""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest
from redis.asyncio.cluster import RedisCluster
from redis.cluster import key_slot

from redis_agent_sessions._redis import lifecycle as _lifecycle


class CrossSlotError(AssertionError):
    """The keys of one script call or transaction span several hash slots."""


def _slots(keys: list[Any]) -> set[int]:
    return {key_slot(k.encode() if isinstance(k, str) else k) for k in keys}


def _script_keys(args: tuple[Any, ...]) -> list[Any]:
    return list(args[3 : 3 + int(args[2])])


def check_one_slot(what: str, keys: list[Any]) -> None:
    if len(_slots(keys)) > 1:
        raise CrossSlotError(f"{what} spans several slots: {keys}")


def check_name(name: Any) -> None:
    # redis-py's cluster client routes by the command name: a bytes name breaks it.
    if not isinstance(name, str):
        raise CrossSlotError(f"command name {name!r} is not a str")


class SlotCheckedRedis(fakeredis.FakeAsyncRedis):  # type: ignore[misc]
    """fakeredis that refuses what a cluster refuses: multi-slot scripts and transactions,
    and command names a cluster client cannot route."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        check_name(args[0])
        if str(args[0]).upper() in ("EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO"):
            check_one_slot(f"script {args[1]!r}", _script_keys(args))
        return await super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction=transaction, shard_hint=shard_hint)
        execute = pipe.execute

        async def checked(*a: Any, **kw: Any) -> Any:
            keys: list[Any] = []
            for args, _ in pipe.command_stack:
                check_name(args[0])
                name = str(args[0]).upper()
                if name.startswith("EVAL"):
                    check_one_slot(f"script {args[1]!r}", _script_keys(args))
                    keys += _script_keys(args)
                elif len(args) > 1:
                    keys.append(args[1])
            if transaction:
                check_one_slot("MULTI", keys)
            return await execute(*a, **kw)

        pipe.execute = checked
        return pipe


def cluster_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Services built in this test treat a SlotCheckedRedis like a RedisCluster."""
    monkeypatch.setattr(
        _lifecycle,
        "is_cluster_client",
        lambda client: isinstance(client, (RedisCluster, SlotCheckedRedis)),
    )


async def flush_cluster(client: RedisCluster) -> None:
    await client.flushall(target_nodes=RedisCluster.PRIMARIES)
