"""Memory's limits (issue 52), on every backend of the memory contract suite: a search of
more than ``MAX_QUERY_TERMS`` distinct terms, an entry over ``max_payload_bytes`` or over
``MAX_ENTRY_TERMS`` distinct terms, and metadata nested past the depth limit, are each
refused with the exact typed error, leaving every key's type and DUMP bytes as they were."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest

from _acl import acl_user
from _backends import backend, pick
from _snapshot import snapshot
from redis_agent_sessions import (
    Content,
    Event,
    InvalidInputError,
    MemoryEntry,
    Part,
    PayloadTooLargeError,
    RedisMemoryService,
    Session,
    SessionServiceConfig,
)
from redis_agent_sessions._redis.codec import MAX_DEPTH
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory import CallableGenerator, FactSettings
from redis_agent_sessions.memory._docs import MAX_ENTRY_TERMS
from redis_agent_sessions.memory._ranking import MAX_QUERY_TERMS, PlainRanker, prepare
from test_hostile_input import nested
from test_memory import (
    memory_client,  # noqa: F401 - the memory suite's backends
    provision_on_demand,
)

APP, USER = "memory_app", "user1"
Make = Callable[..., RedisMemoryService]


@pytest.fixture
async def make(
    memory_client: Any,  # noqa: F811
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Make]:
    """Services of the backend's kind (as the worker under ``acl``) with config ``**kw``."""
    kind = request.node.callspec.params["memory_client"]
    search = kind.startswith("search")
    if kind == "search-per-app":
        provision_on_demand(monkeypatch)

    def on(client: Any, **config: Any) -> RedisMemoryService:
        if kind == "search-per-app":
            config["memory_index"] = "per_app"
        backend = "auto" if search else "plain"
        return RedisMemoryService(client, config=SessionServiceConfig(**config), backend=backend)

    if not kind.endswith("acl"):
        yield lambda **config: on(memory_client, **config)
        return
    async with acl_user(memory_client, search=search) as worker:
        yield lambda **config: on(worker, **config)


def words(n: int, start: int = 0) -> str:
    return " ".join(f"w{i}" for i in range(start, start + n))


def entry(text: str, **kw: Any) -> MemoryEntry:
    return MemoryEntry(content=Content(parts=[Part(text=text)]), **kw)


def event(text: str, **kw: Any) -> Event:
    return Event(author="user", content=Content(role="user", parts=[Part(text=text)]), **kw)


async def refused(
    client: Any, calls: list[Callable[[], Awaitable[Any]]], error: type[Exception], match: str
) -> list[Any]:
    """Each call raises exactly ``error`` matching ``match`` and leaves every key as it was."""
    # One snapshot before them all: each call must leave the store as the first found it, so
    # the state after one is the state before the next (a snapshot of a store of 10,000
    # posting keys costs more than the calls).
    caught: list[Any] = []
    before = await snapshot(client)
    for call in calls:
        with pytest.raises(error, match=match) as raised:
            await call()
        assert type(raised.value) is error
        assert await snapshot(client) == before
        caught.append(raised.value)
    return caught


async def test_a_query_over_the_term_limit_is_refused_alike(
    make: Make,
    memory_client: Any,  # noqa: F811
) -> None:
    memory = make()
    await memory.add_memory(app_name=APP, user_id=USER, memories=[entry("w5 and w999 too")])

    def search(query: str) -> Callable[[], Awaitable[Any]]:
        return lambda: memory.search_memory(app_name=APP, user_id=USER, query=query)

    # 4,000 words failed inside the plain backend's script before (issue 52); a CJK "word"
    # of 600 characters looks for its 599 pairs too.
    cjk = "".join(chr(0x4E00 + i) for i in range(600))
    errors = await refused(
        memory_client,
        [search(words(MAX_QUERY_TERMS + 1)), search(words(4_000)), search(cjk)],
        InvalidInputError,
        f"over the limit of {MAX_QUERY_TERMS}",
    )
    assert str(errors[0]) == (
        "the query has 1001 distinct terms (its words, and outside ASCII their characters and "
        "pairs of characters), over the limit of 1000"
    )
    found = await memory.search_memory(
        app_name=APP, user_id=USER, query=words(MAX_QUERY_TERMS) + " w5 w5"
    )
    assert [m.content.text for m in found.memories] == ["w5 and w999 too"]


@pytest.mark.parametrize("kind", pick("fake", "real"))
async def test_the_plain_ranking_script_takes_any_number_of_terms(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Below the service's limit, what the script takes has no bound of its own: 4,000 terms
    # overflowed Lua's stack in one HMGET before (issue 52). The plain backend's script only:
    # the search backend ranks without it.
    async with backend(kind, monkeypatch) as client:
        memory = RedisMemoryService(client, backend="plain")
        await memory.add_memory(app_name=APP, user_id=USER, memories=[entry("w5 and w3999 too")])
        ranker = PlainRanker(client, KeySpace())
        ranked = await ranker.rank(APP, USER, prepare(words(4_000)), 10)
        found = await memory.search_memory(app_name=APP, user_id=USER, query="w5")
        assert [memory_id for memory_id, _ in ranked.hits] == [m.id for m in found.memories]


async def test_an_entry_over_the_byte_limit_writes_nothing(make: Make, memory_client: Any) -> None:  # noqa: F811
    # What counts: the content and metadata as JSON, and the author, in UTF-8.
    text, meta, author = "é" * 100 + " hello", {"k": "v"}, "agent"
    content = Content(parts=[Part(text=text)]).model_dump_json(exclude_none=True)
    size = len(content.encode()) + len(orjson.dumps(meta)) + len(author)
    memory = make(max_payload_bytes=size)
    exact = entry(text, custom_metadata=meta, author=author, id="exact")
    await memory.add_memory(app_name=APP, user_id=USER, memories=[exact])
    over = entry(text + "!", custom_metadata=meta, author=author, id="over")
    big_meta = entry("hello", custom_metadata={"k": "v" * size})
    errors = await refused(
        memory_client,
        [
            lambda: memory.add_memory(app_name=APP, user_id=USER, memories=[entry("ok"), over]),
            lambda: memory.add_memory(app_name=APP, user_id=USER, memories=[big_meta]),
            lambda: memory.add_events_to_memory(
                app_name=APP, user_id=USER, events=[event("ok"), event("x" * size, id="e2")]
            ),
            lambda: memory.add_session_to_memory(
                Session(id="s", app_name=APP, user_id=USER, events=[event("x" * size, id="e3")])
            ),
        ],
        PayloadTooLargeError,
        f"over the limit of {size} bytes",
    )
    assert str(errors[0]) == (
        f"memory entry 'over' is {size + 1} bytes encoded, over the limit of {size} bytes"
    )
    assert (errors[0].size, errors[0].limit) == (size + 1, size)
    found = await memory.search_memory(app_name=APP, user_id=USER, query="hello")
    assert [m.id for m in found.memories] == ["exact"]


async def test_an_entry_over_the_term_limit_writes_nothing(make: Make, memory_client: Any) -> None:  # noqa: F811
    memory = make()
    await memory.add_memory(
        app_name=APP, user_id=USER, memories=[entry(words(MAX_ENTRY_TERMS), id="most")]
    )
    # Each CJK character and pair of characters is a term too, and the author's words are.
    cjk = "".join(chr(0x4E00 + i) for i in range(MAX_ENTRY_TERMS // 2 + 1))
    errors = await refused(
        memory_client,
        [
            lambda: memory.add_memory(
                app_name=APP, user_id=USER, memories=[entry(words(MAX_ENTRY_TERMS + 1), id="x")]
            ),
            lambda: memory.add_memory(
                app_name=APP,
                user_id=USER,
                memories=[entry(words(MAX_ENTRY_TERMS), author="the bot", id="y")],
            ),
            lambda: memory.add_memory(app_name=APP, user_id=USER, memories=[entry(cjk)]),
            lambda: memory.add_events_to_memory(
                app_name=APP, user_id=USER, events=[event(words(MAX_ENTRY_TERMS + 1))]
            ),
        ],
        InvalidInputError,
        f"over the limit of {MAX_ENTRY_TERMS}",
    )
    assert str(errors[0]) == (
        "memory entry 'x' has 10001 distinct terms, over the limit of 10000 (its words and its "
        "author's, and outside ASCII their characters and pairs of characters)"
    )
    assert str(errors[1]).startswith("memory entry 'y' has 10002 distinct terms")
    found = await memory.search_memory(app_name=APP, user_id=USER, query="w9999")
    assert [m.id for m in found.memories] == ["most"]


async def test_metadata_nested_past_the_depth_limit_writes_nothing(
    make: Make,
    memory_client: Any,  # noqa: F811
) -> None:
    # The metadata as a whole is one value: its own object is the first level.
    deepest = {"d": nested(MAX_DEPTH - 1)}
    memory = make()
    await memory.add_memory(
        app_name=APP, user_id=USER, memories=[entry("hello", custom_metadata=deepest)]
    )
    calls: list[Callable[[], Awaitable[Any]]] = []
    for deep in ({"d": nested(MAX_DEPTH)}, {"d": nested(10_000)}):
        calls += [
            lambda d=deep: memory.add_memory(
                app_name=APP, user_id=USER, memories=[entry("hello", custom_metadata=d)]
            ),
            lambda d=deep: memory.add_memory(
                app_name=APP, user_id=USER, memories=[entry("hello")], custom_metadata=d
            ),
            lambda d=deep: memory.add_events_to_memory(
                app_name=APP, user_id=USER, events=[event("hello")], custom_metadata=d
            ),
        ]
    errors = await refused(memory_client, calls, InvalidInputError, "more than 100 levels deep")
    assert str(errors[0]) == (
        "state value in custom_metadata nests lists and objects more than 100 levels deep"
    )
    found = await memory.search_memory(app_name=APP, user_id=USER, query="hello")
    assert [m.custom_metadata for m in found.memories] == [deepest]


@pytest.mark.fake
async def test_entries_over_a_limit_are_refused_before_the_generator_learns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with backend("fake", monkeypatch) as client:
        asked: list[Any] = []
        memory = RedisMemoryService(
            client,
            backend="plain",
            config=SessionServiceConfig(max_payload_bytes=1000),
            generator=CallableGenerator(lambda request: asked.append(request) or []),
            facts=FactSettings(keep_events=True),
        )
        await memory.add_memory(app_name=APP, user_id=USER, memories=[entry("hello")])
        big = Session(id="s", app_name=APP, user_id=USER, events=[event("hi"), event("x" * 1000)])
        await refused(
            client,
            [
                lambda: memory.add_session_to_memory(big),
                lambda: memory.add_events_to_memory(app_name=APP, user_id=USER, events=big.events),
            ],
            PayloadTooLargeError,
            "over the limit of 1000 bytes",
        )
        assert asked == []
