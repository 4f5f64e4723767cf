"""What a plan is made of: the refusal, the hooks, and converters of JSON leaves."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Convert = Callable[[Any], Any]


class Untrusted(Exception):
    """The plan cannot vouch for a value: validate the event instead."""


@dataclass(frozen=True)
class Hooks:
    """What a model family's maintainers know and the schema cannot say.

    ``skip_before`` names model ``mode='before'`` validators (by their function) that
    change nothing for a JSON object without any of the given keys (an empty set: for
    every JSON object); given one of them, the validator runs, as validation runs it.
    ``plain_inits`` names classes whose custom ``__init__`` is the same as validation when
    no field is given as null.
    """

    skip_before: Mapping[Callable[..., Any], frozenset[str]] = field(default_factory=dict)
    plain_inits: frozenset[type] = frozenset()


# Model config keys whose effect a plan reproduces (or that do not affect validation of
# JSON into a new instance). Any other key makes the plan validate that model.
CONFIG_KEYS = frozenset(
    {
        "title",
        "extra_fields_behavior",
        "ser_json_bytes",
        "val_json_bytes",
        "ser_json_timedelta",
        "ser_json_temporal",
        "ser_json_inf_nan",
        "validate_by_alias",
        "validate_by_name",
        "populate_by_name",
        "from_attributes",
        "loc_by_alias",
        "serialize_by_alias",
        "revalidate_instances",
        "hide_input_in_errors",
        "validation_error_cause",
        "cache_strings",
    }
)
# Schema keys that do not change what validation of JSON returns.
NEUTRAL = frozenset({"type", "ref", "metadata", "serialization", "strict"})
DELEGATED = frozenset(
    {"bytes", "datetime", "date", "time", "timedelta", "decimal", "uuid", "url", "multi-host-url"}
)
JSON_KIND = {
    str: "str", int: "num", float: "num", bool: "bool", type(None): "null", list: "list",
    dict: "dict",
}  # fmt: skip
KINDS = {
    "str": {"str"}, "int": {"num"}, "float": {"num"}, "bool": {"bool"}, "none": {"null"},
    "list": {"list"}, "set": {"list"}, "dict": {"dict"}, "model": {"dict"}, "enum": set(),
    "literal": set(), "bytes": {"str"}, "datetime": {"str", "num"}, "date": {"str", "num"},
    "time": {"str", "num"}, "timedelta": {"str", "num"}, "decimal": {"str", "num"},
    "uuid": {"str"}, "url": {"str"}, "multi-host-url": {"str"},
}  # fmt: skip

ANY: frozenset[type] = frozenset({str, int, float, bool, type(None), list, dict})
LEAF_TYPES: dict[str, type] = {"str": str, "bool": bool, "int": int}


def untrusted(value: Any) -> Any:
    raise Untrusted


def identity(value: Any) -> Any:
    return value


def qualified_name(obj: Any) -> str:
    obj = getattr(obj, "__func__", obj)
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def exact(kind: type) -> Convert:
    def exact(value: Any) -> Any:
        if type(value) is not kind:
            raise Untrusted
        return value

    return exact


def to_float(value: Any) -> Any:
    kind = type(value)
    if kind is float:
        return value
    if kind is int:
        try:
            return float(value)
        except OverflowError as exc:
            raise Untrusted from exc
    raise Untrusted


def utf8_bytes(value: Any) -> Any:
    if type(value) is not str:
        raise Untrusted
    try:
        return value.encode()
    except UnicodeEncodeError as exc:
        raise Untrusted from exc


def accepts(schema: Mapping[str, Any]) -> frozenset[type]:
    """JSON value types a field takes unchanged, checked inline instead of by a call."""
    kind = schema["type"]
    if kind == "nullable":
        return accepts(schema["schema"]) | {type(None)}
    if kind in LEAF_TYPES and plain(schema):
        return frozenset({LEAF_TYPES[kind]})
    if kind == "float" and plain(schema, "allow_inf_nan"):
        return frozenset({float})
    if kind == "any":
        return ANY
    if kind == "dict" and plain(schema, "keys_schema", "values_schema"):
        keys = schema.get("keys_schema", {"type": "any"})
        values = schema.get("values_schema", {"type": "any"})
        if keys["type"] in ("any", "str") and plain(keys) and values["type"] == "any":
            return frozenset({dict})
    if (
        kind == "list"
        and plain(schema, "items_schema")
        and schema.get("items_schema", {"type": "any"})["type"] == "any"
    ):
        return frozenset({list})
    return frozenset()


def plain(schema: Mapping[str, Any], *allowed: str) -> bool:
    """Whether ``schema`` has no constraint beyond ``allowed`` keys."""
    return all(key in NEUTRAL or key in allowed for key in schema) and (
        schema.get("allow_inf_nan", True) is True
    )


def kinds(schema: Mapping[str, Any], definitions: Mapping[str, Any]) -> set[str]:
    """The kinds of JSON value a schema may accept (for choosing a union member)."""
    kind = schema["type"]
    if kind == "definition-ref":
        target = definitions.get(schema["schema_ref"])
        return kinds(target, definitions) if target else {"str", "num", "bool", "list", "dict"}
    if kind == "nullable":
        return kinds(schema["schema"], definitions) | {"null"}
    if kind in ("function-before", "function-after", "default", "model-field"):
        return kinds(schema["schema"], definitions)
    if kind == "json-or-python":
        return kinds(schema["json_schema"], definitions)
    if kind == "enum":
        return {JSON_KIND.get(type(m.value), "str") for m in schema["members"]}
    if kind == "literal":
        return {JSON_KIND.get(type(e), "str") for e in schema["expected"]}
    if kind in KINDS:
        return set(KINDS[kind])
    return {"str", "num", "bool", "null", "list", "dict"}  # anything: never picked alone


def hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def copier(default: Any) -> Callable[[], Any]:

    def copied() -> Any:
        return copy.deepcopy(default)

    copied.__qualname__ = f"deepcopy({default!r})"
    return copied


def describe_leaf(schema: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    shown = {k: v for k, v in schema.items() if k not in ("metadata", "serialization")}
    return f"{sorted(shown.items())!r}{sorted(config.items())!r}"
