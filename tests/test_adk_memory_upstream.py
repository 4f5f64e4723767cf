"""google-adk's own memory tests (``tests/unittests/memory/test_in_memory_memory_service.py``
of google/adk-python, as of the installed 2.13), rewritten to run on this library's ADK
memory service, on fakeredis, plain Redis and RediSearch, with the default context and
with ``context_turns=0``; each scenario also runs on ADK's ``InMemoryMemoryService``, so
every expectation below is ADK's own.

What ADK's tests read of ``InMemoryMemoryService``'s internals (``_session_events``) is
checked through searches. Two behaviours differ, and are asserted as ours:

- **Context**: a turn is also found by the words of the turns around it, after the turns
  that say them (``test_search_memory_case_insensitive_match``: the turn before the one
  saying "development" comes back second). ``context_turns=0`` gives ADK's results.
- **Ties**: equal scores go newest first, then by larger id; ADK keeps the order entries
  were added (``test_search_memory_returns_at_most_ten_memories``, whose twenty notes all
  have one time).

ADK's thread-safety test (a lock around a dict) becomes searches running while sessions are
added, on one event loop.
"""

from __future__ import annotations

import asyncio
import unicodedata
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="needs the [adk] extra (google.adk is not installed)")

from google.adk.events import Event
from google.adk.memory import BaseMemoryService, InMemoryMemoryService
from google.adk.sessions import Session
from google.genai import types

from _backends import backend, pick
from redis_agent_sessions import SessionServiceConfig
from redis_agent_sessions.adk import RedisMemoryService

pytestmark = pytest.mark.adk

APP, USER, OTHER = "test-app", "test-user", "another-user"


def event(tag: str, text: str | None, ts: float = 1.0, author: str = "user") -> Event:
    content = None if text is None else types.Content(parts=[types.Part(text=text)])
    return Event(
        id=f"event-{tag}", invocation_id=f"inv-{tag}", author=author, timestamp=ts, content=content
    )


def session(sid: str, *events: Event, app: str = APP, user: str = USER) -> Session:
    return Session(app_name=app, user_id=user, id=sid, last_update_time=1000, events=list(events))


SESSION_1 = session(
    "session-1",
    event("1a", "The ADK is a great toolkit.", 12345),
    event("1b", None, 12346),  # no content: not kept
    event("1c", "I agree. The Agent Development Kit (ADK) rocks!", 12347, author="model"),
)
SESSION_2 = session("session-2", event("2a", "I like to code in Python.", 54321))
OTHER_USER = session("session-3", event("3a", "This is a secret.", 60000), user=OTHER)


@pytest.fixture(params=pick("fake", "real", "search"))
async def client(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    async with backend(request.param, monkeypatch) as made:
        yield made


class Services:
    """Makes (ours, ADK's) for one scenario, ours under a key prefix of its own."""

    def __init__(self, client: Any, backend: str, context_turns: int | None) -> None:
        self.client, self.backend, self.context_turns = client, backend, context_turns
        self.made = 0

    def __call__(self) -> list[BaseMemoryService]:
        self.made += 1
        config = SessionServiceConfig(key_prefix=f"up{self.made}")
        setting = {} if self.context_turns is None else {"context_turns": self.context_turns}
        ours = RedisMemoryService(self.client, config=config, backend=self.backend, **setting)
        return [ours, InMemoryMemoryService()]


@pytest.fixture(params=[None, 0], ids=["context", "own-words"])
def make(client: Any, request: pytest.FixtureRequest) -> Services:
    kind = request.node.callspec.params["client"]
    return Services(client, "search" if kind == "search" else "plain", request.param)


async def texts(
    memory: BaseMemoryService, query: str, user: str = USER, app: str = APP
) -> list[str]:
    found = await memory.search_memory(app_name=app, user_id=user, query=query)
    return [m.content.parts[0].text for m in found.memories]


async def ids(memory: BaseMemoryService, query: str) -> list[str]:
    found = await memory.search_memory(app_name=APP, user_id=USER, query=query)
    return [m.id or "" for m in found.memories]


async def test_add_session_keeps_the_events_with_content(make: Services) -> None:
    for memory in make():
        await memory.add_session_to_memory(SESSION_1)
        assert sorted(await texts(memory, "ADK")) == sorted(
            ["The ADK is a great toolkit.", "I agree. The Agent Development Kit (ADK) rocks!"]
        )


async def test_add_events_to_memory_with_explicit_events(make: Services) -> None:
    for memory in make():
        await memory.add_events_to_memory(
            app_name=APP, user_id=USER, session_id="session-1", events=[SESSION_1.events[0]]
        )
        assert await texts(memory, "toolkit") == ["The ADK is a great toolkit."]
        assert await texts(memory, "rocks") == []


async def test_add_events_to_memory_without_session_id(make: Services) -> None:
    for memory in make():
        await memory.add_events_to_memory(app_name=APP, user_id=USER, events=[SESSION_1.events[0]])
        assert await texts(memory, "toolkit") == ["The ADK is a great toolkit."]


async def test_add_events_to_memory_appends_and_deduplicates(make: Services) -> None:
    new = event("1d", "A new fact.", 12348)
    duplicate = event("1a", "Updated duplicate text.", 12349)  # an id already added: ignored
    ours, adk = make()
    for memory in (ours, adk):
        await memory.add_session_to_memory(SESSION_1)
        await memory.add_events_to_memory(
            app_name=APP, user_id=USER, session_id="session-1", events=[new, duplicate]
        )
        # Events added to a session are found by their own words and each other's (ours).
        assert await texts(memory, "fact") == ["A new fact."]
        assert await texts(memory, "updated duplicate") == []
    assert await texts(adk, "toolkit") == ["The ADK is a great toolkit."]
    # Ours with the context: the turn after it comes back after it.
    around = [] if make.context_turns == 0 else [SESSION_1.events[2].content.parts[0].text]
    assert await texts(ours, "toolkit") == ["The ADK is a great toolkit.", *around]


async def test_add_session_with_no_events(make: Services) -> None:
    for memory in make():
        await memory.add_session_to_memory(session("session-4"))
        assert await texts(memory, "anything") == []


async def test_search_memory_simple_match(make: Services) -> None:
    for memory in make():
        await memory.add_session_to_memory(SESSION_1)
        await memory.add_session_to_memory(SESSION_2)
        found = await memory.search_memory(app_name=APP, user_id=USER, query="Python")
        assert [m.content.parts[0].text for m in found.memories] == ["I like to code in Python."]
        assert found.memories[0].author == "user"


async def test_search_memory_case_insensitive_match(make: Services) -> None:
    saying = "I agree. The Agent Development Kit (ADK) rocks!"
    ours, adk = make()
    for memory in (ours, adk):
        await memory.add_session_to_memory(SESSION_1)
    assert await texts(adk, "development") == [saying]
    # Ours: the turn before it is found by its words too, and comes after it.
    around = [] if make.context_turns == 0 else ["The ADK is a great toolkit."]
    assert await texts(ours, "development") == [saying, *around]


async def test_search_memory_multiple_matches(make: Services) -> None:
    for memory in make():
        await memory.add_session_to_memory(SESSION_1)
        assert sorted(await texts(memory, "How about ADK?")) == sorted(
            ["The ADK is a great toolkit.", "I agree. The Agent Development Kit (ADK) rocks!"]
        )


async def test_search_memory_no_match(make: Services) -> None:
    for memory in make():
        await memory.add_session_to_memory(SESSION_1)
        assert await texts(memory, "nonexistent") == []


async def test_search_memory_is_scoped_by_user(make: Services) -> None:
    for memory in make():
        await memory.add_session_to_memory(SESSION_1)
        await memory.add_session_to_memory(OTHER_USER)
        assert await texts(memory, "secret") == []
        assert await texts(memory, "secret", user=OTHER) == ["This is a secret."]


async def test_search_memory_does_not_collide_on_slash_in_identifiers(make: Services) -> None:
    slashed = session(
        "session-slashed", event("slashed", "This is a secret."), app="app/other-user", user="user"
    )
    for memory in make():
        await memory.add_session_to_memory(slashed)
        assert await texts(memory, "secret", app="app", user="other-user/user") == []


NFD = unicodedata.normalize
NON_LATIN = [
    ("私の名前は太郎です", "太郎", 1),
    ("私の名前は太郎です", "天気", 0),
    ("我喜欢机器学习", "机器学习", 1),
    ("我喜欢机器学习", "天气预报", 0),
    ("제 이름은 민수입니다", "민수입니다", 1),
    ("Меня зовут Алексей", "Алексей", 1),
    ("太郎 works at ABC Corp", "太郎", 1),
    ("太郎 works at ABC Corp", "ABC", 1),
    ("私はPythonでADKを使っています", "Python", 1),
    ("私はPythonでADKを使っています", "adk", 1),
    ("我用Python写代码", "python", 1),
    ("私はPythonでADKを使っています", "使って", 1),
    ("私はPythonでADKを使っています", "Java", 0),
    ("I like to code in Python.", "thon", 0),
    ("私はPythonでADKを使っています", "thon", 0),
    (NFD("NFD", "私はCaféでADKを使っています"), "Café", 1),
    (NFD("NFD", "私はCaféでADKを使っています"), "café", 1),
    (NFD("NFD", "私はCaféでADKを使っています"), "Ruby", 0),
    (NFD("NFD", "Meet at the Café"), "Café", 1),
    ("Meet at the Café", NFD("NFD", "Café"), 1),
    (NFD("NFD", "プログラミングを学ぶ"), "プログラミング", 1),
    (NFD("NFD", "제 이름은 민수입니다"), "민수입니다", 1),
]


async def test_search_memory_non_latin(make: Services) -> None:
    for n, (said, query, count) in enumerate(NON_LATIN):
        for memory in make():
            user = f"i18n-{n}"
            await memory.add_session_to_memory(
                session("session-i18n", event("i18n", said, 90000), user=user)
            )
            assert len(await texts(memory, query, user=user)) == count, (said, query)


async def test_search_memory_ranks_by_number_of_matching_words(make: Services) -> None:
    ranked = session(
        "session-ranked",
        event("ranked-a", "The deploy is ready."),
        event("ranked-b", "Ready."),
        event("ranked-c", "The deploy status is ready."),
    )
    for memory in make():
        await memory.add_session_to_memory(ranked)
        assert await texts(memory, "deploy status ready") == [
            "The deploy status is ready.",
            "The deploy is ready.",
            "Ready.",
        ]


async def test_search_memory_returns_at_most_ten_memories(make: Services) -> None:
    notes = [event(f"note-{i}", f"note {i} about work") for i in range(20)]
    many = session("session-many", *notes, event("backlog", "the backlog note about work"))
    ours, adk = make()
    for memory in (ours, adk):
        await memory.add_session_to_memory(many)
    assert await texts(adk, "work backlog note") == ["the backlog note about work"] + [
        f"note {i} about work" for i in range(9)
    ]
    # Ours: the best match first. By their own words the notes tie, all added at one time:
    # larger id first. With the context, the two notes before the best match come next
    # (found by its words too), and the rest vary with the turns around them.
    found = await ids(ours, "work backlog note")
    assert len(found) == 10
    if make.context_turns == 0:
        tied = [f"event-note-{i}" for i in (*range(9, 1, -1), 19)]
        assert found == ["event-backlog", *tied]
    else:
        assert found[:3] == ["event-backlog", "event-note-19", "event-note-18"]
        assert all(f.startswith("event-note-") for f in found[3:])


async def test_search_while_sessions_are_added(make: Services) -> None:
    for memory in make():
        await added_while_searching(memory)


async def added_while_searching(memory: BaseMemoryService) -> None:
    """ADK's thread-safety test (a lock around its dict), as tasks of one event loop."""
    for i in range(20):
        await memory.add_session_to_memory(
            session(f"seed-{i}", event(f"seed-{i}", f"fact about {i}"))
        )

    async def write(i: int) -> None:
        await memory.add_session_to_memory(session(f"w-{i}", event(f"w-{i}", f"fact about w{i}")))

    async def read() -> int:
        return len(await texts(memory, "fact"))

    done = await asyncio.gather(*[write(i) for i in range(30)], *[read() for _ in range(30)])
    assert all(n == 10 for n in done[30:])
