"""Reading a session's events without loading them all: pages, and following new ones live.

Both read the session's stream by entry id, so a page or a wake-up costs O(events returned)
whatever the history. Watching blocks in ``XREAD`` on the server; Python never polls.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

from redis.exceptions import ConnectionError, TimeoutError

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import check_id, text
from redis_agent_sessions._redis.lost import lost_connection, raise_if_cancelled
from redis_agent_sessions.errors import (
    IncompleteSessionError,
    InvalidInputError,
    SessionNotFoundError,
)
from redis_agent_sessions.keys import KeySpace, SessionKeys
from redis_agent_sessions.sessions._pages import (
    EventsPage,
    PageTokenError,
    read_token,
    write_token,
)
from redis_agent_sessions.sessions._replies import missing_parts

__all__ = ["EventStream"]

E = TypeVar("E")
_STREAM_ID = re.compile(r"^\d{1,20}-\d{1,20}$")
MAX_PAGE = 10_000


class EventStream(Generic[E]):
    """Pages and watches of one store's sessions; ``decode`` turns stream entries (as a
    range reply) into events, raising CorruptDataError for bad ones."""

    reconnects = 5
    """Consecutive connection failures a watch survives (with backoff) before raising."""

    def __init__(
        self,
        client: Any,
        keys: KeySpace,
        decode: Callable[[str, list[Any]], list[E]],
        ready: Callable[[], Awaitable[None]],
        not_found: type[SessionNotFoundError] = SessionNotFoundError,
        socket_timeout: Callable[[], float | None] = lambda: None,
    ) -> None:
        self._redis = client
        self._keys = keys
        self._decode = decode
        self._ready = ready
        self._not_found = not_found
        self._socket_timeout = socket_timeout

    @functools.cached_property
    def _most_block_ms(self) -> int | None:
        # A blocked XREAD answers nothing until it wakes up, and the client gives up on any
        # reply after its socket timeout: blocking longer made every quiet read a client
        # timeout, and a few in a row ended the watch. Half the timeout leaves the reply
        # time to arrive; it is the most a deletion waits to be noticed. Asked at the first
        # watch, as most services never watch.
        timeout = self._socket_timeout()
        return None if not timeout else max(1, int(timeout * 500))

    def _session(self, app_name: str, user_id: str, session_id: str) -> SessionKeys:
        return self._keys.session(
            check_id("app_name", app_name),
            check_id("user_id", user_id),
            check_id("session_id", session_id),
        )

    async def page(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        *,
        limit: int,
        newest_first: bool,
        page_token: str | None,
    ) -> EventsPage[E]:
        keys = self._session(app_name, user_id, session_id)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_PAGE:
            raise InvalidInputError(f"limit must be an int from 1 to {MAX_PAGE}: {limit!r}")
        scope: list[str | None] = ["events", app_name, user_id, session_id]
        scope.append("desc" if newest_first else "asc")
        after = None
        if page_token is not None:
            [after] = read_token(page_token, scope)
            if not isinstance(after, str) or not _STREAM_ID.match(after):
                raise PageTokenError("is not a page token of events")
        await self._ready()
        pipe = self._redis.pipeline(transaction=False)
        pipe.hget(keys.meta, "rev")
        pipe.exists(keys.events)
        pipe.exists(keys.event_ids)
        # One more than asked: whether a next page exists is known without another read.
        if newest_first:
            pipe.xrevrange(keys.events, f"({after}" if after else "+", "-", count=limit + 1)
        else:
            pipe.xrange(keys.events, f"({after}" if after else "-", "+", count=limit + 1)
        read = [keys.meta, keys.events, keys.event_ids, keys.events]
        rev, *present, entries = await _scripts.execute(pipe, read)
        if rev is None:
            raise self._not_found(f"Session {session_id} not found.")
        # A page never passes off a session Redis evicted in part as one without events.
        if missing := missing_parts({"rev": rev}, None, present):
            raise IncompleteSessionError(app_name, user_id, session_id, missing, keys.meta)
        more = len(entries) > limit
        entries = entries[:limit]
        token = write_token(scope, [text(entries[-1][0])]) if more else None
        return EventsPage(self._decode(keys.events, entries), token)

    def watch(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        *,
        after_event_id: str | None,
        from_beginning: bool,
        block_ms: int,
        count: int = 100,
    ) -> AsyncIterator[E]:
        """Checks the arguments now; the session is looked up on the first iteration."""
        keys = self._session(app_name, user_id, session_id)
        if isinstance(block_ms, bool) or not isinstance(block_ms, int) or block_ms <= 0:
            raise InvalidInputError(f"block_ms must be a positive int: {block_ms!r}")
        if after_event_id is not None:
            check_id("after_event_id", after_event_id)
            if from_beginning:
                raise InvalidInputError("give after_event_id or from_beginning, not both")
        if self._most_block_ms is not None:
            block_ms = min(block_ms, self._most_block_ms)
        who = (app_name, user_id, session_id)
        return self._follow(keys, who, after_event_id, from_beginning, block_ms, count)

    async def _follow(
        self,
        keys: SessionKeys,
        who: tuple[str, str, str],
        after_event_id: str | None,
        from_beginning: bool,
        block_ms: int,
        count: int,
    ) -> AsyncIterator[E]:
        session_id = who[2]
        await self._ready()
        pipe = self._redis.pipeline(transaction=False)
        pipe.hmget(keys.meta, ["create_time", "rev", "has_state"])
        pipe.xrevrange(keys.events, "+", "-", count=1)
        pipe.exists(keys.state)
        pipe.exists(keys.events)
        pipe.exists(keys.event_ids)
        read = [keys.meta, keys.events, keys.state, keys.events, keys.event_ids]
        if after_event_id is not None:
            pipe.hget(keys.event_ids, after_event_id)
        replies = await _scripts.execute(pipe, read)
        created, rev, has_state = replies[0]
        if created is None:
            raise self._not_found(f"Session {session_id} not found.")
        # A session Redis evicted in part is not followed as if it were whole (as reads).
        meta = {"rev": rev, "has_state": has_state}
        if missing := missing_parts(meta, replies[2], replies[3:5]):
            raise IncompleteSessionError(*who, missing, keys.meta)
        # A concrete position, never "$": after a reconnect, "$" would skip what was
        # appended while the connection was down.
        position = "0-0"
        if after_event_id is not None:
            position = _position_of(after_event_id, replies[5], session_id)
        elif not from_beginning and replies[1]:
            position = text(replies[1][0][0])
        failures = 0
        while True:
            pipe = self._redis.pipeline(transaction=False)
            pipe.xread({keys.events: position}, count=count, block=block_ms)
            # Read after the wake-up, in the same round trip: a deleted (or deleted and
            # re-created) session ends the watch instead of feeding it a stranger's events.
            pipe.hget(keys.meta, "create_time")
            try:
                found, now_created = await _scripts.execute(pipe, [keys.events, keys.meta])
            except Exception as exc:
                dropped = isinstance(exc, (ConnectionError, TimeoutError))
                if not dropped and lost_connection(exc) is None:
                    raise
                raise_if_cancelled()
                failures += 1
                if failures > self.reconnects:
                    raise
                await asyncio.sleep(min(0.05 * 2**failures, 2.0))
                continue
            # The cluster client retries a read that failed with its connection or timeout
            # error, which a cancel can come out as; the retried read then answers as if
            # nothing happened, and the cancel is lost unless asked for here.
            raise_if_cancelled()
            failures = 0
            if now_created != created:
                return
            for entries in _entries_of(found):
                events = self._decode(keys.events, entries)
                for (stream_id, _), event in zip(entries, events, strict=True):
                    position = text(stream_id)
                    yield event


def _entries_of(reply: Any) -> list[list[Any]]:
    """The entry lists of an XREAD reply (RESP2 list of [key, entries], or RESP3 dict)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return [list(entries) for entries in reply.values()]
    return [list(entries) for _, entries in reply]


def _position_of(event_id: str, stored: Any, session_id: str) -> str:
    """The stream id of a stored event, from its event_ids value ``<rev> <stream id>``."""
    if stored is None:
        raise InvalidInputError(f"session {session_id} has no event {event_id!r}")
    _, _, position = text(stored).partition(" ")
    if not _STREAM_ID.match(position):
        raise InvalidInputError(
            f"event {event_id!r} was stored before events recorded their stream position; "
            "watch with from_beginning=True instead"
        )
    return position
