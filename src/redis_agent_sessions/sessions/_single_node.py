"""The single-node layout: one script writes a session, its user's and its app's keys."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from redis.exceptions import OutOfMemoryError

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.session_calls import Created, ReadHashes
from redis_agent_sessions.keys import SessionKeys
from redis_agent_sessions.sessions._layout import Layout
from redis_agent_sessions.sessions._replies import pairs
from redis_agent_sessions.sessions._sweep import SweepReport

if TYPE_CHECKING:  # imported only when telemetry is on
    from redis_agent_sessions._telemetry import Telemetry

__all__ = ["SingleNode"]

_HASHES_PER_SCRIPT = 1024
_NOTHING: AbstractAsyncContextManager[None] = nullcontext()


class SingleNode(Layout):
    """One Redis node (or a Sentinel-managed primary) holds every key."""

    name = "single"

    def mode(self, keys: SessionKeys) -> str:
        return "single"

    def app_keys(self, keys: SessionKeys, first: str, *rest: str) -> tuple[str, list[str | None]]:
        return first, list(rest)

    def observe(self, telemetry: Telemetry) -> None:
        """Nothing: every operation is one script here, so nothing is ever applied late."""

    def recording(
        self, keys: SessionKeys, app_writes: bool = True
    ) -> AbstractAsyncContextManager[None]:
        """Nothing: the script writes the app's keys itself, so nothing is ever pending."""
        return _NOTHING

    async def created(
        self, keys: SessionKeys, app_name: str, now: float, reply: Created, shortfalls: list[str]
    ) -> Any:
        await self.apps.list(app_name, now)  # also when it existed: a retry finishes it
        if not reply.created:
            return None
        await self.drop_expired(app_name, reply.due)
        return reply.app_state

    async def settle(
        self,
        keys: SessionKeys,
        after: Any,
        shortfalls: list[str] | None = None,
        *,
        cleanup: bool = True,
    ) -> None:
        """The script wrote the app's keys too; what remains is to check the members of the
        expiry index it found due (``after``)."""
        if cleanup:
            await self.drop_expired(keys.app_name, after)

    async def snapshot(
        self, keys: SessionKeys, count: int | None, start: str, anchor: str | None
    ) -> tuple[list[Any], Any]:
        """[meta, state, user state, app state, events, presence of the events and event ids]
        (and with ``anchor``, its event_ids value and the first entry) in one transaction
        (MULTI/EXEC), so the revision the session carries is exactly the one its events
        reflect. At full memory Redis refuses to queue any command of a transaction, so
        there the read-only script takes the same snapshot."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(keys.meta)
        pipe.hgetall(keys.state)
        pipe.hgetall(keys.user_state)
        pipe.hgetall(keys.app_state)
        pipe.exists(keys.events)
        pipe.exists(keys.event_ids)
        read_keys = [keys.meta, keys.state, keys.user_state, keys.app_state, keys.events]
        read_keys.append(keys.event_ids)
        if anchor is not None:
            pipe.hget(keys.event_ids, anchor)
            pipe.execute_command(b"XRANGE", keys.events, "-", "+", "COUNT", 1)
            read_keys += [keys.event_ids, keys.events]
        # A bytes command name finds no reply callback in redis-py: entries stay the
        # parser's flat lists instead of being rebuilt as dicts one by one (0.6 of 1.7 ms
        # for 1,000 events). Only here: a cluster client cannot route bytes names.
        if count is None:
            pipe.execute_command(b"XRANGE", keys.events, start, "+")
        elif count > 0:
            pipe.execute_command(b"XREVRANGE", keys.events, "+", start, "COUNT", count)
        try:
            replies = await _scripts.execute(pipe, [*read_keys, keys.events])
        except OutOfMemoryError:
            return await self._scripted_snapshot(keys, count, start, anchor)
        if not replies[0]:
            return [], None
        events = replies[len(read_keys)] if len(replies) > len(read_keys) else []
        present = replies[4:6]
        return [*replies[:4], events, present, *replies[6 : len(read_keys)]], replies[3]

    async def _scripted_snapshot(
        self, keys: SessionKeys, count: int | None, start: str, anchor: str | None
    ) -> tuple[list[Any], Any]:
        read = await self.read_script(keys, count, start, anchor, keys.app_state, "single")
        if read is None:
            return [], None
        app_state = pairs(read.shared)
        checks = [] if anchor is None else [read.anchor, read.first]
        meta, state, user_state = pairs(read.meta), pairs(read.state), pairs(read.user_state)
        return [meta, state, user_state, app_state, read.events, read.present, *checks], app_state

    async def read_sessions(
        self,
        app_name: str,
        read_keys: list[str],
        users: list[str],
        user_keys: dict[str, SessionKeys],
        app_raw: Any,
    ) -> tuple[list[Any], Any]:
        # One script: its single reply is far cheaper for the client to read than as many
        # pipelined HGETALL replies. Chunked, so that listing a whole large app never blocks
        # the server for long.
        replies: list[Any] = []
        for at in range(0, len(read_keys), _HASHES_PER_SCRIPT):
            chunk = read_keys[at : at + _HASHES_PER_SCRIPT]
            hashes = await self.runner.run(self.runner.read_hashes, ReadHashes(chunk))
            replies += hashes
        return replies, app_raw

    async def sweep(
        self, app_name: str, older_than: float, limit: int, *, dry_run: bool
    ) -> SweepReport:
        """Nothing to do: app-scope writes are never pending on one node."""
        return SweepReport()

    def _prune_groups(self, gone: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
        return [gone]

    async def _pruned(self, first: SessionKeys, outbox: Any) -> None:
        """Nothing: the prune script wrote the app's keys too."""
