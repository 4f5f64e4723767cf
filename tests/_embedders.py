"""A deterministic embedder for the tests: synonyms share a dimension, so a query finds an
entry by meaning when no word is shared; any other word gets a dimension of its own by hash."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from redis_agent_sessions.memory._text import query_words

SYNONYMS = (
    ("car", "automobile", "vehicle", "skoda", "sedan"),
    ("drive", "driving", "drove"),
    ("dog", "puppy", "hound"),
    ("happy", "glad", "cheerful"),
    ("doctor", "physician"),
    ("colour", "color", "hue"),
)
_CONCEPT = {word: i for i, group in enumerate(SYNONYMS) for word in group}


class SynonymEmbedder:
    """Bag of concepts: each word counts on its synonym group's dimension, or on a hashed
    one. Texts sharing no concept are orthogonal (cosine 0) unless two words collide."""

    def __init__(self, dimensions: int = 512, name: str = "synonyms-v1") -> None:
        self.dimensions = dimensions
        self.name = name
        self.calls: list[list[str]] = []

    def vector(self, text: str) -> list[float]:
        out = [0.0] * self.dimensions
        for word in query_words(text):
            if word in _CONCEPT:
                i = _CONCEPT[word]
            else:
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                spare = self.dimensions - len(SYNONYMS)
                i = len(SYNONYMS) + int.from_bytes(digest, "big") % spare
            out[i] += 1.0
        return out

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self.vector(t) for t in texts]


class ClosableEmbedder(SynonymEmbedder):
    """One holding a resource (as GoogleEmbedder holds an HTTP client)."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True
