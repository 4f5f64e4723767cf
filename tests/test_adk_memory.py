"""The google-adk memory drop-in: ADK types in and out, and parity with ADK's
InMemoryMemoryService. Runs on every backend of conftest's ``redis_client``, the
least-privilege ACL user (``acl``) included;
one test runs on the RediSearch backend (REDIS_SEARCH_URL) under a key prefix of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest

from _servers import skip_without

pytest.importorskip("google.adk", reason="needs the [adk] extra (google.adk is not installed)")

from google.adk.events import Event
from google.adk.memory import BaseMemoryService, InMemoryMemoryService
from google.adk.memory import in_memory_memory_service as adk_in_memory
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions import Session
from google.genai import types
from redis.asyncio import Redis

import redis_agent_sessions as core
from redis_agent_sessions import InvalidInputError, SessionServiceConfig
from redis_agent_sessions.adk import RedisMemoryService
from redis_agent_sessions.memory._analysis import query_terms, text_terms

pytestmark = pytest.mark.adk

APP, USER = "memory_app", "user1"
T0 = 1_700_000_000.0
COLOR = "My favorite color is blue and I love hiking."
PROJECT = "My favorite project is Project Alpha."


@pytest.fixture
def memory(worker_client: Any) -> RedisMemoryService:
    return RedisMemoryService(worker_client, backend="plain")


def event(text: str, *, ts: float, id: str | None = None, author: str = "user", **kw: Any) -> Event:
    role = "user" if author == "user" else "model"
    ident = {} if id is None else {"id": id}
    return Event(
        invocation_id="inv",
        author=author,
        timestamp=ts,
        content=types.Content(role=role, parts=[types.Part(text=text)]),
        **ident,
        **kw,
    )


def session(sid: str, *events: Event, app: str = APP, user: str = USER) -> Session:
    return Session(id=sid, app_name=app, user_id=user, events=list(events))


async def search(service: BaseMemoryService, query: str, **kw: Any) -> list[MemoryEntry]:
    kw.setdefault("app_name", APP)
    kw.setdefault("user_id", USER)
    response = await service.search_memory(query=query, **kw)
    assert type(response) is SearchMemoryResponse
    return response.memories


def texts(entries: Sequence[MemoryEntry]) -> list[str]:
    return [" ".join(p.text for p in e.content.parts or () if p.text) for e in entries]


# -- recall (scenarios.md section 4) through ADK's types -----------------------------------


async def recall_favorite_color(memory: RedisMemoryService) -> None:
    said = event(COLOR, ts=T0 + 0.25, id="capture-1")
    await memory.add_session_to_memory(session("session_capture", said))
    for query in ("What's my favorite color?", "favorite color"):
        (found,) = await search(memory, query)
        assert type(found) is MemoryEntry
        assert type(found.content) is types.Content
        assert found.content == said.content
        assert found.id == "capture-1"
        assert found.author == "user"
        # ADK's format: local time, no zone (memory/_utils.py).
        assert found.timestamp == datetime.fromtimestamp(T0 + 0.25).isoformat()
        assert found.custom_metadata == {}
    assert await search(memory, "favorite color", user_id="user2") == []
    assert await search(memory, "favorite color", app_name="other_app") == []


async def test_recall_favorite_color(memory: RedisMemoryService) -> None:
    await recall_favorite_color(memory)


async def test_recall_favorite_project(memory: RedisMemoryService) -> None:
    await memory.add_session_to_memory(
        session(
            "s1",
            event(PROJECT, ts=T0),
            event("The weather is nice today.", ts=T0 + 1, author="agent"),
        )
    )
    found = await search(memory, "What is my favorite project?")
    assert texts(found)[0] == PROJECT


async def test_recall_on_redisearch_backend() -> None:
    """The search backend answers the same, through the same adapter."""
    url = skip_without("REDIS_SEARCH_URL")
    # That server is shared: our own prefix (hence our own index), and only our keys go.
    prefix = f"adk-mem-{uuid.uuid4().hex[:12]}"
    client = Redis.from_url(url)

    def service(name: str) -> RedisMemoryService:
        config = SessionServiceConfig(key_prefix=f"{prefix}-{name}")
        return RedisMemoryService(client, config=config, backend="search")

    try:
        assert await service("recall").backend() == "search"
        await recall_favorite_color(service("recall"))
        await parity_scenario(service("parity"))
    finally:
        for name in ("recall", "parity"):
            try:
                await client.execute_command("FT.DROPINDEX", f"{prefix}-{name}:mem:idx")
            except Exception:
                pass
        async for key in client.scan_iter(match=f"{prefix}-*"):
            await client.delete(key)
        await client.aclose()


# -- writes ---------------------------------------------------------------------------------


async def test_add_memory_and_delete_round_trip(memory: RedisMemoryService) -> None:
    entry = MemoryEntry(
        id="m1",
        content=types.Content(role="user", parts=[types.Part(text="The user prefers green tea")]),
        author="summarizer",
        timestamp="2024-01-02T03:04:05",
        custom_metadata={"source": "profile"},
    )
    await memory.add_memory(app_name=APP, user_id=USER, memories=[entry], custom_metadata={"j": 2})
    (found,) = await search(memory, "green tea")
    assert found == entry.model_copy(update={"custom_metadata": {"j": 2, "source": "profile"}})
    assert await search(memory, "green tea", user_id="user2") == []

    await memory.delete_memory(app_name=APP, user_id=USER, memory_id="m1")
    assert await search(memory, "green tea") == []
    # add_memory with the same id writes it again, even after a delete.
    await memory.add_memory(app_name=APP, user_id=USER, memories=[entry])
    assert [e.id for e in await search(memory, "tea")] == ["m1"]


async def test_add_memory_without_id_gets_one(memory: RedisMemoryService) -> None:
    entry = MemoryEntry(content=types.Content(parts=[types.Part(text="likes sailing")]))
    await memory.add_memory(app_name=APP, user_id=USER, memories=[entry])
    (found,) = await search(memory, "sailing")
    assert found.id
    await memory.delete_memory(app_name=APP, user_id=USER, memory_id=found.id)
    assert await search(memory, "sailing") == []


async def test_non_text_parts_survive(memory: RedisMemoryService) -> None:
    """Content is genai's again on the way out, bytes and function calls included."""
    content = types.Content(
        role="model",
        parts=[
            types.Part(text="here is the photo of the lake"),
            types.Part(inline_data=types.Blob(data=b"\x00\xffpng", mime_type="image/png")),
            types.Part.from_function_call(name="lookup", args={"q": "lake"}),
        ],
    )
    said = Event(invocation_id="i", author="agent", timestamp=T0, content=content)
    await memory.add_session_to_memory(session("s", said))
    (found,) = await search(memory, "lake photo")
    assert found.content == content
    await memory.add_memory(
        app_name=APP, user_id=USER, memories=[MemoryEntry(id="x", content=content)]
    )
    assert {e.id: e.content for e in await search(memory, "lake")} == {
        said.id: content,
        "x": content,
    }


async def test_add_events_incremental_with_metadata(memory: RedisMemoryService) -> None:
    a, b = event("apple pie", ts=T0, id="a"), event("apple tart", ts=T0 + 1, id="b")
    await memory.add_events_to_memory(
        app_name=APP, user_id=USER, events=[a], session_id="s", custom_metadata={"turn": 1}
    )
    await memory.add_events_to_memory(app_name=APP, user_id=USER, events=[a, b])
    found = await search(memory, "apple")
    assert [(e.id, e.custom_metadata) for e in found] == [("b", {}), ("a", {"turn": 1})]


async def test_delete_all_of_a_user(memory: RedisMemoryService) -> None:
    await memory.add_session_to_memory(session("s", event("plum", ts=T0)))
    await memory.add_session_to_memory(session("s", event("plum", ts=T0), user="user2"))
    await memory.delete_memory(app_name=APP, user_id=USER)
    assert await search(memory, "plum") == []
    assert len(await search(memory, "plum", user_id="user2")) == 1


async def test_shares_data_with_the_core_service(worker_client: Any) -> None:
    """Same keys under the same config: written through ADK, read through the core."""
    adk_memory, core_memory = (
        RedisMemoryService(worker_client, backend="plain"),
        core.RedisMemoryService(worker_client, backend="plain"),
    )
    await adk_memory.add_session_to_memory(session("s", event(COLOR, ts=T0, id="e1")))
    found = await core_memory.search_memory(app_name=APP, user_id=USER, query="hiking")
    assert [(m.id, m.content.text) for m in found.memories] == [("e1", COLOR)]


async def test_rejects_non_adk_input(memory: RedisMemoryService) -> None:
    core_session = core.Session(id="s", app_name=APP, user_id=USER)
    with pytest.raises(InvalidInputError):
        await memory.add_session_to_memory(core_session)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await memory.add_events_to_memory(
            app_name=APP,
            user_id=USER,
            events=[core.Event()],  # type: ignore[list-item]
        )
    with pytest.raises(InvalidInputError):
        await memory.add_events_to_memory(app_name=APP, user_id=USER, events="abc")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await memory.add_memory(app_name=APP, user_id=USER, memories=[{"content": {}}])  # type: ignore[list-item]
    # The core's own checks still apply behind the adapter.
    with pytest.raises(InvalidInputError):
        await memory.search_memory(app_name="", user_id=USER, query="x")


async def test_from_url_and_async_with() -> None:
    url = skip_without("REDIS_URL")
    prefix = f"adk-mem-{uuid.uuid4().hex[:12]}"
    config = SessionServiceConfig(key_prefix=prefix)
    async with RedisMemoryService.from_url(url, config=config, backend="plain") as memory:
        assert memory.config == config
        await memory.add_session_to_memory(session("s", event(COLOR, ts=T0)))
        assert texts(await search(memory, "hiking")) == [COLOR]
        await memory.delete_memory(app_name=APP, user_id=USER)
    client = Redis.from_url(url)
    async for key in client.scan_iter(match=f"{prefix}:*"):
        await client.delete(key)
    await client.aclose()


# -- parity with ADK's InMemoryMemoryService ---------------------------------------------


def adk_score(query: str, entry: MemoryEntry) -> int:
    """ADK's own score for an entry (in_memory_memory_service.py), from its own tokenizer."""
    words = adk_in_memory._extract_words_lower(query)
    text = texts([entry])[0]
    event_words = adk_in_memory._extract_searchable_words(text)
    lower = adk_in_memory.unicodedata.normalize("NFC", text).lower()
    return sum(1 for w in words if w in event_words or (not w.isascii() and w in lower))


def assert_agree(query: str, ours: list[MemoryEntry], theirs: list[MemoryEntry]) -> None:
    """Everything ADK finds by a word that is not a stop word, we find too. We rank by BM25
    (ADK by words matched) and find more: other forms of a word ("hike" for "hiking"), and
    a turn by the words of the turns around it; a stop word alone ("my") finds nothing."""
    content = set(query_terms(query))
    wanted = {
        e.id
        for e in theirs
        if content & set(text_terms(texts([e])[0])) or any(not t.isascii() for t in content)
    }
    assert wanted <= {e.id for e in ours}, query


STORY = [
    session(
        "trip",
        event(COLOR, ts=T0 + 1, id="e1"),
        event("Blue is a great color.", ts=T0 + 2, id="e2", author="agent"),
        Event(
            invocation_id="inv",
            author="agent",
            timestamp=T0 + 3,
            id="call",
            content=types.Content(
                role="model", parts=[types.Part.from_function_call(name="f", args={})]
            ),
        ),
        Event(invocation_id="inv", author="agent", timestamp=T0 + 4, id="no-content"),
        event("I booked a flight to Paris for the hiking trip.", ts=T0 + 5, id="e3"),
    ),
    session(
        "work",
        event(PROJECT, ts=T0 + 6, id="e4"),
        event("私はPythonを使う", ts=T0 + 7, id="e5"),
        event("Café au lait in Paris, s'il vous plaît", ts=T0 + 8, id="e6", author="agent"),
    ),
    session("elsewhere", event(COLOR, ts=T0 + 9, id="other-user"), user="user2"),
]
QUERIES = [
    "What's my favorite color?",
    "favorite color",
    "HIKING",
    "paris",
    "Project Alpha",
    "What is my favorite project?",
    "python",
    "thon",
    "使う",
    "café",
    "blue hiking paris",
    "favorite color blue",
    "paris flight",
    "nothing matches this",
    "",
    "?!",
]


async def parity_scenario(memory: RedisMemoryService) -> None:
    reference = InMemoryMemoryService()
    for service in (memory, reference):
        for s in STORY:
            await service.add_session_to_memory(s)

    async def agree() -> int:
        exact = 0
        for query in QUERIES:
            for user in (USER, "user2", "nobody"):
                ours = await search(memory, query, user_id=user)
                theirs = await search(reference, query, user_id=user)
                assert_agree(query, ours, theirs)
                exact += bool(theirs) and ours[:1] == theirs[:1]
        return exact

    assert await agree() >= 5
    # Re-adding a session replaces its entries; a deleted id stays deleted; event deltas
    # are deduplicated by id.
    trip = STORY[0].model_copy(update={"events": STORY[0].events[1:]})
    late = event("Hiking boots packed", ts=T0 + 10, id="e7")
    for service in (memory, reference):
        await service.add_session_to_memory(trip)
        await service.delete_memory(app_name=APP, user_id=USER, memory_id="e3")
        await service.delete_memory(app_name=APP, user_id=USER, memory_id="missing")
        await service.add_session_to_memory(STORY[0])
        await service.add_events_to_memory(
            app_name=APP, user_id=USER, events=[late, late, STORY[0].events[0]], session_id="trip"
        )
    await agree()
    # e3 stays deleted; e2 is found through e1, the turn before it.
    assert [e.id for e in await search(memory, "hiking")] == ["e7", "e1", "e2"]


async def test_parity_with_adk_in_memory_service(memory: RedisMemoryService) -> None:
    await parity_scenario(memory)


async def test_semantic_recall_through_adk_types(worker_client: Any) -> None:
    from _embedders import SynonymEmbedder

    memory = RedisMemoryService(worker_client, backend="plain", embedder=SynonymEmbedder())
    await memory.add_session_to_memory(session("s1", event("I bought a Skoda", ts=T0)))
    found = await memory.search_memory(app_name=APP, user_id=USER, query="what automobile?")
    (entry,) = found.memories
    assert isinstance(entry, MemoryEntry)
    assert entry.content.parts[0].text == "I bought a Skoda"
    assert entry.custom_metadata["redis_agent_sessions"]["found_by"] == ["vector"]
