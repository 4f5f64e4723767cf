"""Hypothesis strategies for the data a pydantic model holds, derived from its core schema:
every field type the model has (nested models, lists, sets, dicts, unions, enums,
literals, bytes, datetimes, ``Any``) is drawn, so property tests cover the models as they
are, not a hand-picked sample.

``python_data`` draws input for ``model_validate`` (valid by construction, mostly);
``wild_json`` draws JSON objects shaped like the model's but with keys given by alias,
nulls, unknown keys and values of the wrong type mixed in.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

__all__ = ["json_values", "python_data", "wild_json"]

MAX_DEPTH = 3

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**64, max_value=2**80)  # beyond 64 bits: must stay exact
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def python_data(model: Any) -> st.SearchStrategy[dict[str, Any]]:
    """Input for ``model.model_validate`` (python mode)."""
    return _Drawer(model.__pydantic_core_schema__, wild=False).top()


def wild_json(model: Any) -> st.SearchStrategy[dict[str, Any]]:
    """A JSON object (as Python values) for ``model.model_validate_json``."""
    return _Drawer(model.__pydantic_core_schema__, wild=True).top()


class _Drawer:
    def __init__(self, schema: Mapping[str, Any], *, wild: bool) -> None:
        self.wild = wild
        self.definitions: dict[str, Mapping[str, Any]] = {}
        if schema["type"] == "definitions":
            self.definitions = {d["ref"]: d for d in schema["definitions"]}
            schema = schema["schema"]
        self.root = schema

    def top(self) -> st.SearchStrategy[dict[str, Any]]:
        return self._typed(self.root, 0)

    def draw(self, schema: Mapping[str, Any], depth: int) -> st.SearchStrategy[Any]:
        typed = self._typed(schema, depth)
        if self.wild:
            # Now and then anything at all: the decode must refuse what validation refuses.
            return st.one_of(typed, typed, typed, typed, json_values)
        return typed

    def _typed(self, schema: Mapping[str, Any], depth: int) -> st.SearchStrategy[Any]:
        kind = schema["type"]
        wild = self.wild
        if kind == "definition-ref":
            target = self.definitions[schema["schema_ref"]]
            return st.deferred(lambda: self.draw(target, depth))
        if kind in ("function-before", "function-after", "function-wrap", "default"):
            return self.draw(schema["schema"], depth)
        if kind == "json-or-python":
            return self.draw(schema["json_schema" if wild else "python_schema"], depth)
        if kind == "lax-or-strict":
            return self.draw(schema["lax_schema"], depth)
        if kind == "nullable":
            return st.none() | self.draw(schema["schema"], depth)
        if kind == "model":
            return self._model(schema, depth)
        if kind == "str":
            return st.text(max_size=16)
        if kind == "int":
            low, high = schema.get("ge", schema.get("gt")), schema.get("le", schema.get("lt"))
            if low is None and high is None:
                return st.integers(min_value=-(2**70), max_value=2**70)
            return st.integers(min_value=low, max_value=high)
        if kind == "float":
            return st.floats(allow_nan=False, allow_infinity=False) | st.integers(-1000, 1000)
        if kind == "bool":
            return st.booleans()
        if kind == "none":
            return st.none()
        if kind == "any":
            return json_values
        if kind == "bytes":
            raw = st.binary(max_size=12)
            if not wild:
                return raw
            return (
                raw.map(lambda b: base64.urlsafe_b64encode(b).decode())
                | raw.map(lambda b: base64.b64encode(b).decode())
                | st.text(max_size=8)
            )
        if kind == "datetime":
            moments = st.datetimes(timezones=st.none() | st.just(dt.timezone.utc))
            return moments.map(dt.datetime.isoformat) if wild else moments
        if kind == "enum":
            members = list(schema["members"])
            return st.sampled_from([m.value for m in members] if wild else members)
        if kind == "literal":
            return st.sampled_from(list(schema["expected"]))
        if kind in ("list", "set"):
            items = self.draw(schema.get("items_schema", {"type": "any"}), depth + 1)
            if kind == "set":
                items = self._hashable(schema.get("items_schema", {"type": "any"}), depth + 1)
            maximum = 0 if depth >= MAX_DEPTH else 3
            drawn = st.lists(items, max_size=maximum)
            return drawn if wild or kind == "list" else drawn.map(set)
        if kind == "dict":
            values = self.draw(schema.get("values_schema", {"type": "any"}), depth + 1)
            maximum = 0 if depth >= MAX_DEPTH else 3
            return st.dictionaries(st.text(max_size=8), values, max_size=maximum)
        if kind == "union":
            choices = [c[0] if isinstance(c, tuple) else c for c in schema["choices"]]
            return st.one_of([self.draw(c, depth) for c in choices])
        raise NotImplementedError(f"no strategy for core schema type {kind!r}")

    def _hashable(self, schema: Mapping[str, Any], depth: int) -> st.SearchStrategy[Any]:
        if schema["type"] in ("str", "int", "bool", "float"):
            return self._typed(schema, depth)
        return st.text(max_size=8)

    def _model(self, schema: Mapping[str, Any], depth: int) -> st.SearchStrategy[Any]:
        inner = schema["schema"]
        while inner["type"] != "model-fields":
            inner = inner["schema"]
        required: dict[str, st.SearchStrategy[Any]] = {}
        optional: dict[str, st.SearchStrategy[Any]] = {}
        for name, field in inner["fields"].items():
            field_schema = field["schema"]
            has_default = field_schema["type"] == "default"
            drawn = self.draw(field_schema, depth + 1)
            if not has_default:
                required[name] = drawn
            elif depth < MAX_DEPTH or not _nests(field_schema):
                optional[name] = drawn
            alias = field.get("validation_alias")
            if self.wild and isinstance(alias, str) and alias != name and has_default:
                optional[alias] = drawn  # by alias (or by both), as a hand edit might
        if self.wild:
            optional["unknown_field_x"] = json_values
        return st.fixed_dictionaries(required, optional=optional)


def _nests(schema: Mapping[str, Any]) -> bool:
    """Whether a field's value may hold a model (drawn only near the top)."""
    kind = schema["type"]
    if kind in ("model", "definition-ref"):
        return True
    return any(
        isinstance(value, Mapping) and "type" in value and _nests(value)
        for key, value in schema.items()
        if key in ("schema", "items_schema", "values_schema")
    ) or (
        kind == "union"
        and any(_nests(c[0] if isinstance(c, tuple) else c) for c in schema["choices"])
    )
