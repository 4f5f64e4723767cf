"""Embedders: what turns memory text into vectors for semantic recall.

An embedder is any object with ``dimensions`` and an async ``embed(texts)``; the service
checks every vector it returns (count, dimension, finite, not all zero) before anything is
written, normalises it to unit length and stores it as FLOAT32 little-endian bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import math
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from redis_agent_sessions.errors import EmbeddingError, InvalidInputError, RedisSessionsError

__all__ = ["CallableEmbedder", "Embedder", "Vectorizer"]

_CANCELLED = 1e-6
"""Squared length under which a sum of unit vectors is taken for nothing (FLOAT32 noise)."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of ``dimensions`` floats, one per text, in order.

    Optional members the service uses when present:

    - ``name`` (str): what made the vectors (model and settings). Stored with each vector
      (``vmodel``), so ``redis-agent-sessions reembed`` knows which entries are current;
      defaults to the class name.
    - ``embed_query(texts)``: like ``embed``, for search queries, for models that embed
      queries and documents differently (Google's ``RETRIEVAL_QUERY`` task type).
    """

    @property
    def dimensions(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]: ...


EmbedFunction = Callable[
    [list[str]], Sequence[Sequence[float]] | Awaitable[Sequence[Sequence[float]]]
]


class CallableEmbedder:
    """Any function from a list of texts to a list of vectors, as an [`Embedder`][].

    For sentence-transformers, fastembed, OpenAI and the like:

    ```python
    model = SentenceTransformer("all-MiniLM-L6-v2")
    embedder = CallableEmbedder(lambda texts: model.encode(texts).tolist(),
                                dimensions=384, name="all-MiniLM-L6-v2")
    ```

    Args:
        fn: called with at most ``batch_size`` texts; sync or async. A sync function runs
            in a worker thread (``in_thread``), so a model computing on the CPU does not
            stall the event loop and the other sessions of this worker.
        dimensions: the length of every vector ``fn`` returns.
        name: what made the vectors; change it when the model changes.
        batch_size: most texts per call.
        query_fn: for queries, when the model embeds them differently (same contract).
    """

    def __init__(
        self,
        fn: EmbedFunction,
        *,
        dimensions: int,
        name: str | None = None,
        batch_size: int = 64,
        in_thread: bool = True,
        query_fn: EmbedFunction | None = None,
    ) -> None:
        if not callable(fn) or (query_fn is not None and not callable(query_fn)):
            raise InvalidInputError("fn and query_fn must be callables")
        self.dimensions = check_dimensions(dimensions)
        self.batch_size = check_batch_size(batch_size)
        self.name = name if name is not None else getattr(fn, "__qualname__", "callable")
        if not isinstance(self.name, str) or not self.name:
            raise InvalidInputError(f"name must be a non-empty string, got {self.name!r}")
        self._fn = fn
        self._query_fn = query_fn
        self._in_thread = in_thread

    async def embed(self, texts: Sequence[str]) -> list[Sequence[float]]:
        return await self._run(self._fn, texts)

    async def embed_query(self, texts: Sequence[str]) -> list[Sequence[float]]:
        return await self._run(self._query_fn or self._fn, texts)

    async def _run(self, fn: EmbedFunction, texts: Sequence[str]) -> list[Sequence[float]]:
        out: list[Sequence[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            if self._in_thread and not inspect.iscoroutinefunction(fn):
                result: Any = await asyncio.to_thread(fn, batch)
            else:
                result = fn(batch)
            if inspect.isawaitable(result):
                result = await result
            out.extend(result)
        return out


def check_dimensions(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 32_768:
        raise InvalidInputError(f"dimensions must be an int from 1 to 32768, got {value!r}")
    return value


def check_batch_size(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"batch_size must be a positive int, got {value!r}")
    return value


def check_embedder(value: object) -> Embedder:
    if not isinstance(value, Embedder) or not inspect.iscoroutinefunction(value.embed):
        raise InvalidInputError(
            "embedder must have 'dimensions' and an async 'embed(texts)' (wrap a plain "
            f"function in CallableEmbedder), got {type(value).__name__}"
        )
    check_dimensions(value.dimensions)
    return value


class Vectorizer:
    """An embedder checked and packed for storage: unit FLOAT32 little-endian vectors."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = check_embedder(embedder)
        self.dimensions = embedder.dimensions
        name = getattr(embedder, "name", None)
        self.name = name if isinstance(name, str) and name else type(embedder).__qualname__
        self._format = f"<{self.dimensions}f"

    def key(self, *texts: str) -> str:
        """What a stored vector was made from: this model and dimension, and the texts
        (one, or those ``mixed`` sums). An entry whose key matches needs no new vector."""
        joined = "\0".join(texts)
        data = f"{self.name}\0{self.dimensions}\0{joined}".encode("utf-8", "surrogatepass")
        return hashlib.blake2b(data, digest_size=12).hexdigest()

    async def documents(self, texts: Sequence[str]) -> list[bytes]:
        if not texts:
            return []
        return self._packed(texts, await self._call(self.embedder.embed, texts))

    async def mixed(self, groups: Sequence[Sequence[str]]) -> list[bytes]:
        """One vector per group of texts: the sum of their unit vectors, at unit length.
        Each distinct text is embedded once, in one call (two turns share the text of the
        pair they make)."""
        unique = list(dict.fromkeys(t for group in groups for t in group))
        made = dict(zip(unique, await self.documents(unique), strict=True))
        if all(len(group) == 1 for group in groups):
            return [made[group[0]] for group in groups]
        out = []
        for group in groups:
            parts = [struct.unpack(self._format, made[t]) for t in group]
            total = list(map(sum, zip(*parts, strict=True)))
            # Opposite vectors cancel out: the turn's own (the first) stands alone then.
            cancelled = math.fsum(x * x for x in total) < _CANCELLED
            out.append(made[group[0]] if cancelled else self.pack(total))
        return out

    async def query(self, text: str) -> bytes:
        fn = getattr(self.embedder, "embed_query", None)
        if not callable(fn):
            fn = self.embedder.embed
        return self._packed([text], await self._call(fn, [text]))[0]

    async def _call(self, fn: Callable[..., Any], texts: Sequence[str]) -> Any:
        try:
            return await fn(list(texts))
        except RedisSessionsError:
            raise
        except Exception as exc:
            raise EmbeddingError(
                f"the embedder {self.name!r} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _packed(self, texts: Sequence[str], vectors: Any) -> list[bytes]:
        try:
            vectors = list(vectors)
        except TypeError:
            raise EmbeddingError(
                f"the embedder {self.name!r} returned {type(vectors).__name__}, not a list "
                "of vectors"
            ) from None
        if len(vectors) != len(texts):
            raise EmbeddingError(
                f"the embedder {self.name!r} returned {len(vectors)} vectors for {len(texts)} texts"
            )
        return [self.pack(v) for v in vectors]

    def pack(self, vector: Any) -> bytes:
        try:
            values = [float(x) for x in vector]
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(
                f"the embedder {self.name!r} returned a vector that is not numbers: {exc}"
            ) from None
        if len(values) != self.dimensions:
            raise EmbeddingError(
                f"the embedder {self.name!r} returned a vector of {len(values)} dimensions; "
                f"it declares {self.dimensions}"
            )
        norm = math.sqrt(math.fsum(x * x for x in values))
        if not math.isfinite(norm) or norm == 0.0:
            raise EmbeddingError(
                f"the embedder {self.name!r} returned a vector that is all zeros or holds "
                "a value that is not a finite number"
            )
        return struct.pack(self._format, *(x / norm for x in values))

    def unpack(self, blob: bytes) -> tuple[float, ...] | None:
        """A stored vector, or None when it is not one of this dimension."""
        if len(blob) != 4 * self.dimensions:
            return None
        return struct.unpack(self._format, blob)
