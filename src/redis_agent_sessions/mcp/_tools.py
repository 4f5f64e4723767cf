"""What each MCP tool does, on the library's public services, for one app.

Every tool answers with JSON made from the library's own models, so a client reads what
the Python API returns. A failure the caller can act on (a bad id, a session that does not
exist, a write the Redis ACL refuses, a lost connection) becomes a `ToolError`
whose one line says why; only what nobody foresaw reaches the SDK's crash path.
"""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, ParamSpec, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from redis_agent_sessions._redis.codec import check_id
from redis_agent_sessions.errors import (
    PermissionDeniedError,
    RedisSessionsError,
    SessionNotFoundError,
)
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory import MemoryEntry, RedisMemoryService
from redis_agent_sessions.models import Content, Part
from redis_agent_sessions.sessions import RedisSessionService

__all__ = ["READS", "WRITES", "Tools"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

READS = (
    "search_memory",
    "list_facts",
    "fact_history",
    "list_sessions",
    "recent_events",
)
"""The tools every server has."""

WRITES = ("add_memory", "add_session_to_memory", "delete_memory")
"""The tools only a server started with writes allowed has."""

User = Annotated[str, Field(description="the user whose memory or sessions this is about")]
MemoryId = Annotated[
    str, Field(description="a memory entry's or learned fact's id, as search_memory or "
    "list_facts return it")
]  # fmt: skip


def _answers(tool: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
    """``tool``, its anticipated failures as one-line ToolErrors."""

    @functools.wraps(tool)
    async def answering(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await tool(*args, **kwargs)
        except ToolError:
            raise
        except (PermissionDeniedError, NoPermissionError) as exc:
            raise ToolError(f"refused by Redis's ACL: {_line(exc)}") from exc
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise ToolError(f"lost the connection to Redis: {_line(exc)}") from exc
        except (RedisSessionsError, RedisError) as exc:
            raise ToolError(_line(exc)) from exc

    return answering


def _line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _instant(name: str, value: str | float | None) -> dt.datetime | float | None:
    """A time as a client sends it: epoch seconds, or an ISO 8601 string (an offset-less
    one taken as UTC: a server's local time means nothing to a remote client)."""
    if not isinstance(value, str):
        return value
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ToolError(f"{name}: not an ISO 8601 time or epoch seconds: {value!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def _utc(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, tz=dt.timezone.utc).isoformat()


class Tools:
    """The tools of a server bound to ``app_name``; each takes the user as ``user_id``
    (the server drops that argument when its operator fixes the user)."""

    def __init__(
        self, sessions: RedisSessionService, memory: RedisMemoryService, app_name: str
    ) -> None:
        self.sessions, self.memory, self.app = sessions, memory, app_name
        self.keys = KeySpace(memory.config.key_prefix)

    async def _memory_chosen(self) -> bool:
        """Whether any worker ever wrote memory: reading it before would choose and record
        a backend, which a read-only server must not do (and there is nothing to read)."""
        try:
            return bool(await self.memory._client.exists(self.keys.memory_backend()))
        except NoPermissionError:
            return True  # a user limited to its app's keys: the search says what it may do

    @_answers
    async def search_memory(
        self,
        user_id: User,
        query: Annotated[str, Field(description="words to look for in what was said")],
        limit: Annotated[int, Field(ge=1, le=100, description="most entries returned")] = 10,
        author: Annotated[
            list[str] | None, Field(description="only entries by one of these authors")
        ] = None,
        session_ids: Annotated[
            list[str] | None, Field(description="only entries from one of these sessions")
        ] = None,
        since: Annotated[
            str | float | None,
            Field(description="only entries at or after this time: ISO 8601 or epoch seconds"),
        ] = None,
        until: Annotated[
            str | float | None,
            Field(description="only entries at or before this time: ISO 8601 or epoch seconds"),
        ] = None,
        topics: Annotated[
            list[str] | None, Field(description="only learned facts on one of these topics")
        ] = None,
        kind: Annotated[
            Literal["fact", "event"] | None,
            Field(description="'fact': learned facts only; 'event': everything else"),
        ] = None,
        metadata: Annotated[
            dict[str, str | int | bool] | None,
            Field(description="custom_metadata fields (declared indexable) and their values"),
        ] = None,
        recency_half_life: Annotated[
            float | None,
            Field(gt=0, description="seconds: newer entries weigh more, halved per half-life"),
        ] = None,
    ) -> dict[str, Any]:
        """Search the user's memory (past conversations and added memories), best match
        first: entries with their id, author, time and text. The filters apply inside the
        search: the best matches among the entries within every filter given."""
        if not await self._memory_chosen():
            return {"memories": []}
        found = await self.memory.search_memory(
            app_name=self.app, user_id=user_id, query=query, limit=limit, author=author,
            session_ids=session_ids, since=_instant("since", since),
            until=_instant("until", until), topics=topics, kind=kind, metadata=metadata,
            recency_half_life=recency_half_life,
        )  # fmt: skip
        return {"memories": [_entry(m) for m in found.memories]}

    @_answers
    async def list_facts(self, user_id: User) -> dict[str, Any]:
        """The facts learned about the user, most recently changed first."""
        if not await self._memory_chosen():
            return {"facts": []}
        facts = await self.memory.list_facts(app_name=self.app, user_id=user_id)
        return {"facts": [f.model_dump(mode="json") for f in facts]}

    @_answers
    async def fact_history(
        self,
        user_id: User,
        fact_id: Annotated[str, Field(description="a fact's id, as list_facts returns it")],
    ) -> dict[str, Any]:
        """What a learned fact said before its latest revision, newest first."""
        if not await self._memory_chosen():
            return {"revisions": []}
        revisions = await self.memory.fact_history(
            app_name=self.app, user_id=user_id, fact_id=fact_id
        )
        return {"revisions": [r.model_dump(mode="json") for r in revisions]}

    @_answers
    async def list_sessions(
        self,
        user_id: Annotated[
            str | None, Field(description="only this user's sessions (default: every user's)")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=1000, description="most sessions returned")] = 20,
        page_token: Annotated[
            str | None, Field(description="next_page_token of the previous call, to go on")
        ] = None,
    ) -> dict[str, Any]:
        """Conversation sessions, most recently updated first, with their state."""
        page = await self.sessions.list_sessions_page(
            app_name=self.app,
            user_id=user_id,
            page_size=limit,
            page_token=page_token,
            # a cluster keeps no app-wide by-update index (it would span every user's slot)
            order_by="updated" if user_id is not None or self._by_update else "created",
        )
        return {
            "sessions": [
                {
                    "session_id": s.id,
                    "user_id": s.user_id,
                    "last_update_time": _utc(s.last_update_time),
                    "state": s.state,
                }
                for s in page.sessions
            ],
            "next_page_token": page.next_page_token,
        }

    @property
    def _by_update(self) -> bool:
        """Whether the layout the service chose lists an app's sessions by update (the
        listing's own test, not another guess at cluster or not)."""
        return self.sessions._engine.layout.app_wide_by_update

    @_answers
    async def recent_events(
        self,
        user_id: User,
        session_id: Annotated[str, Field(description="a session's id, as list_sessions returns")],
        limit: Annotated[int, Field(ge=1, le=1000, description="most events returned")] = 20,
    ) -> dict[str, Any]:
        """A session's newest events, oldest of them first: who said what, tool calls and
        state changes."""
        try:
            page = await self.sessions.list_events(
                app_name=self.app,
                user_id=user_id,
                session_id=session_id,
                limit=limit,
                newest_first=True,
            )
        except SessionNotFoundError:
            raise self._no_session(user_id, session_id) from None
        events = [e.model_dump(mode="json", exclude_none=True) for e in reversed(page.events)]
        return {"events": events}

    @_answers
    async def add_memory(
        self,
        user_id: User,
        text: Annotated[str, Field(min_length=1, description="what to remember")],
        author: Annotated[str | None, Field(description="who said or wrote it")] = None,
        metadata: Annotated[
            dict[str, Any] | None, Field(description="JSON values stored with the entry")
        ] = None,
    ) -> dict[str, Any]:
        """Remember a piece of text for the user; returns the new entry's id."""
        entry = MemoryEntry(
            id=str(uuid.uuid4()),
            content=Content(role="user", parts=[Part(text=text)]),
            author=author,
            timestamp=dt.datetime.now(dt.timezone.utc).isoformat(),
            custom_metadata=metadata or {},
        )
        await self.memory.add_memory(app_name=self.app, user_id=user_id, memories=[entry])
        return {"id": entry.id}

    @_answers
    async def add_session_to_memory(
        self,
        user_id: User,
        session_id: Annotated[str, Field(description="a session's id, as list_sessions returns")],
    ) -> dict[str, Any]:
        """Remember a whole session: its turns become searchable memory (what it added
        before is replaced)."""
        session = await self.sessions.get_session(
            app_name=self.app, user_id=user_id, session_id=session_id
        )
        if session is None:
            raise self._no_session(user_id, session_id)
        await self.memory.add_session_to_memory(session)
        return {"session_id": session.id, "events": len(session.events)}

    @_answers
    async def delete_memory(self, user_id: User, memory_id: MemoryId) -> dict[str, Any]:
        """Forget one memory entry or learned fact (and the fact's history)."""
        if not await self._memory_chosen() or not await self._exists(user_id, memory_id):
            raise ToolError(f"no memory {memory_id!r} of user {user_id!r} in app {self.app!r}")
        await self.memory.delete_memory(app_name=self.app, user_id=user_id, memory_id=memory_id)
        return {"deleted": memory_id}

    def _no_session(self, user: str, session_id: str) -> ToolError:
        return ToolError(f"no session {session_id!r} of user {user!r} in app {self.app!r}")

    async def _exists(self, user: str, memory_id: str) -> bool:
        """Whether ``memory_id`` names an entry or a fact: deleting any other id would only
        record it as deleted, and say nothing of the caller's mistake."""
        user, memory_id = check_id("user_id", user), check_id("memory_id", memory_id)
        facts = await self.memory._memory.facts()
        if await facts.which(self.app, user, [memory_id]):
            return True
        entry = self.keys.memory_entry(self.app, user, memory_id)
        return bool(await self.memory._client.exists(entry))


def _entry(entry: MemoryEntry) -> dict[str, Any]:
    return entry.model_dump(mode="json", exclude_none=True)
