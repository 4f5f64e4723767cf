"""Pages of an app's (or one user's) sessions, read from the indexes in O(page).

Four sorted sets order sessions: by creation time (``sessions``) and by last update
(``sessions_updated``, moved by every append), app-wide and per user. A page walks one of
them from a keyset cursor (score, member) carried in its token, so pages stay correct while
sessions are created, updated or deleted in between: a session is never shown twice
within a walk in creation order; in update order a session updated during the walk moves
and may be seen again (or, walking oldest first, not at all), like any listing by a moving
key. Index entries of sessions that expired are dropped as a page meets them, and the
page is filled from further entries instead.
"""

from __future__ import annotations

import math
from typing import Any, Generic, Literal

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import check_id, decode_hash, text
from redis_agent_sessions.errors import IncompleteSessionError, InvalidInputError
from redis_agent_sessions.keys import split_app_member
from redis_agent_sessions.sessions._context import Context
from redis_agent_sessions.sessions._pages import (
    PageTokenError,
    SessionsPage,
    read_token,
    write_token,
)
from redis_agent_sessions.sessions._replies import missing_parts, stored_session
from redis_agent_sessions.sessions._replies import pairs as as_dict
from redis_agent_sessions.sessions._types import E, S, StoredSession
from redis_agent_sessions.state import merge_state

__all__ = ["SessionLister"]

OrderBy = Literal["updated", "created"]
MAX_PAGE = 1000


class SessionLister(Generic[S, E]):
    """``list_sessions`` and ``list_sessions_page`` of one service, and loading sessions
    (merged state, no events) by (user, session) pairs, for both and for the CLI."""

    def __init__(self, ctx: Context[S, E]) -> None:
        self._ctx = ctx

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> list[S]:
        await self._ctx.ready()
        check_id("app_name", app_name)
        if user_id is not None:
            check_id("user_id", user_id)
        app_key = self._ctx.keys.app_state(app_name)
        index = (
            self._ctx.keys.app_sessions(app_name)
            if user_id is None
            else self._ctx.keys.user_sessions(app_name, user_id)
        )
        pipe = self._ctx.client.pipeline(transaction=False)
        pipe.zrange(index, 0, -1)
        pipe.hgetall(app_key)
        members, app_raw = await _scripts.execute(pipe, [index, app_key])
        pairs = [self._pair(app_name, user_id, m) for m in members]
        found, gone = await self.load_sessions(app_name, pairs, app_raw)
        if gone:
            await self._ctx.layout.prune(app_name, gone)
        stored = sorted(
            (st for st in found if st is not None),
            key=lambda st: (st.last_update_time, st.user_id, st.id),
        )
        return [self._ctx.codec.build_session(st, []) for st in stored]

    @staticmethod
    def _pair(app_name: str, user_id: str | None, member: Any) -> tuple[str, str]:
        """(user, session) of a member of the app-wide index, or of ``user_id``'s."""
        return split_app_member(text(member)) if user_id is None else (user_id, text(member))

    async def load_sessions(
        self, app_name: str, pairs: list[tuple[str, str]], app_raw: Any
    ) -> tuple[list[StoredSession | None], list[tuple[str, str]]]:
        """Sessions (merged state, no events) for (user, session) pairs, in their order: one
        round trip, plus the apply of any pending app writes on a cluster. A session that
        is gone (expired, deleted) is None in the list and named in the second one."""
        if not pairs:
            return [], []
        app_key = self._ctx.keys.app_state(app_name)
        users = sorted({u for u, _ in pairs})
        session_keys = [self._ctx.keys.session(app_name, u, s) for u, s in pairs]
        user_keys = {u: self._ctx.keys.session(app_name, u, "-") for u in users}
        read_keys = [k for sk in session_keys for k in (sk.meta, sk.state)]
        read_keys += [user_keys[u].user_state for u in users]
        replies, app_raw = await self._ctx.layout.read_sessions(
            app_name, read_keys, users, user_keys, app_raw
        )
        n = 2 * len(pairs)
        user_states = {
            u: decode_hash(user_keys[u].user_state, raw)
            for u, raw in zip(users, replies[n : n + len(users)], strict=True)
        }
        app_state = decode_hash(app_key, app_raw)
        found: list[StoredSession | None] = []
        gone: list[tuple[str, str]] = []
        for (u, s), keys, meta, state in zip(
            pairs, session_keys, replies[0:n:2], replies[1:n:2], strict=True
        ):
            if not meta:
                gone.append((u, s))
                found.append(None)
                continue
            meta = meta if isinstance(meta, dict) else as_dict(meta)
            stored = stored_session(keys.meta, meta)
            # What a listing returns is checked: a session whose state was evicted is
            # never listed with part of it. (Its events are checked when it is read.)
            if missing := missing_parts(meta, state, None):
                who = (app_name, u, s)
                raise IncompleteSessionError(*who, missing, keys.meta)
            stored.state = merge_state(decode_hash(keys.state, state), user_states[u], app_state)
            found.append(stored)
        return found, gone

    async def page(
        self,
        *,
        app_name: str,
        user_id: str | None,
        page_size: int,
        page_token: str | None,
        order_by: OrderBy,
        newest_first: bool,
    ) -> SessionsPage[S]:
        check_id("app_name", app_name)
        if user_id is not None:
            check_id("user_id", user_id)
        if (
            isinstance(page_size, bool)
            or not isinstance(page_size, int)
            or not 0 < page_size <= MAX_PAGE
        ):
            raise InvalidInputError(f"page_size must be an int from 1 to {MAX_PAGE}: {page_size!r}")
        if order_by not in ("updated", "created"):
            raise InvalidInputError(f"order_by must be 'updated' or 'created': {order_by!r}")
        if user_id is None and order_by == "updated" and not self._ctx.layout.app_wide_by_update:
            raise InvalidInputError(
                "on a Redis Cluster, an app's sessions across users are listed by creation "
                "(order_by='created'); one user's can be listed by update (an app-wide "
                "by-update index would make every append write to the app's slot)"
            )
        await self._ctx.ready()
        keys = self._ctx.keys
        index = {
            (True, "created"): keys.app_sessions(app_name),
            (True, "updated"): keys.app_updated(app_name),
            (False, "created"): keys.user_sessions(app_name, user_id or "-"),
            (False, "updated"): keys.user_updated(app_name, user_id or "-"),
        }[(user_id is None, order_by)]
        scope = ["sessions", app_name, user_id, order_by, "desc" if newest_first else "asc"]
        cursor = _cursor(read_token(page_token, scope)) if page_token is not None else None
        app_key = keys.app_state(app_name)
        found: list[tuple[Any, float, bytes]] = []  # (stored, score, member)
        gone: list[tuple[str, str]] = []
        more = False
        while len(found) < page_size:
            # One index entry past what the page needs tells whether another page follows
            # (without loading that session); the bound is inclusive, so the cursor's own
            # entry (and any equal-score entries before it) come back too and are cut.
            need = page_size - len(found)
            want = need + 1 + (cursor is not None)
            offset = 0
            entries: list[tuple[bytes, float]] = []
            while True:
                pipe = self._ctx.client.pipeline(transaction=False)
                pipe.execute_command(
                    "ZRANGE",
                    index,
                    *_bounds(cursor, newest_first),
                    "BYSCORE",
                    *(["REV"] if newest_first else []),
                    "LIMIT",
                    offset,
                    want,
                    "WITHSCORES",
                )
                pipe.hgetall(app_key)
                raw, app_raw = await _scripts.execute(pipe, [index, app_key])
                scored = _scored(raw)
                entries += [e for e in scored if _after(e, cursor, newest_first)]
                exhausted = len(scored) < want
                if exhausted or len(entries) > need:
                    break
                # Only a run of equal scores at the cursor gets here: read on past it.
                offset += len(scored)
            batch, rest = entries[:need], entries[need:]
            wanted = [self._pair(app_name, user_id, member) for member, _ in batch]
            stored, missing = await self.load_sessions(app_name, wanted, app_raw)
            gone += missing
            found += [(st, sc, m) for st, (m, sc) in zip(stored, batch, strict=True) if st]
            more = bool(rest)
            if not batch or (exhausted and not rest):
                break  # the index has nothing further
            member, score = batch[-1]
            cursor = (score, member)
        if gone:
            await self._ctx.layout.prune(app_name, gone)
        token = None
        if more and found:
            _, score, member = found[-1]
            token = write_token(scope, [repr(score), text(member)])
        sessions = [self._ctx.codec.build_session(st, []) for st, _, _ in found]
        return SessionsPage(sessions, token)


def _cursor(position: list[Any]) -> tuple[float, bytes]:
    try:
        score_text, member = position
        score = float(score_text)
    except (TypeError, ValueError):
        raise PageTokenError("is not a page token of sessions") from None
    if not isinstance(member, str) or not math.isfinite(score):
        raise PageTokenError("is not a page token of sessions")
    return score, member.encode()


def _bounds(cursor: tuple[float, bytes] | None, newest_first: bool) -> list[str]:
    """ZRANGE BYSCORE bounds from the cursor's score, inclusive (ties are cut by member)."""
    if cursor is None:
        return ["+inf", "-inf"] if newest_first else ["-inf", "+inf"]
    return [repr(cursor[0]), "-inf"] if newest_first else [repr(cursor[0]), "+inf"]


def _scored(raw: Any) -> list[tuple[bytes, float]]:
    """(member, score) pairs of a WITHSCORES reply (RESP2 flat list or RESP3 pairs)."""
    if raw and isinstance(raw[0], (list, tuple)):
        return [(_bytes(m), float(sc)) for m, sc in raw]
    return [(_bytes(m), float(sc)) for m, sc in zip(raw[::2], raw[1::2], strict=True)]


def _bytes(member: Any) -> bytes:
    return member if isinstance(member, bytes) else str(member).encode()


def _after(
    entry: tuple[bytes, float], cursor: tuple[float, bytes] | None, newest_first: bool
) -> bool:
    """Whether ``entry`` comes after the cursor in the walk's (score, member) order."""
    if cursor is None:
        return True
    member, score = entry
    if newest_first:
        return (score, member) < cursor
    return (score, member) > cursor
