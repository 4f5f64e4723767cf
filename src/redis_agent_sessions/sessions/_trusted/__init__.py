"""Trusted decode: stored events rebuilt without re-validating them.

Every event was validated on its way in, by the same model classes; validating it again on
every read is most of a read. A ``Plan`` is built once per model class from pydantic's
own core schema (the schema its validator was compiled from) and rebuilds a model from the
parsed JSON by setting what validation would set: ``__dict__`` (defaults and default
factories included, in field order), the fields set, the extras and the private
attributes, with nested models, lists, sets, dicts, unions, enums and literals converted
the way pydantic converts them. Leaf types whose conversion is pydantic's own business
(bytes in base64, datetimes, decimals, ...) are handed to a validator of that leaf alone.

A plan never guesses. Any value it cannot vouch for (a type it does not know, a value of
another JSON type than the field's, a key it does not expect, a validator it may not skip)
raises ``Untrusted``, and the caller validates that event as before; so does an event
written under another ``Plan.fingerprint`` (other model versions), or with none.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pydantic_core
from pydantic import BaseModel

from redis_agent_sessions.sessions._trusted._builder import _Builder
from redis_agent_sessions.sessions._trusted._leaves import Hooks, Untrusted, untrusted

__all__ = ["Hooks", "Plan", "Untrusted"]


class Plan:
    """How to rebuild one model class from its stored JSON without validating it."""

    def __init__(self, model: type[BaseModel], hooks: Hooks | None = None) -> None:
        builder = _Builder(model.__pydantic_core_schema__, hooks or Hooks())
        self._build, described = builder.convert(builder.root, {})
        # Definitions by model name: their refs carry ids that differ in every process.
        shared = sorted(f"{builder.described[ref]}={text}" for ref, text in builder.refs.items())
        parts = [described, *shared]
        self.description = "\n".join(parts)
        """What the plan relies on, one line per model: field names, aliases, types,
        defaults and validators (the fingerprint is its digest)."""
        self.fingerprint = hashlib.blake2b(self.description.encode(), digest_size=6).hexdigest()
        """12 hex digits naming the model versions: stored with each event at append."""
        self.trusting = self._build is not untrusted
        self._from_json = pydantic_core.from_json

    def decode(self, raw: bytes | str) -> Any:
        """The model ``raw`` holds, as validation would build it; Untrusted if the plan
        cannot vouch for it (the caller then validates)."""
        try:
            data = self._from_json(raw)
        except ValueError as exc:
            raise Untrusted from exc
        try:
            return self._build(data)
        except Untrusted:
            raise
        except Exception as exc:  # a validator the plan ran refused: validation reports it
            raise Untrusted from exc
