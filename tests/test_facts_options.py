"""Memory Bank's options on learned facts: revision labels, metadata with a merge strategy,
and revisions that expire (``revision_ttl``), given in a request's ``custom_metadata`` (as
ADK's Memory Bank service reads them), in ``FactSettings`` or in the service URL.

On fakeredis (also checking slots), Redis 7, Redis 8.2 with search, Valkey and both
clusters: each option is stored with the revisions and facts a request writes, inline and
through background jobs (where requests that coalesce write the newest's options); a bad
option is refused before anything is written (a TYPE and DUMP of every key, equal before
and after); expired revisions are never read and leave at the next write; the documented
least-privilege user runs it all.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import fakeredis
import orjson
import pytest
from redis.asyncio import Redis

from _acl import acl_user
from _backends import backend, pick
from _servers import skip_without
from _snapshot import snapshot
from redis_agent_sessions import (
    Content,
    Event,
    FactSettings,
    FactWorker,
    GenerationError,
    GenerationRequest,
    InvalidInputError,
    MemoryOperation,
    Part,
    RedisMemoryService,
    RedisSessionService,
    Session,
)
from redis_agent_sessions.keys import JobKeys, KeySpace
from redis_agent_sessions.memory._request_options import MAX_PAIRS
from test_memory_facts import Answer, Scripted

APP, USER = "options_app", "u1"
KEYS = KeySpace()
QUICK = {"poll_interval": 0.01, "sweep_interval": 0.02, "retry_delay": 0.01}
BACKENDS = pick(
    "fake", "fake-slots", "real", "search", "cluster", "search-cluster", "valkey", "valkey-cluster"
)


@pytest.fixture(params=BACKENDS)
async def client(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    async with backend(request.param, monkeypatch) as opened:
        yield opened


def said(text: str) -> Event:
    return Event(author="user", content=Content(role="user", parts=[Part(text=text)]))


def add(text: str) -> Answer:
    return lambda request: [MemoryOperation(action="add", fact=text)]


def update(old: str, text: str) -> Answer:
    def answer(request: GenerationRequest) -> list[MemoryOperation]:
        [fact] = [f for f in request.facts if old in f.text]
        return [MemoryOperation(action="update", fact_id=fact.id, fact=text)]

    return answer


def service(client: Any, model: Any, **settings: Any) -> RedisMemoryService:
    return RedisMemoryService(client, generator=model, facts=FactSettings(**settings))


async def tell(memory: RedisMemoryService, text: str, **custom_metadata: Any) -> None:
    """One event given to memory, with these options."""
    await memory.add_events_to_memory(
        app_name=APP, user_id=USER, session_id="s1", events=[said(text)],
        custom_metadata=custom_metadata or None,
    )  # fmt: skip


async def the_fact(memory: RedisMemoryService) -> Any:
    [fact] = await memory.list_facts(app_name=APP, user_id=USER)
    return fact


# -- revision labels -------------------------------------------------------------------------


async def test_each_revision_keeps_the_labels_of_the_request_that_wrote_it(client: Any) -> None:
    model = Scripted(
        add("The user lives in Paris."),
        update("Paris", "The user lives in Berlin."),
        update("Berlin", "The user lives in Rome."),
    )
    memory = service(client, model, revision_labels={"agent": "concierge", "reason": "turn"})
    await tell(memory, "I live in Paris", revision_labels={"reason": "onboarding"})
    session = Session(id="s2", app_name=APP, user_id=USER, events=[said("moved to Berlin")])
    await memory.add_session_to_memory(session, custom_metadata={"revision_labels": {"x": "1"}})
    fact = await the_fact(memory)
    # The settings' labels, with the request's over them, key by key.
    assert fact.revision_labels == {"agent": "concierge", "reason": "turn", "x": "1"}
    await tell(memory, "now Rome")  # no labels of its own: the settings'
    fact = await the_fact(memory)
    assert (fact.text, fact.revision_labels) == (
        "The user lives in Rome.",
        {"agent": "concierge", "reason": "turn"},
    )
    history = await memory.fact_history(app_name=APP, user_id=USER, fact_id=fact.id)
    assert [(r.revision, r.labels) for r in history] == [
        (2, {"agent": "concierge", "reason": "turn", "x": "1"}),
        (1, {"agent": "concierge", "reason": "onboarding"}),
    ]


# -- metadata and its merge strategies --------------------------------------------------------


async def test_metadata_is_overwritten_merged_or_left_as_the_strategy_says(client: Any) -> None:
    model = Scripted(
        add("The user likes tea."),
        update("tea", "The user likes green tea."),
        update("green", "The user likes green tea, hot."),
        update("hot", "The user likes green tea, iced."),
        update("iced", "The user likes black tea."),
    )
    memory = service(client, model)
    await tell(memory, "I like tea", metadata={"source": "chat", "score": 1, "sure": False})
    assert (await the_fact(memory)).metadata == {"source": "chat", "score": 1, "sure": False}
    # OVERWRITE (Memory Bank's default): the request's metadata in place of the fact's.
    await tell(memory, "green tea", metadata={"score": 2.5})
    assert (await the_fact(memory)).metadata == {"score": 2.5}
    # MERGE: the request's keys over the fact's.
    await tell(memory, "hot", metadata={"sure": True}, metadata_merge_strategy="MERGE")
    assert (await the_fact(memory)).metadata == {"score": 2.5, "sure": True}
    # A request without metadata leaves the fact's as it is, whatever the strategy.
    await tell(memory, "iced", metadata_merge_strategy="overwrite")
    assert (await the_fact(memory)).metadata == {"score": 2.5, "sure": True}
    await tell(memory, "black now", metadata={})  # an empty mapping overwrites
    fact = await the_fact(memory)
    assert fact.metadata == {}
    # Nothing is left of it beside what the library says of the fact.
    found = await memory.search_memory(app_name=APP, user_id=USER, query="black tea")
    assert [m.custom_metadata.keys() for m in found.memories] == [{"redis_agent_sessions"}]


async def test_search_results_carry_a_facts_metadata(client: Any) -> None:
    memory = service(client, Scripted(add("The user likes jazz.")), metadata={"tier": "gold"})
    await tell(memory, "I like jazz", metadata={"source": "chat"})
    [found] = (await memory.search_memory(app_name=APP, user_id=USER, query="jazz")).memories
    assert {k: v for k, v in found.custom_metadata.items() if k != "redis_agent_sessions"} == {
        "tier": "gold",
        "source": "chat",
    }
    assert found.custom_metadata["redis_agent_sessions"]["fact"]["revision"] == 1


async def test_require_exact_match_shows_the_generator_only_facts_of_that_metadata(
    client: Any,
) -> None:
    model = Scripted(
        add("The user works on search."),
        add("The user works on billing."),
        lambda request: [
            MemoryOperation(action="update", fact_id=request.facts[0].id, fact="Search, v2.")
        ],
        lambda request: [],
    )
    memory = service(client, model, metadata_merge_strategy="REQUIRE_EXACT_MATCH")
    await tell(memory, "I work on search", metadata={"team": "search"})
    await tell(memory, "I work on billing", metadata={"team": "billing"})
    await tell(memory, "search v2 now", metadata={"team": "search"})
    assert [f.text for f in model.requests[2].facts] == ["The user works on search."]
    facts = {f.text: f.metadata for f in await memory.list_facts(app_name=APP, user_id=USER)}
    assert facts == {
        "Search, v2.": {"team": "search"},
        "The user works on billing.": {"team": "billing"},
    }
    # Without metadata, only the facts without any are eligible: none here.
    await tell(memory, "hi there")
    assert model.requests[3].facts == []


# -- revision_ttl ----------------------------------------------------------------------------


async def test_revisions_expire_unread_and_leave_at_the_next_write(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = Scripted(
        add("The user has 1 cat."),
        update("1 cat", "The user has 2 cats."),
        update("2 cats", "The user has 3 cats."),
        update("3 cats", "The user has 4 cats."),
    )
    memory = service(client, model)
    await tell(memory, "a cat", revision_ttl="30s")  # Memory Bank's Duration, as ADK passes it
    await tell(memory, "two cats", revision_ttl=timedelta(hours=1))
    fact = await the_fact(memory)
    key = KEYS.memory_fact_history(APP, USER, fact.id)
    [first] = await memory.fact_history(app_name=APP, user_id=USER, fact_id=fact.id)
    assert first.expires is not None
    assert math.isclose(first.expires - first.updated, 30, abs_tol=0.01)
    assert fact.revision_expires is not None
    assert math.isclose(fact.revision_expires - fact.updated, 3600, abs_tol=0.01)
    # Every revision in it has a time: the history expires with its last one, so one that
    # no change comes to again is gone then, without a scan.
    assert 1_000 < await client.pttl(key) <= 30_000
    await tell(memory, "three cats")
    assert 3_500_000 < await client.pttl(key) <= 3_600_000
    assert await client.llen(key) == 2

    later = fact.updated + 31
    monkeypatch.setattr("time.time", lambda: later)
    history = await memory.fact_history(app_name=APP, user_id=USER, fact_id=fact.id)
    assert [r.revision for r in history] == [2]  # revision 1 is past its time: never read
    assert await client.llen(key) == 2  # until a write removes it
    await tell(memory, "four cats")  # pushes revision 3, which has no time
    assert await client.llen(key) == 2
    assert await client.pttl(key) == -1  # so the history stays
    history = await memory.fact_history(app_name=APP, user_id=USER, fact_id=fact.id)
    assert [r.revision for r in history] == [3, 2]


async def test_the_settings_revision_ttl_times_every_revision(client: Any) -> None:
    model = Scripted(add("The user is in Oslo."), update("Oslo", "The user is in Bergen."))
    memory = service(client, model, revision_ttl=120, history=3)
    await tell(memory, "in Oslo")
    await tell(memory, "in Bergen")
    fact = await the_fact(memory)
    [was] = await memory.fact_history(app_name=APP, user_id=USER, fact_id=fact.id)
    assert was.expires is not None
    assert math.isclose(was.expires - was.updated, 120, abs_tol=0.01)
    key = KEYS.memory_fact_history(APP, USER, fact.id)
    assert 100_000 < await client.pttl(key) <= 120_000


# -- bad input -------------------------------------------------------------------------------

BAD: list[tuple[str, dict[str, Any]]] = [
    ("labels not a mapping", {"revision_labels": ["a", "b"]}),
    ("an empty label key", {"revision_labels": {"": "x"}}),
    ("an empty label value", {"revision_labels": {"k": ""}}),
    ("a label value not a string", {"revision_labels": {"k": 1}}),
    ("a label key not a string", {"revision_labels": {1: "x"}}),
    ("a long label", {"revision_labels": {"k": "x" * 1025}}),
    ("a lone surrogate", {"revision_labels": {"k": "\ud800"}}),
    ("too many labels", {"revision_labels": {f"k{i}": "x" for i in range(MAX_PAIRS + 1)}}),
    ("metadata not a mapping", {"metadata": "team=search"}),
    ("a nested metadata value", {"metadata": {"k": {"a": 1}}}),
    ("a metadata list", {"metadata": {"k": [1]}}),
    ("a NaN", {"metadata": {"k": float("nan")}}),
    ("a huge int", {"metadata": {"k": 2**60}}),
    ("the library's own key", {"metadata": {"redis_agent_sessions": "x"}}),
    ("an unknown strategy", {"metadata_merge_strategy": "APPEND"}),
    ("a strategy not a string", {"metadata_merge_strategy": 1}),
    ("a zero ttl", {"revision_ttl": 0}),
    ("a negative ttl", {"revision_ttl": "-5s"}),
    ("a ttl of words", {"revision_ttl": "an hour"}),
    ("a ttl of True", {"revision_ttl": True}),
    ("an endless ttl", {"revision_ttl": float("inf")}),
]


CASES = [("inline", *b) for b in BAD] + [("background", *b) for b in BAD[::7]]
"""Each bad option inline; a few of them in background mode, which checks them in the same
place, before the job is recorded."""


@pytest.mark.parametrize(("mode", "why", "bad"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
async def test_a_bad_option_is_refused_and_nothing_is_written(
    client: Any, mode: str, why: str, bad: dict[str, Any]
) -> None:
    model = Scripted(add("The user likes tea."), update("tea", "The user likes coffee."))
    memory = service(client, model, mode=mode, revision_ttl=60)
    sessions = RedisSessionService(client)
    session = await sessions.create_session(app_name=APP, user_id=USER, session_id="s1")
    await sessions.append_event(session, said("I like tea"))
    await memory.add_session_to_memory(session, custom_metadata={"revision_labels": {"a": "b"}})
    if mode == "background":
        async with FactWorker(memory, apps=[APP], **QUICK):
            await memory.wait_for_generation(app_name=APP, user_id=USER, timeout=20)
    await sessions.append_event(session, said("coffee now"))
    before = await snapshot(client)
    with pytest.raises(InvalidInputError):
        await memory.add_session_to_memory(session, custom_metadata=bad)
    with pytest.raises(InvalidInputError):
        await tell(memory, "coffee now", **bad)
    assert await snapshot(client) == before
    assert len(model.requests) == 1


@pytest.mark.parametrize(
    "settings",
    [
        {"revision_ttl": -1},
        {"revision_ttl": "soon"},
        {"revision_labels": {"k": ""}},
        {"metadata": {"k": None}},
        {"metadata_merge_strategy": "UNION"},
    ],
)
def test_bad_settings_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        FactSettings(**settings)


def test_the_settings_keep_their_own_copies() -> None:
    labels = {"env": "prod"}
    settings = FactSettings(revision_labels=labels, metadata_merge_strategy="merge")
    labels["env"] = "dev"
    assert settings.revision_labels == {"env": "prod"}
    assert settings.metadata_merge_strategy == "MERGE"


async def test_without_a_generator_the_keys_are_plain_entry_metadata() -> None:
    """Without a generator nothing is generated: the keys are kept on the entries as any,
    unchecked (a list is no bad label there)."""
    fake = fakeredis.FakeAsyncRedis()
    memory = RedisMemoryService(fake)
    meta = {"revision_labels": ["a"], "metadata": {"x": 1}}
    await memory.add_events_to_memory(
        app_name=APP, user_id=USER, events=[said("I like tea")], custom_metadata=meta
    )
    [found] = (await memory.search_memory(app_name=APP, user_id=USER, query="tea")).memories
    assert {k: v for k, v in found.custom_metadata.items() if k in meta} == meta
    await fake.aclose()


async def test_with_kept_events_the_options_are_not_entry_metadata(client: Any) -> None:
    memory = service(client, Scripted(add("The user likes tea.")), keep_events=True)
    await tell(memory, "I like tea", metadata={"t": 1}, revision_labels={"a": "b"}, src="chat")
    found = (await memory.search_memory(app_name=APP, user_id=USER, query="tea")).memories
    metadata = {m.content.text: m.custom_metadata for m in found}
    event = {k: v for k, v in metadata["I like tea"].items() if k != "redis_agent_sessions"}
    assert event == {"src": "chat"}
    fact = metadata["The user likes tea."]
    assert {k: v for k, v in fact.items() if k != "redis_agent_sessions"} == {"t": 1}


# -- background generation -------------------------------------------------------------------


def options_key(kind: str) -> str:
    """Where the job of session s1 (``s``), or of its events (``e``), keeps its options."""
    shard = KEYS.job_shard(APP, USER)
    return KEYS.job_options(APP, shard, JobKeys.member(kind, USER, "s1"))


async def test_a_job_carries_its_newest_requests_options_to_the_worker(client: Any) -> None:
    model = Scripted(add("The user likes tea."), update("tea", "The user likes coffee."))
    memory = service(client, model, mode="background")
    sessions = RedisSessionService(client)
    session = await sessions.create_session(app_name=APP, user_id=USER, session_id="s1")
    await sessions.append_event(session, said("I like tea"))
    first = {"revision_labels": {"turn": "1"}, "metadata": {"a": 1}, "revision_ttl": 600}
    await memory.add_session_to_memory(session, custom_metadata=first)
    # Coalesced into the job waiting: the newest request's options win, all of them.
    newest = {"revision_labels": {"turn": "2"}, "metadata": {"b": 2}}
    await memory.add_session_to_memory(session, custom_metadata=newest)
    kept = options_key("s")
    assert orjson.loads(await client.get(kept))["revision_labels"] == {"turn": "2"}
    async with FactWorker(memory, apps=[APP], **QUICK):
        await memory.wait_for_generation(app_name=APP, user_id=USER, timeout=20)
    fact = await the_fact(memory)
    assert (fact.revision_labels, fact.metadata, fact.revision_expires) == (
        {"turn": "2"},
        {"b": 2},
        None,
    )
    assert len(model.requests) == 1
    # Nothing is kept of a job once it ended.
    assert await client.exists(kept) == 0
    # A newest request without options leaves the job none.
    await memory.add_session_to_memory(session, custom_metadata=first)
    await memory.add_session_to_memory(session)
    assert await client.exists(kept) == 0

    # Events given one by one carry theirs too.
    await memory.add_events_to_memory(
        app_name=APP, user_id=USER, session_id="s1", events=[said("coffee now")],
        custom_metadata={"revision_labels": {"turn": "3"}, "metadata_merge_strategy": "MERGE",
                         "metadata": {"c": 3}},
    )  # fmt: skip
    async with FactWorker(memory, apps=[APP], **QUICK):
        await memory.wait_for_generation(app_name=APP, user_id=USER, timeout=20)
    fact = await the_fact(memory)
    assert (fact.text, fact.revision_labels, fact.metadata) == (
        "The user likes coffee.",
        {"turn": "3"},
        {"b": 2, "c": 3},
    )
    [was] = await memory.fact_history(app_name=APP, user_id=USER, fact_id=fact.id)
    assert was.labels == {"turn": "2"}
    assert await client.exists(options_key("e")) == 0


async def test_a_dead_letter_keeps_its_options_until_dropped(client: Any) -> None:
    def broken(request: GenerationRequest) -> list[Any]:
        raise RuntimeError("the model is down")

    memory = service(client, Scripted(*[broken] * 2), mode="background")
    await memory.add_events_to_memory(
        app_name=APP, user_id=USER, session_id="s1", events=[said("I like tea")],
        custom_metadata={"revision_labels": {"turn": "1"}},
    )  # fmt: skip
    async with FactWorker(memory, apps=[APP], max_attempts=2, **QUICK):
        with pytest.raises(GenerationError, match="dead letters"):
            await memory.wait_for_generation(app_name=APP, user_id=USER, session_id="s1")
    kept = await client.get(options_key("e"))
    assert orjson.loads(kept) == {"revision_labels": {"turn": "1"}}
    [letter] = await memory._memory.jobs.dead_letters(APP)
    assert await memory._memory.jobs.answer_letter(APP, letter.id, "drop") is not None
    assert await client.exists(options_key("e")) == 0


# -- the URL and the least-privilege user ----------------------------------------------------


async def test_the_url_carries_the_revision_and_metadata_settings() -> None:
    url = (
        "redis://localhost/0?generator=import:facts_generators:likes&fact_revision_ttl=3600"
        "&fact_revision_labels=env:prod,deploy:eu:west&fact_metadata=tier:gold"
        "&fact_metadata_merge_strategy=merge"
    )
    memory = RedisMemoryService.from_url(url)
    assert memory._memory.ctx.fact_settings == FactSettings(
        revision_ttl=3600,
        revision_labels={"env": "prod", "deploy": "eu:west"},
        metadata={"tier": "gold"},
        metadata_merge_strategy="MERGE",
    )
    await memory.aclose()
    for bad, message in [
        ("fact_revision_labels=env", "key:value pairs"),
        ("fact_revision_labels=env:", "non-empty string"),
        ("fact_metadata_merge_strategy=union", "must be one of"),
        ("fact_revision_ttl=soon", "must be a number"),
    ]:
        with pytest.raises(InvalidInputError, match=message):
            RedisMemoryService.from_url(f"{url.split('&')[0]}&{bad}")


@pytest.mark.acl
@pytest.mark.parametrize(
    "variable", ["REDIS_URL", pytest.param("REDIS_SEARCH_URL", marks=pytest.mark.search)]
)
async def test_the_documented_user_writes_labels_metadata_and_timed_revisions(
    variable: str,
) -> None:
    """The facts line grants what these writes run (a timed history is read and written
    anew, with a time to live: LRANGE, DEL, LPUSH, EXPIRE)."""
    admin = Redis.from_url(skip_without(variable))
    search = variable == "REDIS_SEARCH_URL"
    await admin.flushdb()
    model = Scripted(
        add("The user likes tea."),
        update("tea", "The user likes coffee."),
        update("coffee", "The user likes cocoa."),
    )
    try:
        async with acl_user(admin, search=search, facts=True) as worker:
            facts = FactSettings(revision_ttl=60)
            kind = "search" if search else "plain"
            memory = RedisMemoryService(worker, backend=kind, generator=model, facts=facts)
            options = {"revision_labels": {"by": "acl"}, "metadata": {"m": 1}}
            await tell(memory, "I like tea", **options)
            await tell(memory, "coffee", **options)
            await tell(memory, "cocoa", revision_ttl="1s")  # the list rewritten, timed
            fact = await the_fact(memory)
            assert (fact.metadata, fact.revision_labels) == ({"m": 1}, {})
            history = await memory.fact_history(app_name=APP, user_id=USER, fact_id=fact.id)
            assert [r.labels for r in history] == [{"by": "acl"}, {"by": "acl"}]
    finally:
        await admin.flushdb()
        await admin.aclose()
