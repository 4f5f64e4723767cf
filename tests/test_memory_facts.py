"""Learned memories: a scripted fake model (no network) drives the generator, on fakeredis,
plain Redis, RediSearch and both clusters. Facts are added, updated (the superseded text
goes to the history, never to search) and deleted; each event is read once; hostile
answers write nothing; concurrent workers lose no update; facts expire without residue."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis

from _acl import acl_user, readme_rules
from _backends import backend, pick
from _embedders import SynonymEmbedder
from _servers import skip_without
from _snapshot import snapshot
from redis_agent_sessions import (
    CallableGenerator,
    ConsolidationConflictError,
    Content,
    Event,
    FactSettings,
    GenerationError,
    GenerationRequest,
    InvalidInputError,
    MemoryOperation,
    Part,
    PermissionDeniedError,
    RedisMemoryService,
    Session,
)
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory import _facts

APP, USER = "facts_app", "u1"
KEYS = KeySpace()


@pytest.fixture(
    params=pick("fake", "real", "search", "cluster", "search-cluster", "valkey", "valkey-cluster")
)
async def client(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    async with backend(request.param, monkeypatch) as opened:
        yield opened


Answer = Callable[[GenerationRequest], Sequence[Any]]


class Scripted:
    """The fake model: answers each request with the next scripted function of it."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[GenerationRequest] = []

    async def generate(self, request: GenerationRequest) -> Sequence[Any]:
        self.requests.append(request)
        if not self.answers:
            raise AssertionError(f"an unexpected generation: {request.events}")
        return self.answers.pop(0)(request)


def said(text: str, ts: float, author: str = "user") -> Event:
    return Event(author=author, timestamp=ts, content=Content(role=author, parts=[Part(text=text)]))


def add(text: str, *topics: str) -> Answer:
    return lambda request: [MemoryOperation(action="add", fact=text, topics=list(topics))]


def update(old: str, text: str) -> Answer:
    def answer(request: GenerationRequest) -> list[MemoryOperation]:
        [fact] = [f for f in request.facts if old in f.text]
        return [MemoryOperation(action="update", fact_id=fact.id, fact=text)]

    return answer


def delete(old: str) -> Answer:
    def answer(request: GenerationRequest) -> list[MemoryOperation]:
        [fact] = [f for f in request.facts if old in f.text]
        return [MemoryOperation(action="delete", fact_id=fact.id)]

    return answer


def nothing(request: GenerationRequest) -> list[MemoryOperation]:
    return []


def service(client: Any, generator: Any, **settings: Any) -> RedisMemoryService:
    return RedisMemoryService(client, generator=generator, facts=FactSettings(**settings))


async def texts(memory: RedisMemoryService, query: str, user: str = USER) -> list[str]:
    found = await memory.search_memory(app_name=APP, user_id=user, query=query)
    return [m.content.text for m in found.memories]


async def test_facts_are_added_updated_and_deleted(client: Any) -> None:
    model = Scripted(
        add("The user lives in Paris.", "home"),
        update("Paris", "The user lives in Berlin."),
        delete("Berlin"),
    )
    memory = service(client, model)
    session = Session(id="s1", app_name=APP, user_id=USER, events=[said("I live in Paris", 1.0)])
    await memory.add_session_to_memory(session)
    [found] = (await memory.search_memory(app_name=APP, user_id=USER, query="where lives")).memories
    assert found.content.text == "The user lives in Paris."
    about = found.custom_metadata["redis_agent_sessions"]["fact"]
    assert about["revision"] == 1
    assert about["topics"] == ["home"]
    assert about["sources"] == [{"session_id": "s1", "event_ids": [session.events[0].id]}]
    # Only facts are kept by default: the event itself is not an entry.
    assert await texts(memory, "Paris") == ["The user lives in Paris."]

    session.events.append(said("I moved to Berlin last week", 2.0))
    await memory.add_session_to_memory(session)
    assert [e.content.text for e in model.requests[1].events] == ["I moved to Berlin last week"]
    assert await texts(memory, "lives") == ["The user lives in Berlin."]
    assert await texts(memory, "Paris") == []
    [fact] = await memory.list_facts(app_name=APP, user_id=USER)
    assert (fact.text, fact.revision, fact.id) == ("The user lives in Berlin.", 2, found.id)
    [before] = await memory.fact_history(app_name=APP, user_id=USER, fact_id=fact.id)
    assert (before.text, before.revision, before.topics) == (
        "The user lives in Paris.",
        1,
        ["home"],
    )

    session.events.append(said("Forget where I live", 3.0))
    await memory.add_session_to_memory(session)
    assert await texts(memory, "lives Berlin") == []
    assert await memory.list_facts(app_name=APP, user_id=USER) == []
    assert await client.exists(KEYS.memory_fact_history(APP, USER, fact.id)) == 0


async def test_each_event_is_read_once(client: Any) -> None:
    model = Scripted(add("The user likes tea."), nothing)
    memory = service(client, model)
    session = Session(id="s1", app_name=APP, user_id=USER, events=[said("I like tea", 1.0)])
    await memory.add_session_to_memory(session)
    await memory.add_session_to_memory(session)  # a retried call: no model call, no change
    assert len(model.requests) == 1
    session.events += [said("Hello", 2.0, "model"), Event(author="tool", timestamp=3.0)]
    await memory.add_session_to_memory(session)
    await memory.add_session_to_memory(session)
    assert len(model.requests) == 2
    # Events without text are counted as read but not shown.
    assert [e.content.text for e in model.requests[1].events] == ["Hello"]
    assert [f.text for f in model.requests[1].facts] == ["The user likes tea."]


async def test_facts_are_found_by_meaning_with_an_embedder(client: Any) -> None:
    """A fact gets a vector as any entry does (and a new one when its text changes)."""
    model = Scripted(add("The user drives a Skoda."), update("Skoda", "The user drives a sedan."))
    memory = RedisMemoryService(client, generator=model, embedder=SynonymEmbedder())
    session = Session(id="s1", app_name=APP, user_id=USER, events=[said("my Skoda", 1.0)])
    await memory.add_session_to_memory(session)
    session.events.append(said("sold it, got a sedan", 2.0))
    await memory.add_session_to_memory(session)
    [found] = (await memory.search_memory(app_name=APP, user_id=USER, query="automobile")).memories
    assert found.content.text == "The user drives a sedan."
    how = found.custom_metadata["redis_agent_sessions"]
    assert how["found_by"] == ["vector"]
    assert how["fact"]["revision"] == 2


async def test_events_given_one_by_one_are_read_once(client: Any) -> None:
    model = Scripted(add("The user likes tea."), add("The user likes jazz."), nothing)
    memory = service(client, model)
    tea, jazz = said("I like tea", 1.0), said("I like jazz", 2.0)
    for given in ([tea], [tea, jazz], [jazz, tea]):  # again, and retried: read once each
        await memory.add_events_to_memory(app_name=APP, user_id=USER, session_id="s1", events=given)
    await memory.add_events_to_memory(app_name=APP, user_id=USER, events=[said("hi", 3.0)])
    read = [[e.content.text for e in r.events] for r in model.requests]
    assert read == [["I like tea"], ["I like jazz"], ["hi"]]
    facts = sorted(f.text for f in await memory.list_facts(app_name=APP, user_id=USER))
    assert facts == ["The user likes jazz.", "The user likes tea."]
    assert model.requests[2].session_id == "__unknown_session_id__"


async def test_a_turn_without_words_is_shown_the_newest_facts(client: Any) -> None:
    """More facts than a generation is shown: they are ranked by the turn's words; a turn
    with none (";)") is shown the newest instead, on every backend."""
    many = [add(f"The user visited city number {i}.") for i in range(35)]
    memory = service(client, Scripted(*many, nothing))
    session = Session(id="s1", app_name=APP, user_id=USER, events=[])
    for i in range(35):
        session.events.append(said(f"I went to city {i}", float(i)))
        await memory.add_session_to_memory(session)
    session.events.append(said(";)", 99.0))
    await memory.add_session_to_memory(session)
    shown = memory._memory.generator.requests[-1].facts  # type: ignore[union-attr]
    assert len(shown) == 30
    assert shown[0].text == "The user visited city number 34."


async def test_past_30_facts_a_turn_is_shown_those_its_words_rank_best(client: Any) -> None:
    """On every backend (the plain one ranks in the script that reads the facts, the search
    module in round trips of its own): the oldest fact, out of the newest 30, is the one
    shown to a turn about it, and is changed as it was shown."""
    cities = [add(f"The user visited city number {i}.") for i in range(34)]
    roof = update("bees", "The user keeps bees on the roof.")
    model = Scripted(add("The user keeps bees in the garden."), *cities, roof)
    memory = service(client, model)
    session = Session(id="s1", app_name=APP, user_id=USER, events=[said("I keep bees", 0.0)])
    await memory.add_session_to_memory(session)
    for i in range(34):
        session.events.append(said(f"I went to city {i}", float(i + 1)))
        await memory.add_session_to_memory(session)
    session.events.append(said("My bees moved to the roof", 99.0))
    await memory.add_session_to_memory(session)
    assert [f.text for f in model.requests[-1].facts] == ["The user keeps bees in the garden."]
    [bees] = [f for f in await memory.list_facts(app_name=APP, user_id=USER) if "bee" in f.text]
    assert (bees.text, bees.revision) == ("The user keeps bees on the roof.", 2)
    assert await texts(memory, "bees garden roof") == [bees.text]


async def test_raw_events_stay_searchable_when_asked(client: Any) -> None:
    memory = service(client, Scripted(add("The user likes green tea.")), keep_events=True)
    events = [said("I like green tea", 1.0)]
    await memory.add_session_to_memory(Session(id="s", app_name=APP, user_id=USER, events=events))
    assert sorted(await texts(memory, "green tea")) == [
        "I like green tea",
        "The user likes green tea.",
    ]


HOSTILE: list[tuple[str, Answer]] = [
    ("not a list", lambda r: "add: the user is nice"),  # type: ignore[return-value,arg-type]
    ("a bare string op", lambda r: ["add"]),
    ("unknown action", lambda r: [{"action": "merge", "fact": "x"}]),
    ("an extra field", lambda r: [{"action": "add", "fact": "The user is Ann.", "score": 1}]),
    ("an invented id", lambda r: [{"action": "update", "fact_id": "fact-0", "fact": "x y"}]),
    ("delete without id", lambda r: [{"action": "delete"}]),
    ("add with an id", lambda r: [{"action": "add", "fact_id": r.facts[0].id, "fact": "x y"}]),
    ("empty fact", lambda r: [{"action": "add", "fact": "   "}]),
    ("a huge fact", lambda r: [{"action": "add", "fact": "word " * 5_000}]),
    ("no word to find it by", lambda r: [{"action": "add", "fact": "!!! ???"}]),
    ("twice the same fact", lambda r: [{"action": "delete", "fact_id": r.facts[0].id}] * 2),
    ("too many", lambda r: [{"action": "add", "fact": f"fact {i}"} for i in range(101)]),
    ("unknown event", lambda r: [{"action": "add", "fact": "x y", "source_event_ids": ["e?"]}]),
    ("bad ttl", lambda r: [{"action": "add", "fact": "x y", "ttl_seconds": -1}]),
]


@pytest.mark.parametrize(("why", "answer"), HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_hostile_answers_write_nothing(client: Any, why: str, answer: Answer) -> None:
    memory = service(client, Scripted(add("The user likes tea."), answer))
    session = Session(id="s1", app_name=APP, user_id=USER, events=[said("I like tea", 1.0)])
    await memory.add_session_to_memory(session)
    session.events.append(said("And coffee", 2.0))
    before = await snapshot(client)
    with pytest.raises(GenerationError):
        await memory.add_session_to_memory(session)
    assert await snapshot(client) == before


async def test_another_users_fact_cannot_be_touched(client: Any) -> None:
    other = service(client, Scripted(add("Bob likes jazz.")))
    await other.add_session_to_memory(
        Session(id="b", app_name=APP, user_id="bob", events=[said("I like jazz", 1.0)])
    )
    [bobs] = await other.list_facts(app_name=APP, user_id="bob")
    steal = Scripted(lambda r: [{"action": "delete", "fact_id": bobs.id}])
    before = await snapshot(client)
    with pytest.raises(GenerationError, match="not shown"):
        await service(client, steal).add_session_to_memory(
            Session(id="a", app_name=APP, user_id=USER, events=[said("hi", 1.0)])
        )
    assert await snapshot(client) == before


async def test_a_failing_model_and_a_failed_write_leave_the_events_to_read(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(request: GenerationRequest) -> list[Any]:
        raise TimeoutError("model unreachable")

    model = Scripted(broken, add("The user likes tea."), add("The user likes tea."))
    memory = service(client, model)
    session = Session(id="s1", app_name=APP, user_id=USER, events=[said("I like tea", 1.0)])
    with pytest.raises(GenerationError, match="model unreachable"):
        await memory.add_session_to_memory(session)

    # A crash between the model's answer and the write: nothing half-applied.
    real_apply = _facts.FactStore.apply

    async def crash(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("worker lost Redis")

    monkeypatch.setattr(_facts.FactStore, "apply", crash)
    with pytest.raises(ConnectionError):
        await memory.add_session_to_memory(session)
    assert await memory.list_facts(app_name=APP, user_id=USER) == []
    assert await client.get(KEYS.memory_watermark(APP, USER, "s1")) is None
    monkeypatch.setattr(_facts.FactStore, "apply", real_apply)
    await memory.add_session_to_memory(session)
    assert [f.text for f in await memory.list_facts(app_name=APP, user_id=USER)] == [
        "The user likes tea."
    ]
    assert len(model.requests) == 3


async def test_concurrent_workers_lose_no_update(client: Any) -> None:
    """Worker A's generation is overtaken by worker B's update of the same fact: A's write
    is refused, A generates again on B's revision, and both changes are in the history."""
    seed = service(client, Scripted(add("The user has 1 cat.")))
    await seed.add_session_to_memory(
        Session(id="s0", app_name=APP, user_id=USER, events=[said("I have a cat", 1.0)])
    )
    b = service(client, Scripted(update("cat", "The user has 2 cats.")))
    b_session = Session(id="sb", app_name=APP, user_id=USER, events=[said("one more cat", 2.0)])

    async def overtaken(request: GenerationRequest) -> list[MemoryOperation]:
        await b.add_session_to_memory(b_session)  # lands while A's model "thinks"
        return update("cat", "The user has 2 cats and a dog.")(request)

    a_model = Scripted(
        lambda r: overtaken(r),  # type: ignore[arg-type,return-value]
        update("cats", "The user has 2 cats and a dog."),
    )
    a_model.generate = _awaiting(a_model)  # type: ignore[method-assign]
    a = service(client, a_model)
    await a.add_session_to_memory(
        Session(id="sa", app_name=APP, user_id=USER, events=[said("and a dog", 3.0)])
    )
    [fact] = await a.list_facts(app_name=APP, user_id=USER)
    assert (fact.text, fact.revision) == ("The user has 2 cats and a dog.", 3)
    history = await a.fact_history(app_name=APP, user_id=USER, fact_id=fact.id)
    assert [h.text for h in history] == ["The user has 2 cats.", "The user has 1 cat."]
    # A's second generation saw B's revision.
    assert [f.revision for f in a_model.requests[1].facts] == [2]


def _awaiting(model: Scripted) -> Any:
    async def generate(request: GenerationRequest) -> Sequence[Any]:
        model.requests.append(request)
        answer = model.answers.pop(0)(request)
        return await answer if asyncio.iscoroutine(answer) else answer

    return generate


async def test_a_failure_undoes_only_its_own_step_of_50_events(client: Any) -> None:
    """A call reads a long session in steps of 50 events, each applied on its own: when the
    generator fails on the second step of a 120-event session, the first step's fact and
    watermark stay, and the next call goes on from event 50 (docs/facts.md)."""

    def broken(request: GenerationRequest) -> list[Any]:
        raise TimeoutError("model unreachable")

    model = Scripted(add("The user likes tea."), broken, add("The user likes jazz."), add("x y"))
    memory = service(client, model)
    events = [said(f"turn {i}", float(i + 1)) for i in range(120)]
    session = Session(id="s1", app_name=APP, user_id=USER, events=events)
    with pytest.raises(GenerationError, match="model unreachable"):
        await memory.add_session_to_memory(session)
    facts = await memory.list_facts(app_name=APP, user_id=USER)
    assert [f.text for f in facts] == ["The user likes tea."]
    mark = await client.get(KEYS.memory_watermark(APP, USER, "s1"))
    assert mark is not None
    assert mark.decode().split("\t")[0] == "50"

    await memory.add_session_to_memory(session)
    assert [len(r.events) for r in model.requests] == [50, 50, 50, 20]
    assert model.requests[2].events[0].content == events[50].content
    assert len(await memory.list_facts(app_name=APP, user_id=USER)) == 3


async def test_endless_conflicts_are_a_typed_error(client: Any) -> None:
    seed = service(client, Scripted(add("The user has 1 cat.")))
    await seed.add_session_to_memory(
        Session(id="s0", app_name=APP, user_id=USER, events=[said("I have a cat", 1.0)])
    )
    bump = 0

    async def always_overtaken(request: GenerationRequest) -> list[MemoryOperation]:
        nonlocal bump
        bump += 1
        [fact] = request.facts
        # Another worker updates the fact between this read and this write, every time.
        rival_model = Scripted(update("cat", f"The user has {bump + 1} cats."))
        await service(client, rival_model).add_session_to_memory(
            Session(id=f"r{bump}", app_name=APP, user_id=USER, events=[said("cat", 2.0)])
        )
        return [MemoryOperation(action="update", fact_id=fact.id, fact="The user has no cat.")]

    memory = RedisMemoryService(client, generator=CallableGenerator(always_overtaken))
    with pytest.raises(ConsolidationConflictError):
        await memory.add_session_to_memory(
            Session(id="s1", app_name=APP, user_id=USER, events=[said("no more cat", 3.0)])
        )
    assert await client.get(KEYS.memory_watermark(APP, USER, "s1")) is None
    [fact] = await memory.list_facts(app_name=APP, user_id=USER)
    assert fact.text != "The user has no cat."


async def test_facts_expire_without_residue(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = service(client, Scripted(add("The user is in Rome this week.")), ttl_seconds=60)
    await memory.backend()
    before = await snapshot(client)
    await memory.add_session_to_memory(
        Session(id="s1", app_name=APP, user_id=USER, events=[said("I'm in Rome", 1.0)])
    )
    [fact] = await memory.list_facts(app_name=APP, user_id=USER)
    assert fact.expires is not None
    assert await texts(memory, "Rome") == ["The user is in Rome this week."]
    later = fact.expires + 1
    monkeypatch.setattr("time.time", lambda: later)
    assert await memory.list_facts(app_name=APP, user_id=USER) == []
    assert await texts(memory, "Rome") == []
    # Forgotten whole: entry, postings, counts, scoring record, history and indexes; the
    # user's generation counts stay, for operators.
    after = await snapshot(client)
    kind, stats, _ = after.pop(KEYS.memory_stats(APP, USER).encode())
    assert (kind, dict(stats)) == (
        "hash",
        {b"generations": b"1", b"facts_added": b"1", b"facts_expired": b"1"},
    )
    left = {k: v for k, v in after.items() if k not in before and b":session:" not in k}
    assert left == {}


async def test_delete_memory_forgets_a_fact_and_all_facts(client: Any) -> None:
    model = Scripted(add("The user likes tea."), add("The user likes jazz."))
    memory = service(client, model)
    await memory.add_session_to_memory(
        Session(id="s1", app_name=APP, user_id=USER, events=[said("tea", 1.0)])
    )
    await memory.add_session_to_memory(
        Session(id="s2", app_name=APP, user_id=USER, events=[said("jazz", 1.0)])
    )
    tea, jazz = sorted(await memory.list_facts(app_name=APP, user_id=USER), key=lambda f: f.text)
    await memory.delete_memory(app_name=APP, user_id=USER, memory_id=tea.id)
    assert [f.text for f in await memory.list_facts(app_name=APP, user_id=USER)] == [jazz.text]
    await memory.delete_memory(app_name=APP, user_id=USER)
    assert await memory.list_facts(app_name=APP, user_id=USER) == []
    assert await client.exists(KEYS.memory_facts(APP, USER)) == 0


async def test_topics_limit_what_is_kept(client: Any) -> None:
    memory = service(client, Scripted(add("The user likes jazz.", "music")), topics=["food"])
    with pytest.raises(GenerationError, match="not among the allowed"):
        await memory.add_session_to_memory(
            Session(id="s1", app_name=APP, user_id=USER, events=[said("jazz", 1.0)])
        )


def test_settings_are_checked() -> None:
    client = fakeredis.FakeAsyncRedis()
    with pytest.raises(InvalidInputError):
        RedisMemoryService(client, generator=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        RedisMemoryService(client, facts={"ttl_seconds": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        CallableGenerator("not callable")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="need a generator"):
        RedisMemoryService.from_url("redis://localhost/0?fact_ttl_seconds=60")
    url = "redis://localhost/0?generator=import:tests_facts_generator:nope"
    with pytest.raises(InvalidInputError, match="cannot be imported"):
        RedisMemoryService.from_url(url)


@pytest.mark.acl
@pytest.mark.parametrize(
    "variable", ["REDIS_URL", pytest.param("REDIS_SEARCH_URL", marks=pytest.mark.search)]
)
async def test_the_documented_user_learns_facts_and_each_command_is_needed(variable: str) -> None:
    admin = Redis.from_url(skip_without(variable))
    await admin.flushdb()
    search = variable == "REDIS_SEARCH_URL"
    backend = "search" if search else "plain"
    try:
        async with acl_user(admin, search=search, facts=True) as worker:
            await learn_and_forget(worker, backend)
        for command in readme_rules()["facts"]:
            await admin.flushdb()
            async with acl_user(admin, search=search, facts=True, without=command[1:]) as worker:
                with pytest.raises(PermissionDeniedError) as refused:
                    await learn_and_forget(worker, backend)
                assert refused.value.command == command[1:].upper()
    finally:
        await admin.flushdb()
        await admin.aclose()


async def learn_and_forget(worker: Any, backend: str) -> None:
    model = Scripted(add("The user likes tea."), update("tea", "The user likes coffee."))
    memory = RedisMemoryService(worker, backend=backend, generator=model)  # type: ignore[arg-type]
    session = Session(id="s1", app_name=APP, user_id=USER, events=[said("I like tea", 1.0)])
    await memory.add_session_to_memory(session)
    session.events.append(said("coffee now", 2.0))
    await memory.add_session_to_memory(session)
    [fact] = await memory.list_facts(app_name=APP, user_id=USER)
    assert len(await memory.fact_history(app_name=APP, user_id=USER, fact_id=fact.id)) == 1
    await memory.delete_memory(app_name=APP, user_id=USER, memory_id=fact.id)


async def test_the_url_turns_learning_on() -> None:
    url = (
        "redis://localhost/0?generator=import:facts_generators:likes"
        "&fact_topics=likes,plans&fact_ttl_seconds=60&keep_events=true"
    )
    memory = RedisMemoryService.from_url(url)
    engine = memory._memory
    assert getattr(engine.generator, "name", None) == "likes"
    assert engine.ctx.fact_settings == FactSettings(
        topics=["likes", "plans"], ttl_seconds=60, keep_events=True
    )
    await memory.aclose()
    with pytest.raises(InvalidInputError, match="in one place"):
        RedisMemoryService.from_url(url, facts=FactSettings())
    with pytest.raises(InvalidInputError, match="keep_events must be true or false"):
        RedisMemoryService.from_url(url.replace("keep_events=true", "keep_events=maybe"))
