"""Learned memories: what a generator is given and what it may answer.

A generator reads a session's new events (and the user's stored facts most related to them)
and answers with operations: add a fact, update one (by id), delete one. It is pluggable like
the embedder: ``CallableGenerator`` wraps any function, and the ``[adk]`` extra's
``ModelGenerator`` asks any ADK model. Whatever it answers is checked here before anything
is written: a generator is a model's output, so it is treated as untrusted input.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from redis_agent_sessions.errors import GenerationError, InvalidInputError
from redis_agent_sessions.memory._request_options import MetadataValue
from redis_agent_sessions.models import Event

__all__ = [
    "CallableGenerator",
    "Fact",
    "FactRevision",
    "FactSource",
    "GenerationRequest",
    "MemoryGenerator",
    "MemoryOperation",
    "checked_operations",
]

MAX_FACT_CHARS = 2_000
"""The longest fact kept (characters): a fact is a sentence or two, not a transcript."""
MAX_OPERATIONS = 100
"""The most operations one generation may ask for."""
MAX_TOPICS = 16


class FactSource(BaseModel):
    """Where a fact (a revision of it) comes from: a session and the events it read."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    event_ids: list[str] = Field(default_factory=list)


class FactRevision(BaseModel):
    """What a fact said before a change, and where that came from."""

    model_config = ConfigDict(frozen=True)

    revision: int
    text: str
    topics: list[str] = Field(default_factory=list)
    updated: float
    """When this revision was written (epoch seconds)."""
    sources: list[FactSource] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    """The labels of the request that wrote it (Memory Bank's revision ``labels``)."""
    expires: float | None = None
    """Epoch seconds after which it leaves the history (the ``revision_ttl`` of the request
    that wrote it); None = kept while the history has room."""


class Fact(BaseModel):
    """One learned memory of a user, as stored."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    topics: list[str] = Field(default_factory=list)
    revision: int
    """1 when added; each update adds one (a generator's update names the revision seen)."""
    created: float
    updated: float
    expires: float | None = None
    """Epoch seconds after which the fact is forgotten; None = kept until deleted."""
    sources: list[FactSource] = Field(default_factory=list)
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)
    """Set by the requests that wrote it, by their merge strategy (Memory Bank's memory
    ``metadata``); search results carry it in ``custom_metadata``."""
    revision_labels: dict[str, str] = Field(default_factory=dict)
    """The labels of its current revision (the history keeps those of the earlier ones)."""
    revision_expires: float | None = None
    """When its current revision, once superseded, leaves the history (None: never)."""


class GenerationRequest(BaseModel):
    """What a generator is given: the events it has not seen, in order, and the user's
    stored facts most related to them (the only ones it may update or delete)."""

    model_config = ConfigDict(frozen=True)

    app_name: str
    user_id: str
    session_id: str
    events: list[Event]
    facts: list[Fact]
    topics: list[str] | None = None
    """The topics to keep facts about (None = whatever the generator keeps)."""


class MemoryOperation(BaseModel):
    """One change a generator asks for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: Literal["add", "update", "delete"]
    fact: str | None = None
    """The fact's text (``add`` and ``update``)."""
    fact_id: str | None = None
    """The fact changed (``update`` and ``delete``): one of the request's facts."""
    topics: list[str] = Field(default_factory=list)
    ttl_seconds: int | None = Field(default=None, gt=0)
    """Forget the fact this long after this change (None = the service's setting)."""
    source_event_ids: list[str] | None = None
    """The request's events this comes from (None = all of them)."""


@runtime_checkable
class MemoryGenerator(Protocol):
    """Turns new events into operations on a user's facts (see [`GenerationRequest`][]).

    It may be called again with the same events when another worker changed a fact it
    touched meanwhile, so it should not keep state between calls."""

    async def generate(self, request: GenerationRequest) -> Sequence[MemoryOperation]: ...


Operations = Sequence["MemoryOperation | Mapping[str, Any]"]
GeneratorFunction = Callable[[GenerationRequest], "Operations | Awaitable[Operations]"]


class CallableGenerator:
    """A generator from a function (sync or async) taking a [`GenerationRequest`][] and
    returning operations (or mappings of their fields): for custom rules, or a model this
    library has no adapter for."""

    def __init__(self, fn: GeneratorFunction, *, name: str = "callable") -> None:
        if not callable(fn):
            raise InvalidInputError(f"CallableGenerator needs a callable, got {type(fn).__name__}")
        self._fn = fn
        self.name = name

    async def generate(self, request: GenerationRequest) -> Sequence[MemoryOperation]:
        result = self._fn(request)
        if inspect.isawaitable(result):
            result = await result
        return result  # type: ignore[return-value]  # checked by checked_operations


def checked_operations(
    answer: object, request: GenerationRequest, allowed_topics: Sequence[str] | None
) -> list[MemoryOperation]:
    """The generator's ``answer`` as operations that may be applied, or GenerationError."""
    if isinstance(answer, (str, bytes)) or not isinstance(answer, Sequence):
        raise GenerationError(f"the generator returned {type(answer).__name__}, not a list")
    if len(answer) > MAX_OPERATIONS:
        raise GenerationError(
            f"the generator asked for {len(answer)} operations (most {MAX_OPERATIONS})"
        )
    shown = {fact.id for fact in request.facts}
    events = {event.id for event in request.events}
    touched: set[str] = set()
    out = []
    for i, item in enumerate(answer):
        op = _operation(i, item)
        if op.action == "add":
            if op.fact_id is not None:
                raise GenerationError(f"operation {i}: an add names no fact_id")
        elif op.fact_id is None or op.fact_id not in shown:
            # Never a fact it was not shown: another user's id, an invented one, or one it
            # saw no revision of (the compare-and-set needs the revision it saw).
            raise GenerationError(
                f"operation {i}: {op.action} of a fact it was not shown: {op.fact_id!r}"
            )
        elif op.fact_id in touched:
            raise GenerationError(f"operation {i}: fact {op.fact_id!r} is changed twice")
        else:
            touched.add(op.fact_id)
        if op.action != "delete":
            text = (op.fact or "").strip()
            if not text:
                raise GenerationError(f"operation {i}: {op.action} without a fact")
            if not text.isprintable() and any(0xD800 <= ord(c) <= 0xDFFF for c in text):
                raise GenerationError(f"operation {i}: a fact with a lone surrogate")
            if len(text) > MAX_FACT_CHARS:
                raise GenerationError(
                    f"operation {i}: a fact of {len(text)} characters (most {MAX_FACT_CHARS})"
                )
            op = op.model_copy(update={"fact": text})
        if len(op.topics) > MAX_TOPICS or any(
            not isinstance(t, str) or not t.strip() or len(t) > 100 for t in op.topics
        ):
            raise GenerationError(f"operation {i}: topics must be up to {MAX_TOPICS} short names")
        if allowed_topics is not None and not set(op.topics) <= set(allowed_topics):
            raise GenerationError(
                f"operation {i}: topics {sorted(set(op.topics) - set(allowed_topics))} are not "
                f"among the allowed {sorted(allowed_topics)}"
            )
        if op.source_event_ids is not None and not set(op.source_event_ids) <= events:
            raise GenerationError(f"operation {i}: source_event_ids name events it was not given")
        out.append(op)
    return out


def _operation(i: int, item: object) -> MemoryOperation:
    if isinstance(item, MemoryOperation):
        return item
    if not isinstance(item, Mapping):
        raise GenerationError(f"operation {i} is {type(item).__name__}, not an operation")
    try:
        return MemoryOperation.model_validate(dict(item))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise GenerationError(f"operation {i} is not valid: {where}: {first['msg']}") from None
