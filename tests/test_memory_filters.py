"""Search filters and recency (issue 55 section 3): every filter combination on a small
store returns what a brute-force reference says (the complete unfiltered ranking, each entry
checked against the filter here), on both backends and on a cluster; bad filters are a
typed error before anything is searched; the ADK facade passes them through.

"Inside the search": the best ``limit`` within the filter, never the top ``limit`` of all
cut afterwards. A turn found only through the turns around it is found when one of those
within the filter says a query word (docs/memory.md#filters)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import fakeredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from _backends import backend, pick
from redis_agent_sessions import (
    CallableGenerator,
    Content,
    Event,
    FactSettings,
    InvalidFilterError,
    MemoryEntry,
    MemoryFilter,
    MemoryOperation,
    Part,
    RedisMemoryService,
    Session,
    SessionServiceConfig,
)
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory._analysis import text_terms
from redis_agent_sessions.memory._index_defs import ADDED, SCHEMA

APP = "filters_app"
VOCAB = ["deploy", "status", "ready", "blue", "car", "the"]  # "the": a turn saying no word
AUTHORS = ["user", "model", "alice"]
TEAMS: list[Any] = ["red", "blue", 1, True, None]
TOPICS = ["home", "work", "pets"]
TIMES = [1.0, 2.0, 3.0, 4.0]
FACT_TS = 1e9  # a fact's time is when it was written: after every event here, before 1e12
REACH = 2  # the default context_turns


@pytest.fixture(params=pick("fake", "real", "search", "cluster", "search-cluster"))
async def admin(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    async with backend(request.param, monkeypatch) as client:
        yield client


def service(client: Any, request: pytest.FixtureRequest, **kw: Any) -> RedisMemoryService:
    kind = str(request.node.callspec.params["admin"])
    return RedisMemoryService(
        client,
        backend="search" if kind.startswith("search") else "plain",
        config=SessionServiceConfig(indexed_metadata=("team",)),
        **kw,
    )


@dataclass
class Known:
    """What the test knows of an entry it wrote."""

    text: str
    kind: str
    author: str | None = None
    session: str = ""
    ts: float = FACT_TS
    topics: Sequence[str] = ()
    team: Any = None
    place: tuple[str, int] | None = None


turn = st.tuples(
    st.lists(st.sampled_from(VOCAB), max_size=3),
    st.sampled_from(AUTHORS),
    st.sampled_from(TIMES),
)
stores = st.fixed_dictionaries({
    "sessions": st.lists(
        st.tuples(st.lists(turn, min_size=1, max_size=4), st.sampled_from(TEAMS)), max_size=3
    ),
    "explicit": st.lists(st.tuples(turn, st.sampled_from(TEAMS)), max_size=2),
    "facts": st.lists(
        st.tuples(st.lists(st.sampled_from(VOCAB[:-1]), min_size=1, max_size=2),
                  st.lists(st.sampled_from(TOPICS), max_size=2)),
        max_size=3,
    ),
})  # fmt: skip


def some(values: Sequence[Any]) -> st.SearchStrategy[list[Any]]:
    return st.lists(st.sampled_from(values), min_size=1, max_size=2, unique=True)


filters = st.fixed_dictionaries(
    {},
    optional={
        "author": st.one_of(st.sampled_from(AUTHORS), some(AUTHORS)),
        "session_ids": some(["s0", "s1", "s2", "nowhere"]),
        "since": st.sampled_from([0, 2, 2.5, 4]),
        "until": st.sampled_from([2, 3.5, 4, 1e12]),
        "topics": some(TOPICS),
        "kind": st.sampled_from(["fact", "event"]),
        "metadata": st.sampled_from(["red", "blue", 1, True, ["red", 1]]).map(
            lambda v: {"team": v}
        ),
    },
).filter(lambda f: f.get("since", 0) <= f.get("until", 1e12))


def within(e: Known, f: dict[str, Any]) -> bool:
    """The filter, by brute force over what the test wrote."""
    authors = [f["author"]] if isinstance(f.get("author"), str) else f.get("author")
    teams = f.get("metadata", {}).get("team")
    teams = teams if isinstance(teams, list) else None if teams is None else [teams]
    return (
        (authors is None or e.author in authors)
        and ("session_ids" not in f or e.session in f["session_ids"])
        and e.ts >= f.get("since", -1)
        and e.ts <= f.get("until", 1e13)
        and ("topics" not in f or bool(set(e.topics) & set(f["topics"])))
        and ("kind" not in f or e.kind == f["kind"])
        # Equality with the type: 1 is not True (Python says 1 == True).
        and (teams is None or any(type(t) is type(e.team) and t == e.team for t in teams))
    )


async def write(memory: RedisMemoryService, user: str, store: dict[str, Any]) -> dict[str, Known]:
    known: dict[str, Known] = {}
    for s, (turns, team) in enumerate(store["sessions"]):
        sid = f"s{s}"
        events = []
        for i, (words, author, ts) in enumerate(turns):
            said = " ".join(words) or "the"
            events.append(
                Event(id=f"{sid}-{i}", author=author, timestamp=ts,
                      content=Content(role="user", parts=[Part(text=said)]))
            )  # fmt: skip
            known[f"{sid}-{i}"] = Known(said, "event", author, sid, ts, team=team, place=(sid, i))
        meta = {} if team is None else {"team": team}
        await memory.add_session_to_memory(
            Session(id=sid, app_name=APP, user_id=user, events=events), custom_metadata=meta
        )
    for j, ((words, author, ts), team) in enumerate(store["explicit"]):
        said = " ".join(words) or "the"
        entry = MemoryEntry(
            id=f"x{j}", author=author, content=Content(parts=[Part(text=said)]),
            timestamp=datetime.fromtimestamp(ts, timezone.utc).isoformat(),
            custom_metadata={} if team is None else {"team": team},
        )  # fmt: skip
        await memory.add_memory(app_name=APP, user_id=user, memories=[entry])
        known[f"x{j}"] = Known(said, "event", author, "", ts, team=team)
    if store["facts"]:
        LEARNED[:] = [
            MemoryOperation(action="add", fact=" ".join(words) + f" number{k}", topics=topics)
            for k, (words, topics) in enumerate(store["facts"])
        ]
        await memory.add_session_to_memory(
            Session(id="facts", app_name=APP, user_id=user, events=[
                Event(id="said", author="user", timestamp=0.5,
                      content=Content(role="user", parts=[Part(text="zzz")]))
            ])
        )  # fmt: skip
        LEARNED.clear()
        for fact in await memory.list_facts(app_name=APP, user_id=user):
            known[fact.id] = Known(fact.text, "fact", topics=fact.topics)
        known["said"] = Known("zzz", "event", "user", "facts", 0.5, place=("facts", 0))
    return known


LEARNED: list[MemoryOperation] = []
"""What the generator learns from the next session added (nothing, usually)."""
LEARN = CallableGenerator(lambda request: list(LEARNED))


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    store=stores,
    given_filter=filters,
    query=st.lists(st.sampled_from(VOCAB[:-1]), min_size=1, max_size=3),
    limit=st.sampled_from([1, 3, 50]),
    as_object=st.booleans(),
)
async def test_every_filter_combination_matches_the_brute_force_reference(
    admin: Any,
    request: pytest.FixtureRequest,
    store: dict[str, Any],
    given_filter: dict[str, Any],
    query: list[str],
    limit: int,
    as_object: bool,
) -> None:
    memory = service(admin, request, generator=LEARN, facts=FactSettings(keep_events=True))
    user = uuid.uuid4().hex
    known = await write(memory, user, store)
    said = " ".join(query)
    every = await memory.search_memory(app_name=APP, user_id=user, query=said, limit=1000)
    wanted = set(text_terms(said))
    by_place = {e.place: i for i, e in known.items() if e.place is not None}

    def says(memory_id: str) -> bool:
        return bool(set(text_terms(known[memory_id].text)) & wanted)

    def reached(memory_id: str) -> bool:
        # Found by its own words, or through a turn around it within the filter saying one.
        e = known[memory_id]
        if says(memory_id) or e.place is None:
            return True
        sid, i = e.place
        near = [by_place.get((sid, j)) for j in range(i - REACH, i + REACH + 1) if j != i]
        return any(n is not None and says(n) and within(known[n], given_filter) for n in near)

    expected = [
        m.id for m in every.memories
        if m.id is not None and within(known[m.id], given_filter) and reached(m.id)
    ][:limit]  # fmt: skip
    if as_object:
        result = await memory.search_memory(
            app_name=APP, user_id=user, query=said, limit=limit,
            filters=MemoryFilter(**given_filter),
        )  # fmt: skip
    else:
        result = await memory.search_memory(
            app_name=APP, user_id=user, query=said, limit=limit, **given_filter
        )
    assert [m.id for m in result.memories] == expected


async def test_recency_lifts_newer_entries_by_their_half_life(
    admin: Any, request: pytest.FixtureRequest
) -> None:
    memory = service(admin, request)
    user = uuid.uuid4().hex
    now = time.time()
    day = 86400.0
    entries = [
        MemoryEntry(
            id=name,
            content=Content(parts=[Part(text=said)]),
            timestamp=datetime.fromtimestamp(now - age, timezone.utc).isoformat(),
        )
        for name, said, age in [
            ("old", "deploy status ready", 30 * day),
            ("new", "deploy", 0.0),
        ]
    ]
    await memory.add_memory(app_name=APP, user_id=user, memories=entries)

    async def ids(**kw: Any) -> list[str | None]:
        found = await memory.search_memory(
            app_name=APP, user_id=user, query="deploy status ready", **kw
        )
        return [m.id for m in found.memories]

    assert await ids() == ["old", "new"]
    assert await ids(recency_half_life=timedelta(days=1)) == ["new", "old"]
    assert await ids(recency_half_life=365 * day) == ["old", "new"]
    # Within the filter too.
    assert await ids(recency_half_life=day, since=now - day) == ["new"]


BAD: list[dict[str, Any]] = [
    {"filters": {"autor": "user"}},
    {"filters": 3},
    {"author": 3},
    {"session_ids": "s0"},
    {"session_ids": []},
    {"since": "yesterday"},
    {"since": True},
    {"since": 5, "until": 4},
    {"since": datetime(2030, 1, 1, tzinfo=timezone.utc), "until": 0},
    {"kind": "facts"},
    {"topics": [1]},
    {"metadata": {"project": "x"}},
    {"metadata": {"team": 1.5}},
    {"metadata": {"team": []}},
    {"metadata": ["team"]},
    {"recency_half_life": 0},
    {"recency_half_life": "1d"},
    {"filters": {"author": "a"}, "author": "b"},
]


@pytest.mark.parametrize("bad", BAD, ids=[str(b) for b in BAD])
async def test_a_bad_filter_is_a_typed_error_and_nothing_is_searched(bad: dict[str, Any]) -> None:
    # A client of a server that is not there: anything searched would fail otherwise.
    client = Redis(host="127.0.0.1", port=1)
    memory = RedisMemoryService(
        client, backend="plain", config=SessionServiceConfig(indexed_metadata=("team",))
    )
    with pytest.raises(InvalidFilterError):
        await memory.search_memory(app_name=APP, user_id="u", query="deploy", **bad)
    await client.aclose()


def test_indexed_metadata_is_a_setting_of_the_config_and_the_url() -> None:
    assert SessionServiceConfig(indexed_metadata="team, project").indexed_metadata == (
        "team",
        "project",
    )
    memory = RedisMemoryService.from_url("redis://127.0.0.1:1/0?indexed_metadata=team,project")
    assert memory.config.indexed_metadata == ("team", "project")


async def test_reindex_back_fills_a_field_declared_after_its_entries_were_written(
    admin: Any, request: pytest.FixtureRequest
) -> None:
    before = RedisMemoryService(
        admin,
        backend="search" if "search" in str(request.node.callspec.params["admin"]) else "plain",
        generator=LEARN,
        facts=FactSettings(keep_events=True),
    )
    user = uuid.uuid4().hex
    LEARNED[:] = [MemoryOperation(action="add", fact="The deploy is blue.", topics=["work"])]
    await before.add_session_to_memory(
        Session(id="s0", app_name=APP, user_id=user, events=[
            Event(id="e0", author="user", timestamp=1.0,
                  content=Content(role="user", parts=[Part(text="deploy status")]))
        ]),
        custom_metadata={"team": "red"},
    )  # fmt: skip
    LEARNED.clear()
    after = service(admin, request)

    async def ids(**kw: Any) -> list[str | None]:
        found = await after.search_memory(app_name=APP, user_id=user, query="deploy", **kw)
        return sorted(m.id for m in found.memories if m.id is not None)

    assert await ids(metadata={"team": "red"}) == []  # written before the declaration
    [fact] = await after.list_facts(app_name=APP, user_id=user)
    # As a fact written before filters: no tokens.
    await admin.hdel(after._memory.keys.memory_entry(APP, user, fact.id), "fx")
    report = await after.reindex(app_name=APP, user_id=user)
    assert (report.entries, report.reindexed) == (2, 2)
    assert await ids(metadata={"team": "red"}) == ["e0"]
    # A learned fact is written again as a fact, with its topics.
    assert await after.list_facts(app_name=APP, user_id=user) == [fact]
    assert await ids(kind="fact") == await ids(topics=["work"]) == [fact.id]
    assert (await after.reindex(app_name=APP, user_id=user)).reindexed == 0


@pytest.fixture(params=pick("search"))
async def search_admin(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    async with backend(request.param, monkeypatch) as client:
        yield client


async def test_an_index_of_the_definition_before_filters_gets_their_field(
    search_admin: Any,
) -> None:
    admin = search_admin
    old = [p for n, k, o in SCHEMA if n not in ADDED for p in (n, k, *o)]
    keys = KeySpace("ras")
    await admin.execute_command(
        "FT.CREATE", keys.memory_index(), "ON", "HASH", "PREFIX", 1, keys.memory_index_prefix(),
        "STOPWORDS", 0, "SCHEMA", *old,
    )  # fmt: skip
    memory = RedisMemoryService(admin, backend="search")
    assert await memory.backend() == "search"
    info = await admin.execute_command("FT.INFO", keys.memory_index())
    assert "b'fx'" in str(info)
    entry = MemoryEntry(content=Content(parts=[Part(text="deploy")]), author="a")
    await memory.add_memory(app_name=APP, user_id="u", memories=[entry])
    found = await memory.search_memory(app_name=APP, user_id="u", query="deploy", author="a")
    assert len(found.memories) == 1


async def test_the_adk_facade_passes_the_filters_and_recency_through() -> None:
    pytest.importorskip("google.adk", reason="needs the [adk] extra")
    from google.adk.events import Event as AdkEvent
    from google.adk.sessions import Session as AdkSession
    from google.genai import types

    from redis_agent_sessions.adk import RedisMemoryService as AdkMemoryService

    client = fakeredis.FakeAsyncRedis()
    memory = AdkMemoryService(
        client, backend="plain", config=SessionServiceConfig(indexed_metadata=("team",))
    )
    events = [
        AdkEvent(
            id=f"e{i}",
            author=author,
            timestamp=float(i),
            content=types.Content(role="user", parts=[types.Part(text="deploy status")]),
        )
        for i, author in enumerate(["user", "model", "user"])
    ]
    await memory.add_session_to_memory(
        AdkSession(id="s", app_name=APP, user_id="u", events=events, last_update_time=3.0)
    )

    async def ids(**kw: Any) -> list[str | None]:
        found = await memory.search_memory(app_name=APP, user_id="u", query="deploy", **kw)
        return [m.id for m in found.memories]

    assert await ids(author="user") == ["e2", "e0"]
    assert await ids(filters={"author": "model"}) == ["e1"]
    assert await ids(author="user", until=1.0) == ["e0"]
    assert await ids(kind="fact") == []
    assert await ids(recency_half_life=3600) == ["e2", "e1", "e0"]
    with pytest.raises(InvalidFilterError):
        await ids(metadata={"project": "x"})
    await client.aclose()
