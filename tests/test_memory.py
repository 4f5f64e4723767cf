"""Memory contract suite, run on fakeredis, on plain Redis (REDIS_URL) and on Redis with
RediSearch (REDIS_SEARCH_URL; also with an index per app), each also as the documented
least-privilege ACL user (``acl``, ``search-acl``), and on both kinds of cluster; a real
backend is skipped when its variable is unset. ``memory_client`` is an admin client for
inspection; services run as the worker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis

from _acl import acl_user
from _backends import MEMORY_BACKENDS, backend
from _embedders import SynonymEmbedder
from _servers import skip_without
from redis_agent_sessions import (
    Content,
    Event,
    InvalidInputError,
    MemoryEntry,
    MemoryIndexError,
    Part,
    PermissionDeniedError,
    RedisMemoryService,
    Session,
    SessionServiceConfig,
)
from redis_agent_sessions.memory._index_defs import IndexDefinitions
from redis_agent_sessions.memory._vectors import RETRIEVAL_KEY

APP, USER = "memory_app", "user1"


@pytest.fixture(params=MEMORY_BACKENDS)
async def memory_client(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    async with backend(request.param, monkeypatch) as client:
        yield client


def provision_on_demand(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per-app indexes are an operator's to make (``tenant create``): in the contract suite
    each app a test uses is provisioned as it first needs them, as an operator would have,
    so that every test runs through the per-app indexes."""
    ensure = IndexDefinitions.ensure

    async def provisioned(self: Any, app: str = "", user: str = "", **kw: Any) -> None:
        if self.layout.provisioned:
            vectors = self._want_vectors() if self._semantic is not None else None
            await self.provision(app, vectors=vectors)
        await ensure(self, app, user, **kw)

    monkeypatch.setattr(IndexDefinitions, "ensure", provisioned)


@pytest.fixture(params=["keyword", "semantic"])
async def memory(
    memory_client: Any, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[RedisMemoryService]:
    """The service, keyword-only or with the synonyms embedder (hybrid search): the
    contract holds for both (where a test pins the keyword ranking's order of ties, it says
    so and checks that only without an embedder)."""
    kind = request.node.callspec.params["memory_client"]
    expected = "search" if kind.startswith("search") else "plain"
    embedder = SynonymEmbedder() if request.param == "semantic" else None
    if kind == "search-per-app":
        provision_on_demand(monkeypatch)
    if not kind.endswith("acl"):
        # memory_index only changes what the search backend's indexes cover (one per app).
        config = SessionServiceConfig(
            memory_index="per_app" if kind == "search-per-app" else "shared"
        )
        service = RedisMemoryService(memory_client, config=config, embedder=embedder)
        assert await service.backend() == expected
        yield service
        return
    # The documented base line has no +module|list: a plain-only worker names its backend.
    search = kind == "search-acl"
    async with acl_user(memory_client, search=search) as worker:
        service = RedisMemoryService(
            worker, backend="auto" if search else "plain", embedder=embedder
        )
        assert await service.backend() == expected
        yield service


def event(text: str, *, ts: float, id: str | None = None, author: str = "user") -> Event:
    kwargs: dict[str, Any] = {} if id is None else {"id": id}
    return Event(
        author=author, timestamp=ts, content=Content(role="user", parts=[Part(text=text)]), **kwargs
    )


def session(sid: str, *events: Event, app: str = APP, user: str = USER) -> Session:
    return Session(id=sid, app_name=app, user_id=user, events=list(events))


def stored_metadata(entry: MemoryEntry) -> dict[str, Any]:
    """The metadata stored with an entry: without what hybrid search adds about how it was
    found (checked in test_semantic_memory.py)."""
    return {k: v for k, v in entry.custom_metadata.items() if k != RETRIEVAL_KEY}


async def texts(memory: RedisMemoryService, query: str, **kw: Any) -> list[str]:
    kw.setdefault("app_name", APP)
    kw.setdefault("user_id", USER)
    found = await memory.search_memory(query=query, **kw)
    return [m.content.text for m in found.memories]


# -- recall (scenarios.md section 4) ------------------------------------------------------


async def test_recall_favorite_color(memory: RedisMemoryService) -> None:
    await memory.add_session_to_memory(
        session("session_capture", event("My favorite color is blue and I love hiking.", ts=1))
    )
    for query in ("What's my favorite color?", "favorite color"):
        assert await texts(memory, query) == ["My favorite color is blue and I love hiking."]
    assert await texts(memory, "favorite color", user_id="user2") == []


async def test_recall_favorite_project(memory: RedisMemoryService) -> None:
    await memory.add_session_to_memory(
        session(
            "s1",
            event("My favorite project is Project Alpha.", ts=1),
            event("The weather is nice today.", ts=2),
        )
    )
    found = await texts(memory, "What is my favorite project?")
    assert found[0] == "My favorite project is Project Alpha."


async def test_entry_fields(memory: RedisMemoryService) -> None:
    e = event("hello world", ts=1_700_000_000.5, id="e1", author="agent")
    await memory.add_session_to_memory(session("s1", e))
    (found,) = (await memory.search_memory(app_name=APP, user_id=USER, query="HELLO")).memories
    assert found.id == "e1"
    assert found.author == "agent"
    assert found.content == e.content
    assert found.timestamp is not None
    assert found.timestamp.startswith("2023-11-")
    assert stored_metadata(found) == {}


# -- isolation and hostile queries ----------------------------------------------------------


async def test_isolation_by_user_and_app(memory: RedisMemoryService) -> None:
    await memory.add_session_to_memory(session("s", event("secret alpha", ts=1)))
    await memory.add_session_to_memory(session("s", event("secret beta", ts=1), user="user2"))
    await memory.add_session_to_memory(session("s", event("secret gamma", ts=1), app="app2"))
    await memory.add_session_to_memory(session("s", event("secret delta", ts=1), user="user1:x"))
    assert await texts(memory, "secret") == ["secret alpha"]
    assert await texts(memory, "secret", user_id="user2") == ["secret beta"]
    assert await texts(memory, "secret", app_name="app2") == ["secret gamma"]
    assert await texts(memory, "secret", user_id="user1:x") == ["secret delta"]
    assert await texts(memory, "secret", user_id="user3") == []


@pytest.mark.parametrize(
    "query",
    [
        "@user:{*}",
        "*",
        "@app:{*} | secret",
        "-secret",
        '"secret" ~secret (secret) %secret% secret*',
        "@words:secret | @lower:x",
        "} | @user:{user2",
        "\\ ' ` $ ; : , . ? ! [ ] < > = + & ^ #",
    ],
)
async def test_query_syntax_is_data(memory: RedisMemoryService, query: str) -> None:
    await memory.add_session_to_memory(session("s", event("secret alpha", ts=1)))
    await memory.add_session_to_memory(session("s", event("secret beta words", ts=1), user="u2"))
    found = await texts(memory, query)
    assert found in ([], ["secret alpha"])
    assert ("secret" in query.lower()) == (found == ["secret alpha"])


@pytest.mark.parametrize("query", ["", "   ", "?!...", '@{}*|-()"~%', "\n\t"])
async def test_empty_queries_find_nothing(memory: RedisMemoryService, query: str) -> None:
    await memory.add_session_to_memory(session("s", event("anything at all", ts=1)))
    assert await texts(memory, query) == []


async def test_bad_input_is_rejected_before_writing(memory: RedisMemoryService) -> None:
    bad: list[Any] = [
        memory.add_session_to_memory("nope"),  # type: ignore[arg-type]
        memory.add_events_to_memory(app_name=APP, user_id=1, events=[]),  # type: ignore[arg-type]
        memory.add_events_to_memory(app_name=APP, user_id=USER, events=[event("a", ts=1), "x"]),  # type: ignore[list-item]
        memory.add_memory(app_name=APP, user_id=USER, memories=[{"content": {}}]),  # type: ignore[list-item]
        memory.search_memory(app_name=APP, user_id=USER, query=3),  # type: ignore[arg-type]
        memory.search_memory(app_name=APP, user_id=USER, query="a", limit=-1),
        memory.delete_memory(app_name=APP, user_id=USER, memory_id=5),  # type: ignore[arg-type]
        memory.add_memory(
            app_name=APP,
            user_id=USER,
            memories=[MemoryEntry(content=Content(parts=[Part(text="a")]), timestamp="soon")],
        ),
    ]
    for call in bad:
        with pytest.raises(InvalidInputError):
            await call
    assert await texts(memory, "a") == []


# -- ingestion ------------------------------------------------------------------------------


async def test_reingestion_replaces_session_entries(memory: RedisMemoryService) -> None:
    a, b = event("apple banana", ts=1, id="a"), event("banana cherry", ts=2, id="b")
    await memory.add_session_to_memory(session("s", a, b))
    await memory.add_session_to_memory(session("s", a, b))
    assert await texts(memory, "banana") == ["banana cherry", "apple banana"]
    b2 = event("durian only", ts=2, id="b")
    await memory.add_session_to_memory(session("s", b2))
    assert await texts(memory, "banana") == []
    assert await texts(memory, "apple cherry durian") == ["durian only"]


async def test_add_events_deduplicates(memory: RedisMemoryService) -> None:
    e = event("kiwi fruit", ts=1, id="k")
    for _ in range(2):
        await memory.add_events_to_memory(
            app_name=APP, user_id=USER, events=[e], custom_metadata={"src": "turn"}
        )
    found = (await memory.search_memory(app_name=APP, user_id=USER, query="kiwi")).memories
    assert [m.id for m in found] == ["k"]
    assert stored_metadata(found[0]) == {"src": "turn"}


async def test_add_memory_explicit(memory: RedisMemoryService) -> None:
    entry = MemoryEntry(
        id="m1",
        content=Content(parts=[Part(text="The user prefers tea")]),
        author="summarizer",
        timestamp="2024-01-02T03:04:05",
        custom_metadata={"k": 1},
    )
    await memory.add_memory(app_name=APP, user_id=USER, memories=[entry], custom_metadata={"j": 2})
    (found,) = (await memory.search_memory(app_name=APP, user_id=USER, query="tea")).memories
    found.custom_metadata = stored_metadata(found)
    assert found == entry.model_copy(update={"custom_metadata": {"j": 2, "k": 1}})


async def test_delete_one_is_not_reingested(memory: RedisMemoryService) -> None:
    a, b = event("pear one", ts=1, id="a"), event("pear two", ts=2, id="b")
    await memory.add_session_to_memory(session("s", a, b))
    await memory.delete_memory(app_name=APP, user_id=USER, memory_id="b")
    await memory.delete_memory(app_name=APP, user_id=USER, memory_id="missing")
    assert await texts(memory, "pear") == ["pear one"]
    await memory.add_session_to_memory(session("s", a, b))
    await memory.add_events_to_memory(app_name=APP, user_id=USER, events=[b], session_id="s")
    assert await texts(memory, "pear") == ["pear one"]


async def test_delete_all(memory: RedisMemoryService, memory_client: Any) -> None:
    plums = [event(f"plum {i}", ts=i, id=f"p{i}") for i in range(30)]
    await memory.add_session_to_memory(session("s", *plums))
    await memory.add_session_to_memory(session("s", event("plum other", ts=1), user="u2"))
    await memory.delete_memory(app_name=APP, user_id=USER)
    assert await texts(memory, "plum") == []
    assert await texts(memory, "plum", user_id="u2") == ["plum other"]
    await memory.add_session_to_memory(session("s", *plums))
    assert await texts(memory, "plum") == []
    leftovers = [k async for k in memory_client.scan_iter(match=b"ras:mem:{memory_app:user1}:w*")]
    assert leftovers == []


async def test_large_session_in_batches(memory: RedisMemoryService, monkeypatch: Any) -> None:
    from redis_agent_sessions.memory import _store as _memory_store

    events = [event(f"lemon number{i}", ts=i, id=f"e{i}") for i in range(450)]
    await memory.add_session_to_memory(session("s", *events))
    found = await memory.search_memory(app_name=APP, user_id=USER, query="lemon", limit=1000)
    assert len(found.memories) == 450

    calls = 0
    real_put = _memory_store.MemoryStore._put

    async def failing_put(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise ConnectionError("lost")
        return await real_put(self, *args, **kwargs)

    monkeypatch.setattr(_memory_store.MemoryStore, "_put", failing_put)
    melons = [event(f"melon number{i}", ts=i, id=f"m{i}") for i in range(450)]
    with pytest.raises(ConnectionError):
        await memory.add_session_to_memory(session("s", *melons))
    monkeypatch.undo()
    found = await memory.search_memory(app_name=APP, user_id=USER, query="lemon", limit=1000)
    assert len(found.memories) == 450
    await memory.add_session_to_memory(session("s", *melons))
    found = await memory.search_memory(app_name=APP, user_id=USER, query="lemon melon", limit=1000)
    assert {m.content.text.split()[0] for m in found.memories} == {"melon"}
    assert len(found.memories) == 450


# -- matching and ranking -------------------------------------------------------------------


async def test_cjk_substring_matching(memory: RedisMemoryService) -> None:
    await memory.add_session_to_memory(
        session(
            "s",
            event("私は東京に住んでいます", ts=1, id="tokyo"),
            event("私はPythonを使う", ts=2, id="py"),
            event("東京都庁", ts=3, id="tocho"),
            event("京都と東北", ts=4, id="kyoto"),
        )
    )
    assert await texts(memory, "東京") == ["東京都庁", "私は東京に住んでいます"]
    assert await texts(memory, "東京都") == ["東京都庁"]
    assert await texts(memory, "住") == ["私は東京に住んでいます"]
    # The turns around it are found by its words too, below it.
    assert (await texts(memory, "python"))[0] == "私はPythonを使う"
    assert await texts(memory, "thon") == []
    assert await texts(memory, "café") == []


async def test_non_ascii_latin_substring(memory: RedisMemoryService) -> None:
    await memory.add_session_to_memory(session("s", event("Les cafés de Paris", ts=1)))
    assert await texts(memory, "CAFÉ") == ["Les cafés de Paris"]
    assert await texts(memory, "cafe") == []


async def test_ranking_rare_words_weigh_more(memory: RedisMemoryService) -> None:
    # Sessions apart: no entry is found by another's words.
    for i, (said, ts) in enumerate(
        [("red green blue", 1), ("red", 5), ("green blue", 3), ("blue", 4), ("yellow", 9)]
    ):
        await memory.add_session_to_memory(session(f"s{i}", event(said, ts=ts, id="abcde"[i])))
    found = await memory.search_memory(app_name=APP, user_id=USER, query="blue, green & red!")
    # "red" and "green" are in two entries, "blue" in three: the one with all three first,
    # then the short ones, each of a rarer word first, newest first among equals.
    assert [m.id for m in found.memories][:1] == ["a"]
    assert {m.id for m in found.memories} == {"a", "b", "c", "d"}
    found = await memory.search_memory(app_name=APP, user_id=USER, query="blue red", limit=2)
    assert [m.id for m in found.memories] == ["a", "b"]
    assert (
        await memory.search_memory(app_name=APP, user_id=USER, query="red", limit=0)
    ).memories == []


async def test_ranking_stems_and_skips_stop_words(memory: RedisMemoryService) -> None:
    await memory.add_session_to_memory(session("s1", event("I booked two flights", ts=1)))
    await memory.add_session_to_memory(session("s2", event("What is this about?", ts=2)))
    assert await texts(memory, "book a flight") == ["I booked two flights"]
    assert await texts(memory, "Booking FLIGHT") == ["I booked two flights"]
    # Only stop words: nothing to rank by.
    assert await texts(memory, "what is this about") == []


async def test_ranking_newest_first_among_equals(memory: RedisMemoryService) -> None:
    for i in range(3):
        await memory.add_session_to_memory(session(f"s{i}", event("same words", ts=i, id=f"e{i}")))
    found = await memory.search_memory(app_name=APP, user_id=USER, query="words")
    assert [m.id for m in found.memories] == ["e2", "e1", "e0"]


async def test_ranking_a_turn_is_found_by_the_turns_around_it(
    memory: RedisMemoryService,
) -> None:
    await memory.add_session_to_memory(
        session(
            "s",
            event("Which scarf should I wear to the wedding?", ts=1, id="q"),
            event("Yes, the blue one!", ts=2, id="a", author="model"),
        )
    )
    await memory.add_session_to_memory(session("t", event("The shop sells scarves", ts=3)))
    found = await memory.search_memory(app_name=APP, user_id=USER, query="wedding scarf")
    # The question says it; the answer is found through it, above an entry with one word.
    assert [m.id for m in found.memories][:2] == ["q", "a"]
    assert found.memories[1].content.text == "Yes, the blue one!"


async def test_ranking_a_query_naming_the_author(memory: RedisMemoryService) -> None:
    await memory.add_session_to_memory(
        session("s1", event("I adopted a dog", ts=1, id="c", author="Caroline"))
    )
    await memory.add_session_to_memory(
        session("s2", event("I adopted a dog", ts=2, id="m", author="Melanie"))
    )
    found = await memory.search_memory(app_name=APP, user_id=USER, query="Did Caroline adopt?")
    assert [m.id for m in found.memories] == ["c", "m"]
    found = await memory.search_memory(app_name=APP, user_id=USER, query="Caroline")
    assert found.memories == []  # the author alone finds nothing: it only ranks


@pytest.mark.parametrize("memory_client", ["fake", "real"], indirect=True)
async def test_plain_backend_never_reads_a_common_word_whole(
    memory_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A word in every entry weighs next to nothing: once the rare word's entries are in, no
    entry met later could reach them, and reading stops; a query of only common words stops
    at the read budget."""
    from redis_agent_sessions.memory import _ranking

    monkeypatch.setattr(_ranking, "READ_BUDGET", 300)
    memory = RedisMemoryService(memory_client, backend="plain")
    notes = [f"common note {i}" for i in range(1000)] + [f"common rare {i}" for i in range(5)]
    await memory.add_memory(
        app_name=APP,
        user_id=USER,
        memories=[MemoryEntry(content=Content(parts=[Part(text=t)])) for t in notes],
    )
    ctx = memory._memory.ctx
    await ctx.ready()
    rare = await ctx.ranker.rank(APP, USER, _ranking.prepare("common rare"), 5)
    assert sorted(i for i, _ in rare.hits) == sorted(
        m.id or ""
        for m in (await memory.search_memory(app_name=APP, user_id=USER, query="rare")).memories
    )
    assert rare.read is not None
    assert rare.read < 100
    common = await ctx.ranker.rank(APP, USER, _ranking.prepare("common note"), 10)
    assert len(common.hits) == 10
    assert common.read is not None
    assert common.read <= 300


async def test_default_limit_is_ten(memory: RedisMemoryService) -> None:
    for i in range(25):
        await memory.add_session_to_memory(session(f"s{i}", event(f"fig {i}", ts=i)))
    found = await texts(memory, "fig")
    assert len(found) == 10
    if memory.embedder is None:  # hybrid: the vectors' ties among equals are the index's
        assert found == [f"fig {i}" for i in range(24, 14, -1)]


@pytest.mark.real
@pytest.mark.search
@pytest.mark.parametrize(("protocol", "common"), [(2, None), (3, None), (3, 40)])
async def test_backends_agree_on_random_queries(
    protocol: int, common: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same entries in the plain backend (fakeredis) and in RediSearch rank alike, over
    both reply protocols, up to the search module's choice of candidates, bounded here; with
    a small ``COMMON_WINDOW``, words in many entries take the newest-entries path."""
    import random

    from redis_agent_sessions.memory import _ranking

    if common is not None:
        monkeypatch.setattr(_ranking, "COMMON_WINDOW", common)
    rng = random.Random(7)
    vocab = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"]
    events = [
        event(
            " ".join(rng.choices(vocab, weights=range(10, 0, -1), k=rng.randint(1, 6))),
            ts=1_700_000_000 + rng.randint(0, 5000) + i / 1000,
            id=f"e{i:03d}",
        )
        for i in range(150)
    ]
    plain = RedisMemoryService(fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()))
    client = Redis.from_url(skip_without("REDIS_SEARCH_URL"), protocol=protocol)
    await client.flushdb()
    search = RedisMemoryService(client, backend="search")
    try:
        for service in (plain, search):
            await service.add_events_to_memory(
                app_name="app", user_id="u", events=events, session_id="s"
            )
        same = overlap = asked = 0
        for _ in range(120):
            query = " ".join(rng.sample(vocab, rng.choice([1, 2, 3, 4, 6, 8])))
            limit = rng.choice([1, 3, 10, 40])
            got = [
                [
                    m.id
                    for m in (
                        await s.search_memory(app_name="app", user_id="u", query=query, limit=limit)
                    ).memories
                ]
                for s in (plain, search)
            ]
            # (A window of 40 may hold fewer matches than a limit of 40.)
            assert len(got[1]) == len(got[0]) or common, (query, limit)
            same += got[0] == got[1]
            overlap += len(set(got[0]) & set(got[1]))
            asked += len(got[0])
        # Ten words in 150 entries, so nearly every entry matches nearly every query: the
        # hardest case for the candidates. Most queries rank alike; the rest barely differ.
        # (With a window of 40 of 150 entries every word is "common": RediSearch proposes
        # only the newest 40, and the results differ more, as documented.)
        assert same >= (100 if common is None else 30), same
        assert overlap >= (0.95 if common is None else 0.4) * asked, (overlap, asked)
    finally:
        await client.flushdb()
        await client.aclose()


async def test_users_on_every_shard_are_found(memory: RedisMemoryService) -> None:
    """On a cluster each user's entries live on the shard of their slot; a search must be
    asked there (one index per user), never silently answer from another shard."""
    users = [f"user-{i}" for i in range(12)]  # spread over the slots of all three primaries
    for user in users:
        await memory.add_events_to_memory(
            app_name=APP, user_id=user, events=[event(f"kiwi of {user}", ts=1, id="k")]
        )
    for user in users:
        found = await memory.search_memory(app_name=APP, user_id=user, query="kiwi")
        assert [m.content.parts[0].text for m in found.memories] == [f"kiwi of {user}"]
    assert (await memory.search_memory(app_name=APP, user_id="nobody", query="kiwi")).memories == []


async def test_backend_is_recorded_for_every_worker(
    memory: RedisMemoryService, memory_client: Any
) -> None:
    """The first worker's choice is stored; a worker asking for the other backend is refused
    instead of reading and writing the same keys differently."""
    chosen = await memory.backend()
    assert await memory_client.get("ras:mem:backend") == chosen.encode()
    other = "plain" if chosen == "search" else "search"
    with pytest.raises(MemoryIndexError, match="records"):
        await RedisMemoryService(memory_client, backend=other).backend()
    assert await RedisMemoryService(memory_client).backend() == chosen


@pytest.mark.real
@pytest.mark.search
async def test_recorded_plain_backend_wins_over_detection() -> None:
    client = Redis.from_url(skip_without("REDIS_SEARCH_URL"))
    await client.flushdb()
    try:
        assert await RedisMemoryService(client, backend="plain").backend() == "plain"
        # This worker would detect the module, but the deployment already uses plain.
        assert await RedisMemoryService(client).backend() == "plain"
    finally:
        await client.flushdb()
        await client.aclose()


@pytest.mark.real
@pytest.mark.search
async def test_worker_denied_module_list_never_guesses() -> None:
    """A Redis user that may not run MODULE LIST cannot tell the backends apart: with no
    recorded choice it is refused (not silently plain); with one it follows it."""
    url = skip_without("REDIS_SEARCH_URL")
    admin = Redis.from_url(url)
    await admin.flushdb()
    await admin.acl_setuser(
        "nomodules", enabled=True, passwords=["+pw"], keys=["ras:*"],
        commands=["+@all", "-module"], reset=True,
    )  # fmt: skip
    limited = Redis.from_url(url, username="nomodules", password="pw")
    try:
        with pytest.raises(PermissionDeniedError, match=r"MODULE\|LIST"):
            await RedisMemoryService(limited).backend()
        assert await admin.get("ras:mem:backend") is None
        assert await RedisMemoryService(admin).backend() == "search"
        worker = RedisMemoryService(limited)
        assert await worker.backend() == "search"
        await worker.add_memory(
            app_name=APP,
            user_id=USER,
            memories=[MemoryEntry(content=Content(parts=[Part(text="x y")]))],
        )
        found = await RedisMemoryService(admin).search_memory(app_name=APP, user_id=USER, query="y")
        assert len(found.memories) == 1
    finally:
        await limited.aclose()
        await admin.acl_deluser("nomodules")
        await admin.flushdb()  # drops the index too
        await admin.aclose()


@pytest.mark.parametrize(
    "memory_client",
    [pytest.param("search", marks=[pytest.mark.real, pytest.mark.search])],
    indirect=True,
)
async def test_an_index_of_another_definition_is_refused(memory_client: Any) -> None:
    await memory_client.execute_command(
        "FT.CREATE", "ras:mem:idx", "ON", "HASH", "PREFIX", 1, "ras:mem:{",
        "SCHEMA", "words", "TEXT",
    )  # fmt: skip
    with pytest.raises(MemoryIndexError, match="exists with another definition"):
        await RedisMemoryService(memory_client, backend="search").backend()
