"""The store's vector record (``<prefix>:mem:vectors``): the dimension and model every
worker's embedder must match, set by the first one."""

from __future__ import annotations

import logging
from typing import Any

import orjson

from redis_agent_sessions.errors import CorruptDataError, MemoryIndexError
from redis_agent_sessions.keys import KeySpace

__all__ = ["check_vectors", "recorded_vectors"]

_log = logging.getLogger("redis_agent_sessions.memory")


async def recorded_vectors(client: Any, keys: KeySpace) -> dict[str, Any] | None:
    """The store's vector record, ``{"dimensions", "model"}``, None when no embedder
    has written; CorruptDataError when it is not one."""
    key = keys.memory_vectors()
    raw = await client.get(key)
    if raw is None:
        return None
    try:
        recorded = orjson.loads(raw)
        return {"dimensions": int(recorded["dimensions"]), "model": str(recorded["model"])}
    except (TypeError, ValueError, KeyError, orjson.JSONDecodeError) as exc:
        raise CorruptDataError(key, f"not a vector record: {raw!r}") from exc


async def check_vectors(client: Any, keys: KeySpace, mine: dict[str, Any]) -> None:
    """Record the vectors' dimension and model (``mine``) for every later worker, or check
    them against the record: vectors of another dimension cannot be compared."""
    key = keys.memory_vectors()
    recorded = await recorded_vectors(client, keys)
    if recorded is None:  # read first: a tenant may read the record, not write it
        await client.set(key, orjson.dumps(mine), nx=True)
        recorded = await recorded_vectors(client, keys)
    if recorded is None:  # deleted at once by someone else: do not guess
        raise MemoryIndexError(f"could not record the memory vectors in {key!r}")
    dimensions, model = recorded["dimensions"], recorded["model"]
    if dimensions != mine["dimensions"]:
        raise MemoryIndexError(
            f"this service's embedder {mine['model']!r} makes {mine['dimensions']}-"
            f"dimensional vectors, but {key!r} records {dimensions} ({model!r}), used by "
            "the stored entries: re-embed them first with `redis-agent-sessions reembed`"
        )
    if model != mine["model"]:
        _log.warning(
            "memory vectors were made by %r and this service embeds with %r: until "
            "`redis-agent-sessions reembed` has run, older entries compare poorly",
            model,
            mine["model"],
        )
