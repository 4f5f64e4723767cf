"""The keyword candidate step against a brute force, on a store past every bound.

A search scores only the candidates its backend proposes (``_ranking``): on plain Redis what
``memory_rank.lua`` reads of the postings, at most ``READ_BUDGET`` of them; on RediSearch the
same over the postings it keeps, each term's best ``READ_BUDGET`` only (``_entries.lua``'s
``CAPPED``). Here one user holds more entries than both bounds, a few words being in most
of them, and each search's results are compared with BM25 computed over every entry
(``test_memory_text.reference``): the bounds may reorder what a term in most entries adds,
never lose what the rarer words find."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from _backends import backend, pick
from redis_agent_sessions import Content, Event, Part, RedisMemoryService, Session
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory import _ranking
from redis_agent_sessions.memory._analysis import text_terms
from test_memory_text import reference

ENTRIES = 2_400
"""Past ``READ_BUDGET`` and ``CAPPED`` (1,500) for the words in most entries."""
COMMON = ["deploy", "status", "ready", "team", "note"]
"""Each in about 70% of the entries."""
RARE = [f"w{i:03d}" for i in range(300)]
"""Each in about 16 entries."""
NEAR_TOP = 200
"""Every result is among the brute force's best this many (of ``ENTRIES``)."""


def corpus(seed: int) -> list[tuple[str, float, str]]:
    rng = random.Random(seed)
    docs = []
    for i in range(ENTRIES):
        words = [w for w in COMMON if rng.random() < 0.7]
        words += rng.sample(RARE, rng.randint(1, 3))
        rng.shuffle(words)
        docs.append((f"e{i:04d}", 1000.0 + i, " ".join(words)))
    return docs


def test_capped_matches_the_read_budget() -> None:
    """The search backend's postings hold all that the plain backend's read may reach."""
    lua = Path(_ranking.__file__).parent.parent / "_redis" / "lua" / "_entries.lua"
    capped = re.search(r"local CAPPED = (\d+)", lua.read_text(encoding="utf-8"))
    assert capped is not None
    assert int(capped.group(1)) == _ranking.READ_BUDGET


@pytest.mark.parametrize("kind", pick("real", "search"))
async def test_candidates_match_a_brute_force_past_every_bound(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = corpus(55)
    rng = random.Random(5)
    name = "search" if kind == "search" else "plain"
    async with backend(kind, monkeypatch) as client:
        try:
            memory = RedisMemoryService(client, backend=name)
            events = [
                Event(id=i, author="u", timestamp=ts, content=Content(parts=[Part(text=body)]))
                for i, ts, body in docs
            ]
            await memory.add_session_to_memory(
                Session(id="s", app_name="a", user_id="u", events=events)
            )
            keys = KeySpace()
            # Every bound is reached: the common words' postings are past the plain
            # backend's read budget (and capped at it on the search backend).
            terms = [text_terms(w)[0] for w in COMMON]  # stemmed: "ready" is readi
            sizes = [await client.zcard(keys.memory_term("a", "u", t)) for t in terms]
            if name == "plain":
                assert min(sizes) > _ranking.READ_BUDGET
            else:
                assert sizes == [_ranking.READ_BUDGET] * len(COMMON)
            found = missed = 0
            for _ in range(30):
                words = rng.sample(COMMON, rng.randint(1, 4)) + rng.sample(RARE, rng.randint(0, 2))
                query = " ".join(words)
                ranking = reference(docs, query, ENTRIES)
                expected = ranking[:10]
                got = await memory.search_memory(app_name="a", user_id="u", query=query)
                ids = [m.id for m in got.memories]
                assert len(ids) == len(expected), query
                # Each entry saying a rare query word (what the brute force's best hold)
                # is found wherever the brute force ranks it.
                rare = {t for w in words if w in RARE for t in text_terms(w)}
                for doc_id in expected:
                    said = set(text_terms(next(b for d, _, b in docs if d == doc_id)))
                    if said & rare:
                        found += doc_id in ids
                        missed += doc_id not in ids
                # What the common words alone find is read only as far as the budget: it
                # is among the best few percent still (at most 100th on this store).
                place = {doc_id: i for i, doc_id in enumerate(ranking)}
                assert max(place[doc_id] for doc_id in ids) < NEAR_TOP, (query, ids, expected)
            assert found > 0
            assert missed == 0
        finally:
            if name == "search":
                await client.execute_command("FT.DROPINDEX", "ras:mem:idx")
