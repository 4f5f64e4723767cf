"""Every reach of the benchmarks into the library's private internals, in one place.

The cost breakdowns need what the public API hides: a service's engine and key names, the
functions an append or a read goes through (timed by monkeypatching them), the script
call (stubbed, or packed by redis-py instead of hiredis), the Lua source and the arguments
of the append script. When those internals move, repoint them here; no benchmark module
names a private attribute or module itself. ``python -m benchmarks.harness.internals``
tries each reach-in against the library on the path and says which ones fail.

Written against the session engine in parts (``redis_agent_sessions.sessions``): a
service's ``_engine`` (``_engine.SessionEngine``) with ``keys``, ``ctx`` (``_context.Context``:
``client``, ``codec``, ``runner``, ``layout``), ``writes`` (``_writes.Writes``:
``_append_call``, which returns the call object) and ``listing``
(``_listing.SessionLister``: ``load_sessions``, ``_pair``);
the names ``split_state_delta`` / ``encode_fields`` as ``_writes`` imported them and
``decode_hash`` / ``merge_state`` / ``stored_session`` as ``_listing`` did;
``ScriptRunner.run``; ``_redis.scripts.evaluate`` / ``execute`` / ``lua_source``;
``_redis.session_calls.APPEND_EVENT`` / ``state_argv``;
``_redis.prebuilt._pack``; ``_cache.ReadCache`` / ``Cached``; ``_types.StoredSession``; the
learned facts' ``memory._consolidate.EVENTS_PER_STEP`` (events one generation reads); the
keyword analyser ``memory._analysis`` as ``analysis`` (``text_terms``, ``query_terms``,
``idf``, ``K1``, ``B``: the exact BM25 reference of ``recall --scale``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from benchmarks.harness.timing import Timers, patched
from redis_agent_sessions._redis import codec as _codec_module
from redis_agent_sessions._redis import prebuilt as _prebuilt
from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis import session_calls as _session_calls
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory import _analysis as analysis
from redis_agent_sessions.memory._consolidate import EVENTS_PER_STEP as FACT_EVENTS_PER_STEP
from redis_agent_sessions.sessions import _listing as _listing_module
from redis_agent_sessions.sessions import _writes as _writes_module
from redis_agent_sessions.sessions._cache import Cached, ReadCache
from redis_agent_sessions.sessions._types import StoredSession
from redis_agent_sessions.state import split_state_delta

__all__ = [
    "AFTER_REPLY_LABEL",
    "APPEND_OK_REPLY",
    "FACT_EVENTS_PER_STEP",
    "Point",
    "analysis",
    "append_call_work",
    "append_lua_calls",
    "append_lua_source",
    "cache_hit_work",
    "check",
    "codec",
    "events_key",
    "instrument_points",
    "instrumented",
    "key_space",
    "page_hash_keys",
    "page_round_trips",
    "pipelines_per_call",
    "raw_client",
    "redis_py_packing",
    "script_calls_answered",
    "session_keys",
    "state_encode_work",
]

_SCOPES = ("session", "user", "app")


def _engine(service: Any) -> Any:
    return service._engine


def key_space(service: Any) -> KeySpace:
    """The service's key names (``KeySpace`` of its prefix)."""
    keys: KeySpace = _engine(service).keys
    return keys


def session_keys(service: Any, app: str, user: str, session_id: str) -> Any:
    """Every key of one session (``redis_agent_sessions.keys.SessionKeys``)."""
    return key_space(service).session(app, user, session_id)


def events_key(service: Any, app: str, user: str, session_id: str) -> str:
    """The stream holding a session's events."""
    return str(session_keys(service, app, user, session_id).events)


def raw_client(service: Any) -> Any:
    """The redis client the service was built with."""
    return _engine(service).ctx.client


def codec(service: Any) -> Any:
    """The service's model codec: ``encode_event(event) -> bytes``, ``decode_events(raws)``,
    ``build_session(stored, events)``, ``read_hints(event)``."""
    return _engine(service).ctx.codec


# -- timing the parts of a call --------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """A callable to time: ``target.attr``, accumulated under ``label``."""

    target: object
    attr: str
    label: str
    is_async: bool = False


AFTER_REPLY_LABEL = "run"
"""The append point whose end marks the script's reply back in Python (``Timers.last_end``):
the script runner's ``run`` (argument flattening, the script call, the reply checked)."""


def instrument_points(service: Any, what: Literal["append", "get_session", "page"]) -> list[Point]:
    """What to time inside ``append_event`` (labels split, fields, encode, keys, run,
    script), ``get_session`` (decode, build) or a page of ``list_sessions_page`` (decode,
    merge, stored, build)."""
    engine = _engine(service)
    models = engine.ctx.codec
    if what == "append":
        return [
            Point(_writes_module, "split_state_delta", "split"),
            Point(_writes_module, "encode_fields", "fields"),
            Point(models, "encode_event", "encode"),
            Point(KeySpace, "session", "keys"),
            Point(engine.ctx.runner, "run", AFTER_REPLY_LABEL, is_async=True),
            # The script call: packing, redis-py, socket, server.
            Point(_scripts, "evaluate", "script", is_async=True),
        ]
    if what == "get_session":
        return [
            Point(models, "decode_events", "decode"),
            Point(models, "build_session", "build"),
        ]
    return [
        Point(_listing_module, "decode_hash", "decode"),
        Point(_listing_module, "merge_state", "merge"),
        Point(_listing_module, "stored_session", "stored"),
        Point(models, "build_session", "build"),
    ]


@contextmanager
def instrumented(timers: Timers, points: Sequence[Point]) -> Iterator[None]:
    """Every point timed by ``timers`` while the block runs."""
    with ExitStack() as stack:
        for p in points:
            stack.enter_context(timers.instrument(p.target, p.attr, p.label, is_async=p.is_async))
        yield


APPEND_OK_REPLY: list[Any] = [1, 1, b"0-1", b""]
"""What append_event.lua answers for an applied append: status, revision, stream id, and
no app step to settle."""


@contextmanager
def script_calls_answered(reply: list[Any]) -> Iterator[None]:
    """Every script call answered at once with ``reply``, without a round trip (what is
    left of an append is the library's own Python)."""

    async def instant(script: Any, keys: Any, args: Any) -> list[Any]:
        return reply

    with patched(_scripts, "evaluate", instant):
        yield


@contextmanager
def redis_py_packing() -> Iterator[None]:
    """Script calls packed by redis-py (in Python), not by hiredis, while the block runs."""
    hiredis_pack = _prebuilt._pack
    _prebuilt._pack = None
    try:
        yield
    finally:
        _prebuilt._pack = hiredis_pack


async def pipelines_per_call(call: Callable[[], Awaitable[Any]]) -> list[int]:
    """The commands of each round trip one call sends (a pipeline: its commands; a script
    call: 1), counted once."""
    execute = _scripts.execute
    script_call = _scripts.evaluate
    sizes: list[int] = []

    async def counted(pipe: Any, keys: list[str]) -> list[Any]:
        sizes.append(len(pipe.command_stack))
        return await execute(pipe, keys)

    async def counted_call(script: Any, keys: list[Any], args: list[Any]) -> Any:
        sizes.append(1)
        return await script_call(script, keys, args)

    with patched(_scripts, "execute", counted), patched(_scripts, "evaluate", counted_call):
        await call()
    return sizes


@contextmanager
def page_round_trips(timers: Timers, service: Any) -> Iterator[None]:
    """Time round trips (a pipeline's ``scripts.execute`` or a ``scripts.evaluate``, reply
    parsing included) as "index rt" outside ``load_sessions`` and "sessions rt" inside it;
    and ``load_sessions`` as "load"."""
    lister = _engine(service).listing
    execute = _scripts.execute
    script_call = _scripts.evaluate
    load = lister.load_sessions
    inside = False
    clock = time.perf_counter_ns

    async def timed_execute(pipe: Any, keys: list[str]) -> list[Any]:
        start = clock()
        try:
            return await execute(pipe, keys)
        finally:
            timers.ns["sessions rt" if inside else "index rt"] += clock() - start

    async def timed_call(script: Any, keys: list[Any], args: list[Any]) -> Any:
        start = clock()
        try:
            return await script_call(script, keys, args)
        finally:
            timers.ns["sessions rt" if inside else "index rt"] += clock() - start

    async def timed_load(*args: Any) -> Any:
        nonlocal inside
        inside = True
        start = clock()
        try:
            return await load(*args)
        finally:
            inside = False
            timers.ns["load"] += clock() - start

    with (
        patched(_scripts, "execute", timed_execute),
        patched(_scripts, "evaluate", timed_call),
        patched(lister, "load_sessions", timed_load),
    ):
        yield


def page_hash_keys(service: Any, app: str, members: Sequence[Any]) -> list[str]:
    """The hashes a page of the app-wide index's ``members`` reads: each session's metadata
    and state, then each user's state once."""
    engine = _engine(service)
    pairs = [engine.listing._pair(app, None, m) for m in members]
    keys: list[str] = []
    for u, s in pairs:
        found = engine.keys.session(app, u, s)
        keys += [found.meta, found.state]
    keys += sorted({engine.keys.session(app, u, "-").user_state for u, _ in pairs})
    return keys


# -- the append script, called raw ------------------------------------------------------------


def append_lua_source(*, acl_checks: bool = True, stop: str = "") -> str:
    """append_event.lua as the library loads it; without ``acl_checks``, with its ACL
    questions (lua/_permitted.lua) answered "allowed" unasked. ``stop``: "checks" returns
    once its ACL questions are answered, "call" at once (what the call itself costs)."""
    source: str = _scripts.lua_source("append_event")
    if stop == "call":
        return "return 1"
    if stop == "checks":
        answered = "if refused then return refused end"
        assert answered in source
        source = source[: source.index(answered)] + "return 1"
    if acl_checks:
        return source
    asked = "if not redis.acl_check_cmd then return nil end"
    assert asked in source
    return source.replace(asked, "if true then return nil end")


def _fields(delta: Any) -> list[list[bytes | str]]:
    encode = _codec_module.encode_fields
    return [
        encode(part, scope) for part, scope in zip(split_state_delta(delta), _SCOPES, strict=True)
    ]


def append_lua_calls(
    service: Any, app: str, session: Any, events: Sequence[Any]
) -> tuple[list[str], list[list[Any]]]:
    """append_event.lua's KEYS, and for each of ``events`` appended to ``session`` in turn
    the KEYS and ARGV of its call, as the library builds them under the merge policy with
    no revision (no stale check) and no catch-up."""
    merge = type(service)(
        raw_client(service), config=service.config.model_copy(update={"stale_policy": "merge"})
    )
    writes = _engine(merge).writes
    models = codec(merge)
    k = session_keys(merge, app, session.user_id, session.id)
    keys: list[str] = []
    calls: list[list[Any]] = []
    for event in events:
        ts = event.timestamp
        call = writes._append_call(
            k,
            session.id,
            None,
            "",
            event.id,
            models.encode_event(event),
            ts,
            ts,
            models.read_hints(event),
            _session_calls.state_argv(_fields(event.actions.state_delta)),
            schema=models.fingerprint,
        )
        keys, args = _session_calls.APPEND_EVENT.split(call)
        calls.append([*keys, *args])
    return keys, calls


# -- pure CPU work, for pyperf (benchmarks.cpu) ----------------------------------------------


def append_call_work(service: Any, session: Any, event: Any) -> Callable[[], Any]:
    """The CPU work of an append before its script call: split the delta by scope, encode
    its values, encode the event, name the keys, build the script's arguments."""
    engine = _engine(service)
    writes = engine.writes
    models = engine.ctx.codec
    split = _writes_module.split_state_delta
    encode_fields = _writes_module.encode_fields

    def work() -> Any:
        delta = event.actions.state_delta
        fields = [
            encode_fields(part, scope) for part, scope in zip(split(delta), _SCOPES, strict=True)
        ]
        raw = models.encode_event(event)
        keys = engine.keys.session(session.app_name, session.user_id, session.id)
        call = writes._append_call(
            keys,
            session.id,
            7,
            "",
            event.id,
            raw,
            event.timestamp,
            event.timestamp,
            ("", ""),
            _session_calls.state_argv(fields),
        )
        return _session_calls.APPEND_EVENT.split(call)

    return work


def cache_hit_work(service: Any, events: list[Any]) -> Callable[[], Any]:
    """The CPU work of a read cache hit on a session holding ``events`` (no new ones): the
    entry looked up, a session built on a new list of the shared events."""
    models = codec(service)
    cache: ReadCache[Any] = ReadCache(1 << 30)
    key = "bench:meta"
    cache.put(key, Cached("0", len(events), "1-0", f"{len(events)}-0", events[-1].id, events, 1))
    stored = StoredSession("s", "app", "user", {"step": 1}, time.time(), len(events))

    def work() -> Any:
        entry = cache.get(key)
        assert entry is not None
        return models.build_session(stored, list(entry.events))

    return work


def state_encode_work(delta: dict[str, Any]) -> Callable[[], Any]:
    """A state delta split by scope and each scope's values checked and encoded."""
    return lambda: _fields(delta)


# -- self-check: python -m benchmarks.harness.internals ---------------------------------------


def check() -> dict[str, str]:
    """Each reach-in above tried against the library on the path (no Redis needed): "ok" or
    why it fails. Run it after the internals move, to see what to repoint."""
    from contextlib import AbstractContextManager

    from redis.asyncio import Redis

    from benchmarks.harness.workloads import make_event
    from redis_agent_sessions import RedisSessionService, Session

    service = RedisSessionService(Redis(host="127.0.0.1", port=1))  # never connected
    session = Session(id="s", app_name="a", user_id="u", state={})
    event = make_event(1, "check")

    def entered(manager: AbstractContextManager[Any]) -> None:
        with manager:
            pass

    probes: dict[str, Callable[[], Any]] = {
        "key_space": lambda: key_space(service).app_sessions("a"),
        "session_keys": lambda: session_keys(service, "a", "u", "s").meta,
        "raw_client": lambda: raw_client(service),
        "codec": lambda: codec(service).encode_event(event),
        **{
            f"instrument_points({what})": lambda what=what: entered(
                instrumented(Timers(), instrument_points(service, what))
            )
            for what in ("append", "get_session", "page")
        },
        "script_calls_answered": lambda: entered(script_calls_answered(APPEND_OK_REPLY)),
        "redis_py_packing": lambda: entered(redis_py_packing()),
        "page_round_trips": lambda: entered(page_round_trips(Timers(), service)),
        "page_hash_keys": lambda: page_hash_keys(service, "a", [b"u:s"]),
        "append_lua_source": lambda: append_lua_source(acl_checks=False),
        "append_lua_calls": lambda: append_lua_calls(service, "a", session, [event]),
        "append_call_work": lambda: append_call_work(service, session, event)(),
        "cache_hit_work": lambda: cache_hit_work(service, [event, event])(),
        "state_encode_work": lambda: state_encode_work(event.actions.state_delta)(),
    }
    out = {}
    for name, probe in probes.items():
        try:
            probe()
            out[name] = "ok"
        except Exception as exc:
            out[name] = f"FAILS: {type(exc).__name__}: {exc}"
    return out


if __name__ == "__main__":
    import redis_agent_sessions

    print(f"library: {redis_agent_sessions.__file__}")
    print(
        "(ok = reachable; a patch point that is reachable may still no longer be on the path "
        "the library takes: a breakdown whose part reads 0 us says so)"
    )
    for name, verdict in check().items():
        print(f"{name:32} {verdict}")
