"""The session scripts' calls and replies, by name (see ``.calls``; each ``.lua`` header
says what every field means).

A layout argument (``layout``) is ``single`` or ``cluster:<id>`` (``_layout.lua``). Fields
typed ``... | None`` are keys a layout does not have: None leaves them out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from redis_agent_sessions._redis.calls import Script, raw

__all__ = [
    "APPEND_EVENT",
    "APP_APPLY",
    "APP_PENDING",
    "CREATE_SESSION",
    "DELETE_SESSION",
    "EXPIRY_DUE",
    "PRUNE_INDEX",
    "READ_HASHES",
    "READ_SESSION",
    "REGISTER_APP",
    "SCRIPTS",
    "AppApply",
    "AppPending",
    "AppendEvent",
    "Appended",
    "Applied",
    "CreateSession",
    "Created",
    "DeleteSession",
    "Deleted",
    "ExpiryDue",
    "PendingReply",
    "PruneIndex",
    "Pruned",
    "ReadHashes",
    "ReadSession",
    "RegisterApp",
    "Snapshot",
    "state_argv",
]


def state_argv(fields: Sequence[Sequence[bytes | str]]) -> list[Any]:
    """A delta's field/JSON pairs per scope (session, user, app) as the write scripts take
    them: the three counts of pairs, then the pairs."""
    session, user, app = fields
    return [len(session) // 2, len(user) // 2, len(app) // 2, *session, *user, *app]


# -- append_event.lua ------------------------------------------------------------------------


class AppendEvent(NamedTuple):
    meta: str
    state: str
    events: str
    event_ids: str
    user_state: str
    app_state: str  # or, on a cluster, the user's app outbox
    user_updated: str
    compactions: str
    app_updated: str | None  # single node only
    app_expiry: str | None  # single node only
    revision: int | str  # '' = unknown
    last_event_id: str
    stale_policy: str
    event_id: str
    event: bytes
    event_ms: int
    update_time: str
    ttl: int
    layout: str
    session_id: str
    app_member: str
    compaction: str
    full_reads: str
    catch_up_limit: int
    catch_up_now: str
    now_ms: int
    expiry_take: int
    schema: str
    state_fields: Sequence[Any]  # state_argv()


class Appended(NamedTuple):
    """What an append did: ``status`` (1 appended, 2 already stored, -1 no such session,
    -2 stale, -5 incomplete), the ``revision`` it made or found (None for -1 and -5), the
    entry's ``stream_id``, ``after`` (the outbox entries to apply on a cluster, the expiry
    index's claimed members on a single node), the ``catch_up`` of a stale copy (or None),
    and of an incomplete session, what is ``missing`` and the metadata ``key`` named."""

    status: int
    revision: int | None
    stream_id: Any
    after: Any
    catch_up: list[Any] | None
    missing: Sequence[Any] = ()
    key: Any = None


def _appended(call: AppendEvent, reply: list[Any]) -> Appended:
    status = reply[0]
    if status == 1:
        catch_up = reply[4] if len(reply) > 4 else None
        return Appended(1, int(reply[1]), reply[2], reply[3], catch_up)
    if status == 2:
        return Appended(2, int(reply[1]), None, reply[3], None)
    if status == -2:
        return Appended(-2, int(reply[1]), None, [], reply[2] if len(reply) > 2 else None)
    if status == -5:  # {-5, meta key, what is missing...}
        return Appended(-5, None, None, [], None, list(reply[2:]), reply[1])
    return Appended(status, None, None, [], None)  # -1: no such session


APPEND_EVENT = Script("append_event", AppendEvent, keys=10, reply=_appended, more_args=True)


# -- create_session.lua ----------------------------------------------------------------------


class CreateSession(NamedTuple):
    meta: str
    state: str
    events: str
    event_ids: str
    user_state: str
    user_sessions: str
    user_updated: str
    app_state: str  # or, on a cluster, the user's app outbox
    app_sessions: str | None  # single node only
    app_updated: str | None  # single node only
    app_expiry: str | None  # single node only
    session_id: str
    app_name: str
    user_id: str
    create_time: str
    ttl: int
    app_member: str
    layout: str
    own_ttl: str
    now_ms: int
    expiry_take: int
    state_fields: Sequence[Any]  # state_argv()


class Created(NamedTuple):
    """``created`` (False: the id was taken), the user state hash, the app state hash (single
    node), the outbox entries to apply (cluster) and the expiry index's claimed members."""

    created: bool
    user_state: list[Any]
    app_state: list[Any]
    outbox: list[Any]
    due: list[Any]


def _created(call: CreateSession, reply: list[Any]) -> Created:
    cluster = call.layout != "single"
    if reply[0] == 0:
        return Created(False, [], [], reply[1] if cluster and len(reply) > 1 else [], [])
    if cluster:
        return Created(True, reply[1], [], reply[2], [])
    return Created(True, reply[1], reply[2], [], reply[3])


CREATE_SESSION = Script("create_session", CreateSession, keys=11, reply=_created, more_args=True)


# -- delete_session.lua ----------------------------------------------------------------------


class DeleteSession(NamedTuple):
    meta: str
    state: str
    events: str
    event_ids: str
    user_sessions: str
    app_sessions: str  # or, on a cluster, the user's app outbox
    user_updated: str
    compactions: str
    app_updated: str | None  # single node only
    app_expiry: str | None  # single node only
    session_id: str
    app_member: str
    layout: str


class Deleted(NamedTuple):
    deleted: bool
    outbox: list[Any]


DELETE_SESSION = Script(
    "delete_session",
    DeleteSession,
    keys=10,
    reply=lambda call, reply: Deleted(reply[0] == 1, reply[1]),
)


# -- read_session.lua ------------------------------------------------------------------------


class ReadSession(NamedTuple):
    meta: str
    state: str
    user_state: str
    events: str
    app_state: str  # or, on a cluster, the user's app outbox
    event_ids: str
    range: str  # 'all', 'recent' or 'none'
    start: str
    recent_count: int
    layout: str
    anchor: str | None  # None: no copy to check


class Snapshot(NamedTuple):
    """One session as read_session.lua read it (flat field/value lists for hashes): with an
    ``anchor`` asked, its event_ids value and the stream's first entry too (else None)."""

    meta: list[Any]
    state: list[Any]
    user_state: list[Any]
    shared: list[Any]  # the app state hash, or on a cluster the outbox entries
    events: list[Any]
    present: list[Any]  # EXISTS of the events stream, of the event ids hash
    anchor: Any
    first: Any


def _snapshot(call: ReadSession, reply: list[Any]) -> Snapshot | None:
    if not reply:
        return None
    anchor, first = (reply[6], reply[7]) if call.anchor is not None else (None, None)
    return Snapshot(reply[0], reply[1], reply[2], reply[3], reply[4], reply[5], anchor, first)


READ_SESSION = Script("read_session", ReadSession, keys=6, reply=_snapshot)


# -- read_hashes.lua -------------------------------------------------------------------------


class ReadHashes(NamedTuple):
    hashes: Sequence[str]


READ_HASHES: Script[ReadHashes, list[Any]] = Script(
    "read_hashes", ReadHashes, keys=1, reply=raw, more_keys=True
)


# -- prune_index.lua -------------------------------------------------------------------------


class PruneIndex(NamedTuple):
    app_sessions: str  # or, on a cluster, the user's app outbox
    app_updated: str | None  # single node only
    app_expiry: str | None  # single node only
    session_keys: Sequence[str]  # per session: meta, user sessions, user sessions-by-update
    layout: str
    now_ms: str
    sessions: Sequence[str]  # per session: its id, its app sessions member


class Pruned(NamedTuple):
    dropped: int
    outbox: list[Any]


PRUNE_INDEX = Script(
    "prune_index",
    PruneIndex,
    keys=4,
    reply=lambda call, reply: Pruned(int(reply[0]), reply[1]),
    more_keys=True,
    more_args=True,
)


# -- expiry_due.lua --------------------------------------------------------------------------


class ExpiryDue(NamedTuple):
    expiry: str
    now_ms: int
    at_most: int
    claim: str  # '1' or ''


EXPIRY_DUE: Script[ExpiryDue, list[Any]] = Script("expiry_due", ExpiryDue, keys=1, reply=raw)


# -- app_apply.lua ---------------------------------------------------------------------------


class AppApply(NamedTuple):
    app_state: str
    app_versions: str
    app_sessions: str
    app_applied: str
    app_expiry: str
    user_member: str
    want_state: str
    now_ms: int
    expiry_take: int
    entries: Sequence[Any]  # per entry: id, number of fields, the name/value pairs


class Applied(NamedTuple):
    """The last outbox id applied, the app state (asked for), how many entries this call
    applied, and the expiry index's claimed members."""

    last_applied: Any
    app_state: list[Any]
    entries_applied: int
    due: list[Any]


APP_APPLY = Script(
    "app_apply",
    AppApply,
    keys=5,
    reply=lambda call, reply: Applied(reply[0], reply[1], int(reply[2]), reply[3]),
    more_args=True,
)


# -- app_pending.lua -------------------------------------------------------------------------


class AppPending(NamedTuple):
    registry: str
    operation: str  # 'add', 'undo', 'due' or 'clear'
    operands: Sequence[Any]


class PendingReply(NamedTuple):
    """By operation: ``add`` gives ``score`` and ``previous``, ``undo`` ``done``, ``due`` the
    ``members`` as (member, score) pairs, ``clear`` how many it ``cleared``."""

    score: Any = None
    previous: Any = None
    done: bool = False
    members: Sequence[tuple[Any, Any]] = ()
    cleared: int = 0


def _pending(call: AppPending, reply: Any) -> PendingReply:
    if call.operation == "add":
        return PendingReply(score=reply[0], previous=reply[1])
    if call.operation == "undo":
        return PendingReply(done=reply == 1)
    if call.operation == "due":
        return PendingReply(members=list(zip(reply[::2], reply[1::2], strict=True)))
    return PendingReply(cleared=int(reply))


APP_PENDING = Script("app_pending", AppPending, keys=1, reply=_pending, more_args=True)


# -- register_app.lua ------------------------------------------------------------------------


class RegisterApp(NamedTuple):
    apps: str
    app_member: str
    first_created: str
    write: str  # '1' to list it, '' to check only


REGISTER_APP = Script(
    "register_app", RegisterApp, keys=1, reply=lambda call, reply: int(reply) == 1
)


SCRIPTS: tuple[Script[Any, Any], ...] = (
    APPEND_EVENT,
    APP_APPLY,
    APP_PENDING,
    CREATE_SESSION,
    DELETE_SESSION,
    EXPIRY_DUE,
    PRUNE_INDEX,
    READ_HASHES,
    READ_SESSION,
    REGISTER_APP,
)
