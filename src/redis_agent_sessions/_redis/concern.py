"""Write concern: when a write counts as acknowledged (``SessionServiceConfig.write_concern``).

``primary`` acknowledges once the primary ran the script. ``replicas`` sends ``WAIT n
timeout`` and ``aof`` sends ``WAITAOF 1 n timeout`` (after a WAIT when n > 0) right after
the script, in the same pipeline on the same connection (WAIT counts the writes of its own
connection), so the acknowledgement costs no extra round trip, only the time the replicas
(or the fsync) take; each wait may take up to the timeout.
A shortfall never undoes the write: it is reported as WriteConcernError once the whole
operation (on a cluster, both steps) is done.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import InvalidResponse, NoPermissionError, NoScriptError, ResponseError

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.calls import C, R
from redis_agent_sessions._redis.scripts import Registered
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import WriteConcernError

__all__ = ["WriteConcern", "run"]


@dataclass
class WriteConcern:
    """How one engine waits after its writes."""

    mode: str
    replicas: int
    timeout_ms: int
    _checked: bool = field(default=False, repr=False)

    @classmethod
    def of(cls, config: SessionServiceConfig) -> WriteConcern | None:
        if config.write_concern == "primary":
            return None
        return cls(config.write_concern, config.min_replicas, config.write_timeout_ms)

    @functools.cached_property
    def commands(self) -> list[tuple[Any, ...]]:
        """What follows the script; the last one's reply says whether it was enough."""
        wait = ("WAIT", self.replicas, self.timeout_ms)
        if self.mode == "replicas":
            return [wait]
        waitaof = ("WAITAOF", 1, self.replicas, self.timeout_ms)
        # Measured on Redis 8.2: a WAITAOF for replicas pipelined right behind the write
        # takes up to a second, because the replica answers its GETACK before its own
        # fsync and then acks only once a second. A WAIT first lets the replica fsync
        # before WAITAOF asks: 0.7 ms instead of 0.5-1 s.
        return [wait, waitaof] if self.replicas else [waitaof]

    async def check_server(self, client: Any) -> None:
        """Once, before the first write: can the server (every primary of a cluster) confirm
        this way at all? WAIT is missing from some Redis look-alikes, WAITAOF before Redis
        7.2, and WAITAOF refuses to run without appendonly. Asked with nothing to wait for,
        so it answers at once; failing here writes nothing."""
        if self._checked:
            return
        options: dict[str, Any] = {}
        if isinstance(client, RedisCluster):
            options["target_nodes"] = RedisCluster.PRIMARIES
        try:
            for command in self.commands:
                probe = ("WAIT", 0, 0) if command[0] == "WAIT" else ("WAITAOF", 1, 0, command[3])
                await client.execute_command(*probe, **options)
        except NoPermissionError as exc:
            raise _scripts.permission_error(exc, None) from exc
        except ResponseError as exc:
            needs = " (WAITAOF needs Redis >= 7.2 and appendonly yes)" if self.mode == "aof" else ""
            raise WriteConcernError(
                f"write_concern={self.mode!r} needs {probe[0]}, which this server refused "
                f"({exc}){needs}; nothing was written",
                written=False,
            ) from exc
        self._checked = True

    def shortfall(self, reply: Any) -> str | None:
        """What the WAIT/WAITAOF reply fell short of, or None when it was enough."""
        command = self.commands[-1][0]
        if isinstance(reply, Exception):
            return f"{command} failed: {reply}"
        try:
            local, replicas = (int(n) for n in reply) if self.mode == "aof" else (1, int(reply))
        except (TypeError, ValueError):
            # Whatever a look-alike server answers, the write is not confirmed.
            return f"{command} answered {reply!r}, not a count"
        if local >= 1 and replicas >= self.replicas:
            return None
        if self.mode == "aof":
            primary = "the primary's AOF fsync" + ("" if local else " not")
            return (
                f"{primary} confirmed, and {replicas} of {self.replicas} replicas' AOF "
                f"fsyncs, within {self.timeout_ms} ms"
            )
        return f"{replicas} of {self.replicas} replicas confirmed within {self.timeout_ms} ms"


async def run(
    concern: WriteConcern | None,
    script: Registered[C, R],
    call: C,
    shortfalls: list[str] | None,
    step: str = "",
) -> R:
    """Run ``script`` with ``call``; with a ``concern`` and ``shortfalls`` (a write
    operation's), wait as it asks in the same round trip and add any shortfall, after
    ``step``, to ``shortfalls``."""
    if concern is None or shortfalls is None:
        return await _scripts.run(script, call)
    return (await run_many(concern, script, [call], shortfalls, step))[0]


async def run_many(
    concern: WriteConcern | None,
    script: Registered[C, R],
    calls: list[C],
    shortfalls: list[str],
    step: str = "",
) -> list[R]:
    """Run ``script`` once per call of ``calls``, in order, in one round trip (a pipeline
    to the node of the first call's first key: every call must be in its slot), then wait
    as ``concern`` asks and add any shortfall, after ``step``, to ``shortfalls``. The first
    error (refusals as PermissionDeniedError) is raised; the calls after it still ran."""
    lua = script.lua
    client = lua.registered_client
    sent = [script.script.split(call) for call in calls]
    first_key = sent[0][0][0]
    waits = concern.commands if concern is not None else []
    node = None
    if waits and isinstance(client, RedisCluster):
        node = client.get_node_from_key(first_key)
    options = {"target_nodes": node} if node is not None else {}
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for keys, args in sent:
            pipe.execute_command("EVALSHA", lua.sha, len(keys), *keys, *args)
        for command in waits:
            pipe.execute_command(*command, **options)
        replies = await pipe.execute(raise_on_error=False)
        if len(replies) != len(calls) + len(waits):
            # Paired by position, a missing reply would shift an error into another's place.
            raise InvalidResponse(
                f"{len(replies)} replies to a pipeline of {len(calls) + len(waits)} commands"
            )
        if isinstance(replies[0], NoScriptError) and attempt == 0:
            # The server lost its scripts (restart, SCRIPT FLUSH): load and run again.
            try:
                await client.script_load(lua.script)
            except NoPermissionError as exc:
                raise _scripts.permission_error(exc, first_key) from exc
            continue
        break
    moved = await _moved(client, node, first_key)
    checked = [_scripts.checked(r, keys) for r, (keys, _) in zip(replies, sent, strict=False)]
    if concern is not None:
        waited = replies[len(calls) :]
        failed = next((w for w in waited if isinstance(w, Exception)), waited[-1])
        short = "the slot moved during the write" if moved else concern.shortfall(failed)
        if short:
            shortfalls.append(step + short)
    return [script.script.reply(call, r) for call, r in zip(calls, checked, strict=True)]


async def _moved(client: Any, node: ClusterNode | None, key: Any) -> bool:
    """Whether the slot of ``key`` left ``node``, the waits' target, while they ran: the
    client learned of a failover and sent the scripts to the slot's new node, so a wait
    here says nothing of them. A node the client dropped is closed: it never would be."""
    if node is None or not isinstance(client, RedisCluster):
        return False
    if client.get_node(node_name=node.name) is not node:
        await node.disconnect()
        return True
    return client.get_node_from_key(key) is not node
