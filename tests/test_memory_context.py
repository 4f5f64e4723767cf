"""A turn is also found by the words of the turns around it (its context), but never ranks
above a neighbour that says those words itself; ``context_turns`` sets how far the context
reaches (0: a turn is found by its own words only). On every memory backend of
``test_memory.memory_client``, and as properties on fakeredis and the real servers.

Issue 55 section 1: with the context's words summed over the turns around, "Ready." between
"The deploy is ready." and "The deploy status is ready." ranked second for "deploy status
ready" (google-adk's ``test_search_memory_ranks_by_number_of_matching_words``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _backends import backend, pick
from redis_agent_sessions import (
    Content,
    Event,
    InvalidInputError,
    Part,
    RedisMemoryService,
    Session,
)
from redis_agent_sessions.memory._analysis import ANALYSIS, text_terms
from test_memory import APP, USER, memory_client
from test_semantic_memory import worker

__all__ = ["memory_client", "worker"]  # the fixtures, shared with the other memory suites

DEPLOY = ["The deploy is ready.", "Ready.", "The deploy status is ready."]
"""google-adk's three turns, in this order, all at one time."""


def kind_of(request: pytest.FixtureRequest, name: str = "memory_client") -> str:
    return str(request.node.callspec.params[name])


def service(worker: Any, kind: str, **kw: Any) -> RedisMemoryService:
    return RedisMemoryService(
        worker, backend="search" if kind.startswith("search") else "plain", **kw
    )


def turns(sid: str, texts: list[str], *, user: str = USER, ts: float = 1.0) -> Session:
    """One session of ``texts`` in order (ids ``<sid>-<i>``), every turn at time ``ts``."""
    events = [
        Event(
            id=f"{sid}-{i}",
            author="user",
            timestamp=ts,
            content=Content(role="user", parts=[Part(text=text)]),
        )
        for i, text in enumerate(texts)
    ]
    return Session(id=sid, app_name=APP, user_id=user, events=events)


async def found(memory: RedisMemoryService, query: str, user: str = USER) -> list[str]:
    result = await memory.search_memory(app_name=APP, user_id=user, query=query, limit=50)
    return [m.content.text for m in result.memories]


@pytest.mark.parametrize("context_turns", [None, 0])
async def test_the_turn_saying_more_of_the_words_ranks_first(
    worker: Any, request: pytest.FixtureRequest, context_turns: int | None
) -> None:
    settings_ = {} if context_turns is None else {"context_turns": context_turns}
    memory = service(worker, kind_of(request), **settings_)
    await memory.add_session_to_memory(turns("ranked", DEPLOY))
    # As google-adk ranks them (words in common), with the context or without.
    assert await found(memory, "deploy status ready") == [DEPLOY[2], DEPLOY[0], DEPLOY[1]]
    # Only the last turn says "status": with the context, the turns around it come back
    # after it (the nearer first); without, they are not found.
    around = [DEPLOY[1], DEPLOY[0]] if context_turns is None else []
    assert await found(memory, "status") == [DEPLOY[2], *around]


async def test_context_turns_is_how_far_the_context_reaches(
    worker: Any, request: pytest.FixtureRequest
) -> None:
    said = ["The blue car.", "Which one?", "Yes, that.", "Fine.", "Blue it is."]
    expected = {
        0: [said[0], said[4]],
        1: [said[0], said[4], said[3], said[1]],
        2: [said[0], said[4], said[3], said[1], said[2]],
    }
    for reach, wanted in expected.items():
        memory = service(worker, kind_of(request), context_turns=reach)
        user = f"reach{reach}"
        await memory.add_session_to_memory(turns("s", said, user=user))
        assert sorted(await found(memory, "blue", user)) == sorted(wanted), reach
        # Each turn saying the word ranks above every turn found through it.
        assert set((await found(memory, "blue", user))[:2]) == {said[0], said[4]}


async def test_bad_context_turns_is_refused() -> None:
    for bad in (-1, 3, 1.5, "1", True, None):
        with pytest.raises(InvalidInputError, match="context_turns"):
            RedisMemoryService(object(), context_turns=bad)  # type: ignore[arg-type]
    memory = RedisMemoryService.from_url("redis://h/0?context_turns=0&memory_backend=plain")
    assert memory._memory.ctx.context_turns == 0
    assert (
        RedisMemoryService.from_url("redis://h/0", context_turns=1)._memory.ctx.context_turns == 1
    )
    for url, message in [
        ("redis://h/0?context_turns=none", "context_turns must be an int"),
        ("redis://h/0?context_turns=3", "context_turns must be from 0 to 2"),
        ("redis://h/0?context_turns=-1", "context_turns must be from 0 to 2"),
        ("redis://h/0?context_turns=0&context_turns=1", "given twice"),
    ]:
        with pytest.raises(InvalidInputError, match=message):
            RedisMemoryService.from_url(url)
    with pytest.raises(InvalidInputError, match="give it in one place"):
        RedisMemoryService.from_url("redis://h/0?context_turns=0", context_turns=1)


@pytest.fixture(params=pick("fake", "real", "search"))
async def admin(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    async with backend(request.param, monkeypatch) as client:
        yield client


async def test_reindex_applies_a_change_of_context_turns(
    admin: Any, request: pytest.FixtureRequest
) -> None:
    kind = kind_of(request, "admin")
    written = service(admin, kind)
    await written.add_session_to_memory(turns("ranked", DEPLOY))
    own_only = service(admin, kind, context_turns=0)
    # Written with the context, found by it until reindexed.
    assert len(await found(own_only, "status")) == 3
    report = await own_only.reindex()
    assert (report.entries, report.reindexed) == (3, 3)
    assert await found(own_only, "status") == [DEPLOY[2]]
    analysed = await admin.hget(own_only._memory.ctx.keys.memory_entry(APP, USER, "ranked-1"), "an")
    assert analysed == f"{ANALYSIS}.0".encode()
    # Reindexed again by the same setting: nothing left to do.
    assert (await own_only.reindex()).reindexed == 0


VOCAB = ["deploy", "status", "ready", "blue", "car", "the"]  # "the": a turn saying no word


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sessions=st.lists(
        st.lists(st.lists(st.sampled_from(VOCAB), max_size=4), min_size=1, max_size=7),
        min_size=1,
        max_size=2,
    ),
    query=st.lists(st.sampled_from(VOCAB[:-1]), min_size=1, max_size=3),
    reach=st.sampled_from([0, 1, 2]),
    limit=st.sampled_from([2, 5, 50]),
)
async def test_a_turn_found_through_its_context_never_outranks_its_source(
    admin: Any,
    request: pytest.FixtureRequest,
    sessions: list[list[list[str]]],
    query: list[str],
    reach: int,
    limit: int,
) -> None:
    """A turn none of whose own words is in the query ranks below every neighbour (in its
    session, within ``context_turns``) whose own words say every query word the turn holds
    through its context: such a neighbour is found too, and comes first (also when fewer
    results are asked for than are found)."""
    memory = service(admin, kind_of(request, "admin"), context_turns=reach)
    user = uuid.uuid4().hex
    texts: dict[str, str] = {}
    order: dict[str, tuple[int, int]] = {}
    for s, said in enumerate(sessions):
        words = [" ".join(w) or "the" for w in said]
        session = turns(f"s{s}", words, user=user, ts=float(s))
        await memory.add_session_to_memory(session)
        for i, e in enumerate(session.events):
            texts[e.id], order[e.id] = words[i], (s, i)
    wanted = set(text_terms(" ".join(query)))
    result = await memory.search_memory(
        app_name=APP, user_id=user, query=" ".join(query), limit=limit
    )
    ranks = {m.id: r for r, m in enumerate(result.memories)}
    by_place = {place: memory_id for memory_id, place in order.items()}

    def own(memory_id: str) -> set[str]:
        return set(text_terms(texts[memory_id])) & wanted

    for memory_id, rank in ranks.items():
        if own(memory_id):
            continue
        s, i = order[memory_id]
        near = [by_place[(s, j)] for j in range(i - reach, i + reach + 1) if (s, j) in by_place]
        held = set().union(*(own(n) for n in near))
        for n in near:
            if n != memory_id and held <= own(n):
                assert ranks.get(n, len(ranks)) < rank, (texts[memory_id], texts[n])
