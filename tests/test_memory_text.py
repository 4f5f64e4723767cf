"""The tokenizer against ADK's own, and the search ranking against a direct reference."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from _backends import backend
from redis_agent_sessions import Content, Event, MemoryIndexError, Part, RedisMemoryService, Session
from redis_agent_sessions.memory._analysis import K1, SUBSTRING_WEIGHT, B, text_terms
from redis_agent_sessions.memory._text import (
    entry_grams,
    lowered_text,
    query_grams,
    query_words,
    searchable_words,
)

SAMPLES = [
    "My favorite color is blue and I love hiking.",
    "What's my favorite color?",
    "私はPythonを使う",
    "Les cafés de Paris — ÉTÉ 2024!",
    "東京都庁 and 京都",
    "snake_case_words, 3.14 and x²",
    "e\u0301cole",  # decomposed: NFC makes it one letter
    "",
    "?!...",
]


@pytest.mark.adk
@pytest.mark.parametrize("sample", SAMPLES)
def test_tokenizer_matches_adk(sample: str) -> None:
    adk = pytest.importorskip("google.adk.memory.in_memory_memory_service")
    assert query_words(sample) == adk._extract_words_lower(sample)
    assert searchable_words(sample) == adk._extract_searchable_words(sample)


@pytest.mark.parametrize("sample", SAMPLES)
def test_grams_select_every_substring_match(sample: str) -> None:
    grams = entry_grams(searchable_words(sample))
    lower = lowered_text(sample)
    for word in searchable_words(sample):
        for i in range(len(word)):
            for j in range(i + 1, len(word) + 1):
                part = word[i:j]
                if not part.isascii():
                    assert part in lower
                    assert query_grams(part) <= grams


def reference(docs: list[tuple[str, float, str]], query: str, limit: int) -> list[str]:
    """BM25 as docs/memory-ranking.md states it, computed from scratch: docs (one session, in
    order), each with the words of the turns up to two away at half and quarter weight (a
    word as the neighbour saying it best gives it), scored against the final counts and
    average length; a doc holding the query's words only through its context just below
    each neighbour saying all of them; equal scores newest first, then larger id."""
    own = [text_terms(body) for _, _, body in docs]
    found: dict[str, tuple[Counter[str], int]] = {}
    for i, ((doc_id, _, _), terms) in enumerate(zip(docs, own, strict=True)):
        tf = Counter(t for t in terms for _ in range(4))
        length = 4 * len(terms)
        best: Counter[str] = Counter()
        for j in range(max(0, i - 2), min(len(docs), i + 3)):
            weight = (4, 2, 1)[abs(i - j)]
            if j != i:
                for t, count in Counter(own[j]).items():
                    best[t] = max(best[t], weight * count)
                length += weight * len(own[j])
        tf.update(best)
        if tf:
            found[doc_id] = (tf, length)
    n = len(found)
    avg = sum(length for _, length in found.values()) / max(n, 1)
    weights: dict[str, dict[str, float]] = {}
    for doc_id, (tf, length) in found.items():
        norm = K1 * (1 - B + B * length / avg)
        weights[doc_id] = {t: (f / 4) * (K1 + 1) / ((f / 4) + norm) for t, f in tf.items()}
    lowered = {doc_id: lowered_text(body) for doc_id, _, body in docs}
    scores: dict[str, float] = {}
    held: dict[str, set[str]] = {}
    said: dict[str, set[str]] = {}
    own_sets = {doc_id: set(terms) for (doc_id, _, _), terms in zip(docs, own, strict=True)}
    for term, times in sorted(Counter(text_terms(query, split=False)).items()):
        inside = set() if term.isascii() else {d for d in weights if term in lowered[d]}
        df = sum(1 for w in weights.values() if term in w)
        idf = math.log(1 + (n - max(df, len(inside)) + 0.5) / (max(df, len(inside)) + 0.5))
        for doc_id, w in weights.items():
            weight = w.get(term, SUBSTRING_WEIGHT if doc_id in inside else None)
            if weight is not None:
                scores[doc_id] = scores.get(doc_id, 0.0) + times * idf * weight
                held.setdefault(doc_id, set()).add(term)
                if term in own_sets[doc_id] or doc_id in inside:
                    said.setdefault(doc_id, set()).add(term)
    capped = dict(scores)
    at = {doc_id: i for i, (doc_id, _, _) in enumerate(docs)}
    for doc_id in scores:
        if said.get(doc_id):
            continue
        i = at[doc_id]
        for j in range(max(0, i - 2), min(len(docs), i + 3)):
            other = docs[j][0]
            if other in scores and held[doc_id] <= said.get(other, set()):
                capped[doc_id] = min(capped[doc_id], scores[other] * (1 - 1e-9))
    scores = capped
    ts = {doc_id: t for doc_id, t, _ in docs}
    ranked = sorted(((s, ts[d], d) for d, s in scores.items() if s > 0), reverse=True)
    return [doc_id for _, _, doc_id in ranked[:limit]]


async def test_ranking_matches_reference_on_random_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    vocab = ["alpha", "beta", "gamma", "delta", "eps", "東京", "京都", "café", "x", "y1"]
    docs = []
    for i in range(300):
        body = " ".join(rng.choices(vocab, weights=range(len(vocab), 0, -1), k=rng.randint(1, 5)))
        docs.append((f"d{i:03d}", float(rng.randint(0, 50)), body))
    async with backend("fake", monkeypatch) as client:
        memory = RedisMemoryService(client, backend="plain")
        events = [
            Event(id=i, timestamp=ts, content=Content(parts=[Part(text=body)]))
            for i, ts, body in docs
        ]
        await memory.add_session_to_memory(
            Session(id="s", app_name="a", user_id="u", events=events)
        )
        for _ in range(60):
            query = " ".join(rng.sample([*vocab, "東", "都", "zeta"], rng.randint(1, 4)))
            limit = rng.choice([1, 3, 10, 50])
            found = await memory.search_memory(app_name="a", user_id="u", query=query, limit=limit)
            assert [m.id for m in found.memories] == reference(docs, query, limit), query


@pytest.mark.real
@pytest.mark.search
async def test_the_search_backend_matches_words_as_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RediSearch expands a query word to its other forms even on a NOSTEM field ("books"
    finds "book"): those false hits took the places of true matches in the level queries,
    whose recount then dropped them (seen on LoCoMo: "What books has Melanie read?")."""
    async with backend("search", monkeypatch) as client:
        try:
            docs = [(f"n{i:02d}", float(100 + i), "a book and a book club") for i in range(12)]
            docs += [("old1", 1.0, "two books"), ("old2", 2.0, "more books here")]
            events = [
                Event(id=i, timestamp=ts, content=Content(parts=[Part(text=body)]))
                for i, ts, body in docs
            ]
            memory = RedisMemoryService(client, backend="search")
            await memory.add_session_to_memory(
                Session(id="s", app_name="a", user_id="u", events=events)
            )
            for query, limit in (("books", 3), ("books club", 3), ("book", 2)):
                found = await memory.search_memory(
                    app_name="a", user_id="u", query=query, limit=limit
                )
                assert [m.id for m in found.memories] == reference(docs, query, limit), query
        finally:
            await client.execute_command("FT.DROPINDEX", "ras:mem:idx")


@pytest.mark.real
@pytest.mark.search
async def test_existing_index_with_other_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    async with backend("search", monkeypatch) as client:
        try:
            await client.execute_command(
                "FT.CREATE", "other:mem:idx", "ON", "HASH", "PREFIX", 1, "other:mem:{",
                "SCHEMA", "body", "TEXT",
            )  # fmt: skip
            from redis_agent_sessions import SessionServiceConfig

            memory = RedisMemoryService(client, config=SessionServiceConfig(key_prefix="other"))
            with pytest.raises(MemoryIndexError):
                await memory.backend()
            again = RedisMemoryService(client, backend="search")
            assert await again.backend() == "search"
            assert await RedisMemoryService(client).backend() == "search"
        finally:
            await client.execute_command("FT.DROPINDEX", "other:mem:idx")
            for name in (b"ras:mem:idx",):
                await client.execute_command("FT.DROPINDEX", name)


def test_memory_keys_share_the_user_tag_and_escape() -> None:
    from redis_agent_sessions.keys import KeySpace

    ks = KeySpace("ras")
    assert ks.memory_entry("a:b", "u}", "e 1") == "ras:mem:{a%3Ab:u%7D}:entry:e%201"
    assert ks.memory_entries("a", "u") == "ras:mem:{a:u}:entries"
    assert ks.memory_session("a", "u", "s") == "ras:mem:{a:u}:session:s"
    assert ks.memory_ingest("a", "u", "s", "t") == "ras:mem:{a:u}:session:s:ingest:t"
    assert ks.memory_deleted("a", "u") == "ras:mem:{a:u}:deleted"
    assert ks.memory_texts("a", "u") == "ras:mem:{a:u}:texts"
    assert ks.memory_gram("a", "u", "東京") == "ras:mem:{a:u}:gram:東京"
    assert ks.memory_index() == "ras:mem:idx"
    assert ks.memory_entry("a", "u", "x").startswith(ks.memory_index_prefix())
