"""Memory settings given in a service URL, for ADK's servers, whose ``services.yaml`` and
``--memory_service_uri`` can pass nothing else: ``?embedder=google:text-embedding-005``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from redis_agent_sessions._redis.lifecycle import AnyRedis, open_memory_url
from redis_agent_sessions._redis.params import BOOLEANS
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.memory._consolidate import FactSettings
from redis_agent_sessions.memory._context import DEFAULT_CONTEXT_TURNS
from redis_agent_sessions.memory._embedders import Embedder, check_embedder
from redis_agent_sessions.memory._generators import MemoryGenerator

__all__ = [
    "OpenedURL",
    "SemanticSettings",
    "context_setting",
    "embedder_from_spec",
    "open_memory_service_url",
    "semantic_settings",
]

T = TypeVar("T")

SemanticSettings = tuple[Embedder | None, Any, float]
"""(embedder, vector_index, min_similarity)."""


def embedder_from_spec(spec: str, dimensions: int | None = None) -> Embedder:
    """The embedder a spec names: ``google:<model>`` (GoogleEmbedder, the ``[adk]`` extra)
    or ``import:<module>:<name>``, an Embedder object or a callable returning one when
    called without arguments (where a user plugs a model of their own)."""
    kind, _, rest = spec.partition(":")
    if kind == "google" and rest:
        from redis_agent_sessions.memory._google import GoogleEmbedder  # only when asked

        return GoogleEmbedder(rest, dimensions=dimensions)
    if kind == "import" and rest.count(":") == 1:
        embedder = check_embedder(_imported("embedder", spec, rest, Embedder))
        if dimensions is not None and embedder.dimensions != dimensions:
            raise InvalidInputError(
                f"embedder {spec!r} makes {embedder.dimensions}-dimensional vectors, "
                f"not embedder_dimensions={dimensions}"
            )
        return embedder
    raise InvalidInputError(
        f"embedder must be 'google:<model>' or 'import:<module>:<name>', got {spec!r}"
    )


def _imported(what: str, spec: str, path: str, kind: type) -> Any:
    """The object ``<module>:<name>`` names: one of ``kind``, or what a callable returns
    when called without arguments (where a user plugs a model of their own)."""
    module_name, name = path.split(":")
    try:
        found: Any = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise InvalidInputError(f"{what} {spec!r} cannot be imported: {exc}") from exc
    return found() if not isinstance(found, kind) and callable(found) else found


def generator_from_spec(spec: str) -> MemoryGenerator:
    """The generator a spec names: ``adk:<model>`` (``ModelGenerator`` on an ADK model by
    name, the ``[adk]`` extra) or ``import:<module>:<name>``, a generator or a callable
    returning one when called without arguments."""
    kind, _, rest = spec.partition(":")
    if kind == "adk" and rest:
        try:
            from redis_agent_sessions.memory._model_generator import ModelGenerator

            return ModelGenerator(rest)
        except ImportError as exc:  # google-adk is the [adk] extra
            raise InvalidInputError(f"generator {spec!r} needs the [adk] extra: {exc}") from exc
    if kind == "import" and rest.count(":") == 1:
        found = _imported("generator", spec, rest, MemoryGenerator)
        if not isinstance(found, MemoryGenerator):
            raise InvalidInputError(f"generator {spec!r} has no async generate(request)")
        generator: MemoryGenerator = found
        return generator
    raise InvalidInputError(
        f"generator must be 'adk:<model>' or 'import:<module>:<name>', got {spec!r}"
    )


def learning_settings(
    params: dict[str, str], generator: MemoryGenerator | None, facts: FactSettings | None
) -> tuple[MemoryGenerator | None, FactSettings | None]:
    """The arguments, completed by the URL's ``generator``, ``fact_topics``,
    ``fact_ttl_seconds``, ``keep_events``, ``disable_consolidation``, the revisions' and
    metadata's ``fact_revision_ttl``, ``fact_revision_labels``, ``fact_metadata`` and
    ``fact_metadata_merge_strategy``, and background generation's ``fact_mode``,
    ``fact_trigger_events``, ``fact_trigger_idle_seconds`` and ``fact_max_backlog``; a
    setting given in both places is refused."""
    if "generator" in params:
        if generator is not None:
            raise InvalidInputError(
                "the URL names a generator and generator= was passed with it; give it in one place"
            )
        generator = generator_from_spec(params["generator"])
    named = {"fact_topics", "fact_ttl_seconds", "keep_events", "disable_consolidation"}
    named = (named | set(_BACKGROUND) | set(_REVISIONS)) & params.keys()
    if not named:
        return generator, facts
    if facts is not None:
        raise InvalidInputError(
            f"the URL sets {', '.join(sorted(named))} and facts= was passed with it; give "
            "the fact settings in one place"
        )
    if generator is None:
        raise InvalidInputError(f"URL parameters {', '.join(sorted(named))} need a generator")
    topics = None
    if "fact_topics" in params:
        topics = [t.strip() for t in params["fact_topics"].split(",") if t.strip()]
    keep = params.get("keep_events", "false").lower()
    if keep not in BOOLEANS:
        raise InvalidInputError(f"URL parameter keep_events must be true or false: {keep!r}")
    ttl = _number(params, "fact_ttl_seconds", int, "an int")
    if ttl is not None and ttl <= 0:
        raise InvalidInputError(f"URL parameter fact_ttl_seconds must be positive: {ttl}")
    add_only = params.get("disable_consolidation", "false").lower()
    if add_only not in BOOLEANS:
        raise InvalidInputError(
            f"URL parameter disable_consolidation must be true or false: {add_only!r}"
        )
    more: dict[str, Any] = {
        "disable_consolidation": BOOLEANS[add_only],
        "mode": params.get("fact_mode", "inline"),
        "trigger_events": _number(params, "fact_trigger_events", int, "an int"),
        "trigger_idle_seconds": _number(params, "fact_trigger_idle_seconds", float, "a number"),
    }
    if "fact_max_backlog" in params:
        more["max_backlog"] = _number(params, "fact_max_backlog", int, "an int")
    more["revision_ttl"] = _number(params, "fact_revision_ttl", float, "a number")
    more["revision_labels"] = _pairs(params, "fact_revision_labels")
    more["metadata"] = _pairs(params, "fact_metadata")
    if "fact_metadata_merge_strategy" in params:
        more["metadata_merge_strategy"] = params["fact_metadata_merge_strategy"]
    return generator, FactSettings(
        topics=topics, ttl_seconds=ttl, keep_events=BOOLEANS[keep], **more
    )


_BACKGROUND = ("fact_mode", "fact_trigger_events", "fact_trigger_idle_seconds", "fact_max_backlog")
"""Background generation's URL parameters (FactSettings without the ``fact_``)."""
_REVISIONS = (
    "fact_revision_ttl",
    "fact_revision_labels",
    "fact_metadata",
    "fact_metadata_merge_strategy",
)
"""The revisions' and metadata's URL parameters (FactSettings without the ``fact_``)."""


def _pairs(params: dict[str, str], name: str) -> dict[str, str] | None:
    """The URL's ``name`` as ``key:value,key:value`` (a value may hold ``:``, not ``,``),
    None when absent; FactSettings checks the keys and values."""
    if name not in params:
        return None
    out = {}
    for item in params[name].split(","):
        key, sep, value = item.strip().partition(":")
        if not sep:
            raise InvalidInputError(
                f"URL parameter {name} must be key:value pairs, comma-separated: {item!r}"
            )
        out[key] = value
    return out


def _number(params: dict[str, str], name: str, kind: Callable[[str], T], what: str) -> T | None:
    """The URL's ``name`` converted by ``kind``, None when absent."""
    if name not in params:
        return None
    try:
        return kind(params[name])
    except ValueError:
        raise InvalidInputError(f"URL parameter {name} must be {what}: {params[name]!r}") from None


def semantic_settings(
    params: dict[str, str],
    embedder: Embedder | None,
    vector_index: Any,
    min_similarity: float,
) -> SemanticSettings:
    """The arguments, completed by the URL's ``embedder``, ``embedder_dimensions``,
    ``vector_index`` and ``min_similarity``; a setting given in both places must agree."""
    dimensions = _number(params, "embedder_dimensions", int, "an int")
    if "embedder" in params:
        if embedder is not None:
            raise InvalidInputError(
                "the URL names an embedder and embedder= was passed with it; give it in one place"
            )
        embedder = embedder_from_spec(params["embedder"], dimensions)
    elif dimensions is not None:
        raise InvalidInputError("URL parameter embedder_dimensions needs embedder= in the URL")
    if "vector_index" in params:
        wanted = params["vector_index"].upper()
        if vector_index not in ("HNSW", wanted):  # HNSW: the argument's default
            raise InvalidInputError(
                f"the URL asks for vector_index={wanted} but vector_index={vector_index!r} was "
                "passed with it; give it in one place"
            )
        vector_index = wanted
    value = _number(params, "min_similarity", float, "a number")
    if value is not None:
        if min_similarity not in (0.0, value):
            raise InvalidInputError(
                f"the URL asks for min_similarity={value} but min_similarity={min_similarity} "
                "was passed with it; give it in one place"
            )
        min_similarity = value
    if embedder is None and ("vector_index" in params or "min_similarity" in params):
        raise InvalidInputError(
            "URL parameters vector_index and min_similarity need an embedder (embedder= in "
            "the URL or the argument)"
        )
    return embedder, vector_index, min_similarity


def context_setting(params: dict[str, str], context_turns: int) -> int:
    """The argument, or the URL's ``context_turns`` (an int; checked by the service); a
    setting given in both places must agree."""
    value = _number(params, "context_turns", int, "an int")
    if value is None:
        return context_turns
    if context_turns not in (DEFAULT_CONTEXT_TURNS, value):
        raise InvalidInputError(
            f"the URL asks for context_turns={value} but context_turns={context_turns} was "
            "passed with it; give it in one place"
        )
    return value


class OpenedURL(NamedTuple):
    """A memory service's client and constructor settings from its URL (``from_url`` of the
    core service, ``uri=`` of the ADK one)."""

    client: AnyRedis
    settings: dict[str, Any]
    """config, backend, embedder, vector_index, min_similarity, generator, facts,
    context_turns: the constructor's keywords."""
    owns_embedder: bool
    """The URL named the embedder: the service made it, and closes it."""


def open_memory_service_url(
    url: str,
    *,
    config: SessionServiceConfig | None,
    backend: Any,
    cluster: bool,
    embedder: Embedder | None,
    vector_index: Any,
    min_similarity: float,
    generator: MemoryGenerator | None = None,
    facts: FactSettings | None = None,
    context_turns: int = DEFAULT_CONTEXT_TURNS,
    **redis_kwargs: Any,
) -> OpenedURL:
    client, config, backend, params = open_memory_url(url, config, backend, cluster, **redis_kwargs)
    embedder, vector_index, min_similarity = semantic_settings(
        params, embedder, vector_index, min_similarity
    )
    generator, facts = learning_settings(params, generator, facts)
    settings = {
        "generator": generator,
        "facts": facts,
        "config": config,
        "backend": backend,
        "embedder": embedder,
        "vector_index": vector_index,
        "min_similarity": min_similarity,
        "context_turns": context_setting(params, context_turns),
    }
    return OpenedURL(client, settings, "embedder" in params)
