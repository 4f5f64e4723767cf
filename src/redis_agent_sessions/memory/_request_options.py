"""What one generation request says besides its events: Memory Bank's ``revision_labels``,
``metadata``, ``metadata_merge_strategy`` and ``revision_ttl``, named as ADK's
``VertexAiMemoryBankService`` reads them from ``custom_metadata``.

Everything here is checked before anything is written, and again when a worker reads it
back from a job (a job's options are JSON in Redis: data, not trusted code).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import orjson

from redis_agent_sessions._redis.codec import _encodable
from redis_agent_sessions.errors import InvalidInputError

__all__ = [
    "MERGE_STRATEGIES",
    "REQUEST_KEYS",
    "MergeStrategy",
    "MetadataValue",
    "RequestOptions",
    "check_labels",
    "check_metadata",
    "check_revision_ttl",
    "check_strategy",
    "merged_metadata",
]

MergeStrategy = Literal["OVERWRITE", "MERGE", "REQUIRE_EXACT_MATCH"]
MERGE_STRATEGIES: tuple[MergeStrategy, ...] = ("OVERWRITE", "MERGE", "REQUIRE_EXACT_MATCH")
MetadataValue = str | bool | int | float
"""Memory Bank's metadata values are strings, numbers, booleans and timestamps; a
timestamp is given here as epoch seconds or an ISO string (JSON has no time type)."""

REQUEST_KEYS = ("revision_labels", "metadata", "metadata_merge_strategy", "revision_ttl")
"""The ``custom_metadata`` keys that configure a generation (not stored on entries)."""

MAX_PAIRS = 64
"""Labels, or metadata keys, one request may give."""
MAX_KEY_CHARS = 128
MAX_VALUE_CHARS = 1_024
MAX_REVISION_TTL = 100 * 365 * 86_400
"""A century: longer is a typo (Redis takes EXPIRE seconds up to about 2**63 / 1000)."""
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")
"""A protobuf Duration in JSON (``"3600s"``), as Memory Bank's ``revision_ttl`` is written."""


def _name(where: str, key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS or not _encodable(key):
        raise InvalidInputError(
            f"{where} keys must be non-empty strings of at most {MAX_KEY_CHARS} characters "
            f"(UTF-8 encodable): {key!r}"
        )
    return key


def _pairs(where: str, value: object) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{where} must be a mapping, got {type(value).__name__}")
    if len(value) > MAX_PAIRS:
        raise InvalidInputError(f"{where} has {len(value)} keys (most {MAX_PAIRS})")
    return value


def check_labels(value: object, where: str = "revision_labels") -> dict[str, str]:
    """Labels of a revision: non-empty strings to non-empty strings, bounded."""
    out = {}
    for key, label in _pairs(where, value).items():
        name = _name(where, key)
        if (
            not isinstance(label, str)
            or not label
            or len(label) > MAX_VALUE_CHARS
            or not _encodable(label)
        ):
            raise InvalidInputError(
                f"{where}[{name!r}] must be a non-empty string of at most {MAX_VALUE_CHARS} "
                f"characters (UTF-8 encodable): {label!r}"
            )
        out[name] = label
    return out


def check_metadata(value: object, where: str = "metadata") -> dict[str, MetadataValue]:
    """A fact's metadata: names to strings, finite numbers or booleans, bounded."""
    out: dict[str, MetadataValue] = {}
    for key, item in _pairs(where, value).items():
        name = _name(where, key)
        if name == "redis_agent_sessions":
            # Beside it in a search result's custom_metadata: what the library says of it.
            raise InvalidInputError(f"{where} may not use the key {name!r}: the library's own")
        if isinstance(item, str):
            if len(item) > MAX_VALUE_CHARS or not _encodable(item):
                raise InvalidInputError(
                    f"{where}[{name!r}] must be at most {MAX_VALUE_CHARS} characters "
                    f"(UTF-8 encodable): {item[:80]!r}"
                )
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidInputError(f"{where}[{name!r}] is {item}, which JSON cannot hold")
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) >= 2**53:
            # Readers that hold JSON numbers as doubles (cjson, JavaScript) would not read
            # a larger int back as given.
            raise InvalidInputError(f"{where}[{name!r}] is an int beyond 2**53: {item}")
        elif not isinstance(item, (str, bool, int, float)):
            raise InvalidInputError(
                f"{where}[{name!r}] must be a string, a number or a boolean, got "
                f"{type(item).__name__}"
            )
        out[name] = item
    return out


def check_strategy(value: object, where: str = "metadata_merge_strategy") -> MergeStrategy:
    """One of Memory Bank's merge strategies, by name (any case)."""
    name = value.upper() if isinstance(value, str) else value
    if name not in MERGE_STRATEGIES:
        raise InvalidInputError(f"{where} must be one of {', '.join(MERGE_STRATEGIES)}: {value!r}")
    return name


def check_revision_ttl(value: object, where: str = "revision_ttl") -> float:
    """Seconds, from a number, a ``timedelta`` or Memory Bank's ``"<seconds>s"``."""
    seconds: object = value
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str) and (found := _DURATION.match(value)):
        seconds = float(found[1])
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidInputError(
            f"{where} must be seconds (a number, a timedelta or '<n>s'), got {value!r}"
        )
    if not 0 < seconds <= MAX_REVISION_TTL:  # NaN fails too
        raise InvalidInputError(
            f"{where} must be positive and at most {MAX_REVISION_TTL} s: {value!r}"
        )
    return float(seconds)


@dataclass(frozen=True)
class RequestOptions:
    """A request's own options (None: not given, the service's ``FactSettings`` then)."""

    revision_labels: dict[str, str] | None = None
    metadata: dict[str, MetadataValue] | None = None
    metadata_merge_strategy: MergeStrategy | None = None
    revision_ttl: float | None = None

    @classmethod
    def of(cls, custom_metadata: Mapping[str, object] | None) -> RequestOptions:
        """The options ``custom_metadata`` gives (its other keys are not options), checked."""
        given = custom_metadata or {}
        if not isinstance(given, Mapping):
            raise InvalidInputError(
                f"custom_metadata must be a mapping, got {type(given).__name__}"
            )

        def get(key: str, check: Any) -> Any:
            value = given.get(key)
            return None if value is None else check(value, f"custom_metadata[{key!r}]")

        return cls(
            get("revision_labels", check_labels),
            get("metadata", check_metadata),
            get("metadata_merge_strategy", check_strategy),
            get("revision_ttl", check_revision_ttl),
        )

    def to_json(self) -> str:
        """What a job keeps of the request ('' when it gave none)."""
        given = {k: v for k, v in vars(self).items() if v is not None}
        return orjson.dumps(given).decode() if given else ""

    @classmethod
    def from_json(cls, raw: str) -> RequestOptions:
        """What ``to_json`` wrote, checked again; InvalidInputError when it is not."""
        if not raw:
            return cls()
        try:
            given = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise InvalidInputError(f"a job's options are not JSON: {exc}") from None
        if not isinstance(given, dict) or not set(given) <= set(REQUEST_KEYS):
            raise InvalidInputError(f"a job's options are not a request's: {raw[:200]!r}")
        return cls.of(given)


def merged_metadata(
    strategy: MergeStrategy,
    stored: Mapping[str, MetadataValue],
    given: Mapping[str, MetadataValue] | None,
) -> dict[str, MetadataValue]:
    """A changed fact's metadata: the request's, merged into what it had (``MERGE``: its
    keys win), or in its place (``OVERWRITE``; ``REQUIRE_EXACT_MATCH`` changes only facts
    whose metadata is the request's already). A request without metadata leaves it."""
    if given is None:
        return dict(stored)
    if strategy == "MERGE":
        return {**stored, **given}
    return dict(given)
