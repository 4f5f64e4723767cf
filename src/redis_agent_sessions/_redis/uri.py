"""Service settings carried in a Redis URL's query, as ADK's ``--session_service_uri`` passes them.

``redis://host:6379/0?key_prefix=prod&ttl_seconds=86400&cluster=true`` is a redis-py URL
plus this library's settings. Ours are taken out of the query and validated; the rest must be
parameters redis-py itself takes for that URL (``._params``), converted to their types
here, so a typo or a bad value fails with an InvalidInputError naming it instead of as a
TypeError deep inside a connection pool.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlsplit

from pydantic import ValidationError

from redis_agent_sessions._redis import params as _params
from redis_agent_sessions._redis.redact import redact_url
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import InvalidInputError

__all__ = ["ServiceURL", "parse_service_url"]

SCHEMES = ("redis", "rediss", "unix")
_CONFIG_FIELDS = tuple(SessionServiceConfig.model_fields)
_MEMORY = (
    "memory_backend",
    "embedder",
    "embedder_dimensions",
    "vector_index",
    "min_similarity",
    "context_turns",
    "generator",
    "fact_topics",
    "fact_ttl_seconds",
    "keep_events",
    "disable_consolidation",
    "fact_mode",
    "fact_trigger_events",
    "fact_trigger_idle_seconds",
    "fact_max_backlog",
    "fact_revision_ttl",
    "fact_revision_labels",
    "fact_metadata",
    "fact_metadata_merge_strategy",
)
"""The memory service's own settings (read by it; the session service ignores them, so one
URL may serve both)."""
_OURS = (*_CONFIG_FIELDS, *_MEMORY)
_BOOLEANS = _params.BOOLEANS


@dataclass(frozen=True)
class ServiceURL:
    """A URL split into what redis-py connects with and what the services are configured by."""

    redis_url: str
    """The URL without its query."""
    settings: dict[str, Any] = field(default_factory=dict)
    """SessionServiceConfig fields given in the query (validated together by ``config``)."""
    memory_backend: str | None = None
    redis_params: dict[str, str] = field(default_factory=dict)
    """redis-py's parameters given in the query, as written (see ``client_kwargs``)."""
    memory: dict[str, str] = field(default_factory=dict)
    """The memory settings after ``memory_backend``, as written (the memory service
    converts them)."""

    @property
    def scheme(self) -> str:
        return self.redis_url.split(":", 1)[0]

    def client_kwargs(self, cluster: bool | None) -> dict[str, Any]:
        """redis-py's parameters, converted, for a cluster client or a single node's (None:
        either); InvalidInputError for one that client does not take or a bad value."""
        return {
            name: _params.convert(self.scheme, cluster, name, value)
            for name, value in self.redis_params.items()
        }

    @property
    def cluster(self) -> bool:
        return bool(self.settings.get("cluster"))

    def config(self, base: SessionServiceConfig | None) -> SessionServiceConfig:
        """The config: ``base`` (or the defaults) with the URL's settings; both at once only
        when they agree, so no setting is silently dropped."""
        if base is None:
            return SessionServiceConfig(**self.settings)
        clashing = sorted(k for k, v in self.settings.items() if getattr(base, k) != v)
        if clashing:
            raise InvalidInputError(
                f"the URL sets {', '.join(clashing)} differently from the config passed "
                "with it; give each setting in one place"
            )
        return base


def parse_service_url(url: str) -> ServiceURL:
    """Split ``url``; InvalidInputError for another scheme or an unknown query parameter."""
    if not isinstance(url, str):
        raise InvalidInputError(f"a Redis URL must be a string, got {type(url).__name__}")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "Invalid IPv6 URL": a bracket that is never closed
        raise InvalidInputError(f"not a URL ({exc}): {redact_url(url)}") from None
    if parts.scheme not in SCHEMES:
        raise InvalidInputError(
            f"not a Redis URL (scheme must be one of {', '.join(SCHEMES)}): {redact_url(url)}"
        )
    path_db = _path_db(url, parts)
    settings: dict[str, Any] = {}
    memory_backend: str | None = None
    kept: dict[str, str] = {}
    memory: dict[str, str] = {}
    redis_py = _params.accepted(parts.scheme, False) | _params.accepted(parts.scheme, True)
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if (
            name in settings
            or name in kept
            or name in memory
            or (name == "memory_backend" and memory_backend is not None)
        ):
            raise InvalidInputError(f"URL parameter {name!r} is given twice")
        if name == "memory_backend":
            memory_backend = value
        elif name in _MEMORY:
            memory[name] = value
        elif name == "cluster":
            if value.lower() not in _BOOLEANS:
                raise InvalidInputError(f"URL parameter cluster must be true or false: {value!r}")
            settings[name] = _BOOLEANS[value.lower()]
        elif name in _CONFIG_FIELDS:
            settings[name] = value
        elif name in redis_py:
            if value:  # as redis-py reads a URL: an empty value is no value
                kept[name] = value
        else:
            raise InvalidInputError(_unknown(name, redis_py))
    if memory_backend not in (None, "auto", "search", "plain"):
        raise InvalidInputError(
            f"URL parameter memory_backend must be auto, search or plain: {memory_backend!r}"
        )
    try:
        parsed = SessionServiceConfig(**settings)
    except ValidationError as exc:
        raise InvalidInputError(f"bad service settings in the URL: {problems(exc)}") from None
    if (
        path_db is not None
        and "db" in kept
        and _params.convert("redis", None, "db", kept["db"]) != path_db
    ):
        raise InvalidInputError(
            f"the URL names database {path_db} in its path and db={kept['db']} in its query; "
            "give it in one place"
        )
    validated = {name: getattr(parsed, name) for name in settings}
    # Cut by hand: urlunsplit would drop the empty authority of "unix:///path".
    redis_url = url.split("?", 1)[0].split("#", 1)[0]
    service_url = ServiceURL(redis_url, validated, memory_backend, kept, memory)
    # Converted now, so a bad value fails at once; the topology, which may be decided by an
    # argument, is checked when the client is made.
    service_url.client_kwargs(None)
    return service_url


def _unknown(name: str, redis_py: Iterable[str]) -> str:
    """Why ``name`` is refused: the library's settings, a near miss of anyone's, and where
    redis-py's parameters are described."""
    near = difflib.get_close_matches(name, [*_OURS, *redis_py], n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    return (
        f"unknown URL parameter {name!r}{hint}; this library's settings are "
        f"{', '.join(_OURS)}, and redis-py's connection parameters are in {_params.DOCS}"
    )


def problems(exc: ValidationError, *, named: bool = True) -> str:
    """What is wrong with each setting pydantic refused (``named``: after the setting's
    name), without pydantic's ``Value error, ``."""
    return "; ".join(
        (f"{'.'.join(map(str, e['loc'])) or 'settings'}: " if named else "")
        + e["msg"].removeprefix("Value error, ")
        for e in exc.errors()
    )


_DB_PATH = re.compile(r"/?([0-9]*)")


def _path_db(url: str, parts: SplitResult) -> int | None:
    """The database the path of a ``redis://`` or ``rediss://`` URL names (None for none);
    InvalidInputError for a path that is no database number or a port that is no port,
    which redis-py would ignore (``/abc`` ran on database 0) or misreport."""
    # An "@" past the authority is where a password's unencoded "/", "?" or "#" cut it short.
    cut_short = "@" not in parts.netloc and "@" in parts.path + parts.fragment
    hint = " (a password's '/', '?', '#' or '@' must be percent-encoded)"
    try:
        _ = parts.port  # a property that parses the port, and raises for a bad one
    except ValueError:
        # Not the ValueError's text: it quotes the port, where a password with an unencoded
        # "/" may have left part of itself.
        raise InvalidInputError(
            "the port must be a number from 0 to 65535"
            f"{hint if cut_short or '@' in parts.query else ''}: {redact_url(url)}"
        ) from None
    if parts.scheme == "unix":
        return None  # the path is the socket's; the database is the query's db
    found = _DB_PATH.fullmatch(parts.path)
    if found is None:
        raise InvalidInputError(
            "the URL's path must be a database number, as in redis://host:6379/0"
            f"{hint if cut_short else ''}: "
            f"{redact_url(url)}"
        )
    return int(found[1]) if found[1] else None
