"""Building one model instance as validation would, from a JSON object."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from redis_agent_sessions.sessions._trusted._leaves import Convert, Untrusted, identity

_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
_new = object.__new__
_setattr = object.__setattr__


class FieldPlan:
    __slots__ = ("accept", "convert", "name")

    def __init__(self, name: str, accept: frozenset[type], convert: Convert) -> None:
        self.name = name
        self.accept = accept
        """JSON value types taken as they are; anything else goes through ``convert``."""
        self.convert = convert


def model_builder(
    cls: type[BaseModel],
    schema: Mapping[str, Any],
    template: dict[str, Any],
    factories: dict[str, Callable[[], Any]],
    required: list[str],
    lookup: dict[str, FieldPlan],
    extra: str,
    extra_of: Convert,
) -> Convert:
    post_init = schema.get("post_init")
    custom_init = bool(schema.get("custom_init"))
    allow, forbid = extra == "allow", extra == "forbid"
    get = lookup.get
    by_name = frozenset(key for key, entry in lookup.items() if key == entry.name)
    checked = {key: entry for key, entry in lookup.items() if entry.convert is not identity}
    checked_get = checked.get
    needed = frozenset(required)
    factory_names = frozenset(factories)

    def slow(data: dict[str, Any]) -> tuple[dict[str, Any], set[str], dict[str, Any] | None]:
        """Keys given by alias, or not fields: each looked up in turn."""
        values = template.copy()
        fields_set: set[str] = set()
        extras: dict[str, Any] | None = {} if allow else None
        for key, value in data.items():
            entry = get(key)
            if entry is None:
                if forbid:
                    raise Untrusted
                if allow:
                    extras[key] = extra_of(value)  # type: ignore[index]
                    fields_set.add(key)
                continue
            name = entry.name
            if name in fields_set:  # a field given by name and by alias
                raise Untrusted
            convert = entry.convert
            if convert is not identity and type(value) not in entry.accept:
                value = convert(value)
            values[name] = value
            fields_set.add(name)
        if not needed <= fields_set:
            raise Untrusted
        return values, fields_set, extras

    def build(data: Any) -> Any:
        if type(data) is not dict:
            raise Untrusted
        if custom_init and None in data.values():
            raise Untrusted
        keys = data.keys()
        if keys <= by_name:
            # Every key a field's own name (what the store writes): merged in one step,
            # then only the values that need a check or a conversion are visited.
            values = template | data
            for key, value in data.items():
                entry = checked_get(key)
                if entry is not None and type(value) not in entry.accept:
                    values[key] = entry.convert(value)
            if needed and not needed <= keys:
                raise Untrusted
            fields_set = set(keys)
            extras: dict[str, Any] | None = {} if allow else None
        else:
            values, fields_set, extras = slow(data)
        if factory_names:
            for name in factory_names - fields_set:
                values[name] = factories[name]()
        model = _new(cls)
        _setattr(model, "__dict__", values)
        _set_fields_set(model, fields_set)
        _set_extra(model, extras)
        _set_private(model, None)
        if post_init is not None:
            getattr(model, post_init)(None)
        return model

    return build
