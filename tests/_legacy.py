"""A memory store as 0.1 wrote it (word sets, no ranking): what `reindex` moves.

The entry hashes, postings and RediSearch index are written here field by field as 0.1's
memory_put.lua and search backend did, so the tests need no old release installed.
"""

from __future__ import annotations

from typing import Any

import orjson

from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory._store import iso_timestamp, owner_tag
from redis_agent_sessions.memory._text import entry_grams, lowered_text, searchable_words

# 0.1's index: the same as today's without the "terms" field.
V1_SCHEMA = [
    "app", "TAG", "user", "TAG",
    "words", "TEXT", "NOSTEM", "SORTABLE", "UNF",
    "grams", "TEXT", "NOSTEM",
    "lower", "TEXT", "NOINDEX", "SORTABLE", "UNF",
    "id", "TEXT", "NOINDEX", "SORTABLE", "UNF",
    "ts", "NUMERIC", "SORTABLE",
]  # fmt: skip


async def make_v1_index(client: Any, keys: KeySpace) -> None:
    await client.execute_command(
        "FT.CREATE", keys.memory_index(), "ON", "HASH", "PREFIX", 1, keys.memory_index_prefix(),
        "STOPWORDS", 0, "SCHEMA", *V1_SCHEMA,
    )  # fmt: skip


async def write_v1(
    client: Any,
    keys: KeySpace,
    app: str,
    user: str,
    turns: list[tuple[str, str, float, str, str]],
    *,
    postings: bool,
) -> None:
    """(id, text, ts, session, author) entries, as 0.1 stored them."""
    pipe = client.pipeline(transaction=False)
    for memory_id, said, ts, session, author in turns:
        words = searchable_words(said)
        grams = entry_grams(words)
        lower = lowered_text(said)
        key = keys.memory_entry(app, user, memory_id)
        pipe.hset(key, mapping={
            "id": memory_id, "app_name": app, "user_id": user, "app": owner_tag(app),
            "user": owner_tag(user), "session": session, "author": "=" + author,
            "ts": repr(ts), "timestamp": "=" + iso_timestamp(ts),
            "content": orjson.dumps({"parts": [{"text": said}], "role": "user"}).decode(),
            "meta": "{}", "lower": lower,
            "words": " " + " ".join(sorted(words)) + " ",
            "grams": " " + " ".join(sorted(grams)) + " ",
        })  # fmt: skip
        pipe.zadd(keys.memory_entries(app, user), {memory_id: ts})
        if session:
            pipe.sadd(keys.memory_session(app, user, session), memory_id)
        if postings:
            for word in words:
                if word.isascii():
                    pipe.zadd(keys.memory_word(app, user, word), {memory_id: ts})
            for gram in grams:
                pipe.zadd(keys.memory_gram(app, user, gram), {memory_id: ts})
            if grams:
                pipe.hset(keys.memory_texts(app, user), memory_id, lower)
    await pipe.execute()
