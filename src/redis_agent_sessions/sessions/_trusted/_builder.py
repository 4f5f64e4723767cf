"""Walking a core schema into converters, and the description that names them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson
from pydantic import BaseModel
from pydantic_core import PydanticUndefined, SchemaValidator

from redis_agent_sessions.sessions._trusted._leaves import (
    CONFIG_KEYS,
    DELEGATED,
    JSON_KIND,
    Convert,
    Hooks,
    Untrusted,
    accepts,
    copier,
    describe_leaf,
    exact,
    hashable,
    identity,
    kinds,
    plain,
    qualified_name,
    to_float,
    untrusted,
    utf8_bytes,
)
from redis_agent_sessions.sessions._trusted._models import FieldPlan, model_builder


class _Builder:
    """Walks one core schema: ``convert`` (through the ``_<schema type>`` method) returns
    a converter and a description of it (the descriptions make the fingerprint)."""

    def __init__(self, schema: Mapping[str, Any], hooks: Hooks) -> None:
        self.hooks = hooks
        self.definitions: dict[str, Mapping[str, Any]] = {}
        self.described: dict[str, str] = {}
        """Definition ref -> the name of the model it defines."""
        self.refs: dict[str, str] = {}
        """Definition ref -> its description, once its converter is built."""
        self._cells: dict[str, list[Convert]] = {}
        """Definition ref -> its converter, filled in once built (recursion calls through)."""
        self._models: list[tuple[type[BaseModel], Mapping[str, Any]]] = []
        """The models being built, innermost last (their fields are built in between)."""
        self.root = schema
        if schema["type"] == "definitions":
            for definition in schema["definitions"]:
                self.definitions[definition["ref"]] = definition
            self.root = schema["schema"]

    def convert(self, schema: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Convert, str]:
        kind = schema["type"]
        method = getattr(self, "_" + kind.replace("-", "_"), None)
        if method is None:
            return self._delegate_or_untrusted(schema, config)
        converted: tuple[Convert, str] = method(schema, config)
        return converted

    def _delegate_or_untrusted(
        self, schema: Mapping[str, Any], config: Mapping[str, Any]
    ) -> tuple[Convert, str]:
        kind = schema["type"]
        if kind not in DELEGATED:
            return untrusted, f"untrusted:{kind}"
        if kind == "bytes" and config.get("val_json_bytes", "utf8") == "utf8" and plain(schema):
            return utf8_bytes, "bytes:utf8"
        core_config = {k: v for k, v in config.items() if k in ("val_json_bytes",)}
        validator = SchemaValidator(dict(schema), core_config)  # type: ignore[arg-type]
        validate = validator.validate_json
        dumps = orjson.dumps

        def delegated(value: Any) -> Any:
            try:
                return validate(dumps(value))
            except (ValueError, TypeError) as exc:
                raise Untrusted from exc

        return delegated, f"leaf:{describe_leaf(schema, core_config)}"

    # JSON leaves taken as they are
    def _str(self, schema: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Convert, str]:
        if not plain(schema):
            return untrusted, "untrusted:str"
        return exact(str), "str"

    def _bool(self, schema: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Convert, str]:
        return (exact(bool), "bool") if plain(schema) else (untrusted, "untrusted:bool")

    def _int(self, schema: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Convert, str]:
        if plain(schema):
            return exact(int), "int"
        if not plain(schema, "ge", "gt", "le", "lt"):
            return untrusted, "untrusted:int"
        ge, gt, le, lt = (schema.get(bound) for bound in ("ge", "gt", "le", "lt"))

        def bounded(value: Any) -> Any:
            if type(value) is not int or (
                (ge is not None and value < ge)
                or (gt is not None and value <= gt)
                or (le is not None and value > le)
                or (lt is not None and value >= lt)
            ):
                raise Untrusted
            return value

        return bounded, f"int[ge={ge},gt={gt},le={le},lt={lt}]"

    def _float(self, schema: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Convert, str]:
        if not plain(schema, "allow_inf_nan"):
            return untrusted, "untrusted:float"
        return to_float, "float"

    def _none(self, schema: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Convert, str]:
        return exact(type(None)), "none"

    def _any(self, schema: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Convert, str]:
        return identity, "any"

    def _enum(self, schema: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Convert, str]:
        if not plain(schema, "cls", "members", "sub_type", "missing"):
            return untrusted, "untrusted:enum"
        members = {member.value: member for member in schema["members"]}
        get = members.get

        def enum(value: Any) -> Any:
            # A value of another JSON type could compare equal (True == 1): validate.
            if type(value) not in (str, int, float):
                raise Untrusted
            member = get(value)
            if member is None or type(member.value) is not type(value):
                raise Untrusted
            return member

        names = ",".join(f"{m.name}={m.value!r}" for m in schema["members"])
        return enum, f"enum:{qualified_name(schema['cls'])}({names})"

    def _literal(self, schema: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Convert, str]:
        expected = schema["expected"]
        if not plain(schema, "expected") or not all(type(e) in (str, int, bool) for e in expected):
            return untrusted, "untrusted:literal"
        allowed = {(type(e), e): e for e in expected}
        get = allowed.get

        def literal(value: Any) -> Any:
            found = get((type(value), value), untrusted)
            if found is untrusted:
                raise Untrusted
            return found

        return literal, f"literal:{expected!r}"

    # wrappers
    def _nullable(
        self, schema: Mapping[str, Any], config: Mapping[str, Any]
    ) -> tuple[Convert, str]:
        inner, described = self.convert(schema["schema"], config)

        def nullable(value: Any) -> Any:
            return None if value is None else inner(value)

        return nullable, f"?{described}"

    def _json_or_python(
        self, schema: Mapping[str, Any], config: Mapping[str, Any]
    ) -> tuple[Convert, str]:
        return self.convert(schema["json_schema"], config)

    def _lax_or_strict(
        self, schema: Mapping[str, Any], config: Mapping[str, Any]
    ) -> tuple[Convert, str]:
        return self.convert(schema["lax_schema"], config)

    def _definition_ref(
        self, schema: Mapping[str, Any], config: Mapping[str, Any]
    ) -> tuple[Convert, str]:
        ref = schema["schema_ref"]
        target = self.definitions.get(ref)
        if target is None:
            return untrusted, "untrusted:ref"
        if ref in self._cells:
            cell = self._cells[ref]
            if ref in self.refs:
                return cell[0], f"ref:{self.described[ref]}"
            # Recursion (a model inside itself): the converter is looked up when called.
            return (lambda value: cell[0](value)), f"ref:{self.described[ref]}"
        self.described[ref] = _model_name(target)
        cell = [untrusted]
        self._cells[ref] = cell
        converted, described = self.convert(target, config)
        cell[0] = converted
        self.refs[ref] = described
        return converted, f"ref:{self.described[ref]}"

    def _validator(
        self, schema: Mapping[str, Any], config: Mapping[str, Any], mode: str
    ) -> tuple[Convert, str, Callable[[Any], Any] | None]:
        """What a no-info ``mode`` validator wraps (converter, description) and its
        function; for one that takes info, an untrusted converter and no function."""
        inner, described = self.convert(schema["schema"], config)
        function = schema["function"]
        if function["type"] != "no-info":
            return untrusted, f"untrusted:function-{mode}", None
        return inner, described, function["function"]

    def _function_before(
        self, schema: Mapping[str, Any], config: Mapping[str, Any]
    ) -> tuple[Convert, str]:
        inner, described, call = self._validator(schema, config, "before")
        if call is None:
            return inner, described
        key = getattr(call, "__func__", call)
        if key in self.hooks.skip_before:
            unless = self.hooks.skip_before[key]
            if not unless:
                return inner, f"skip({qualified_name(call)}):{described}"

            def tested(value: Any) -> Any:
                if type(value) is dict and unless.isdisjoint(value):
                    return inner(value)
                return inner(call(value))

            return tested, f"skip-unless({qualified_name(call)},{sorted(unless)}):{described}"

        def before(value: Any) -> Any:
            return inner(call(value))

        return before, f"before({qualified_name(call)}):{described}"

    def _function_after(
        self, schema: Mapping[str, Any], config: Mapping[str, Any]
    ) -> tuple[Convert, str]:
        inner, described, call = self._validator(schema, config, "after")
        if call is None:
            return inner, described

        def after(value: Any) -> Any:
            return call(inner(value))

        return after, f"after({qualified_name(call)}):{described}"

    # containers
    def _list(self, schema: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Convert, str]:
        if not plain(schema, "items_schema"):
            return untrusted, "untrusted:list"
        item, described = self.convert(schema.get("items_schema", {"type": "any"}), config)
        if item is identity:
            return exact(list), "list[any]"

        def items(value: Any) -> Any:
            if type(value) is not list:
                raise Untrusted
            return [item(v) for v in value]

        return items, f"list[{described}]"

    def _set(self, schema: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Convert, str]:
        if not plain(schema, "items_schema"):
            return untrusted, "untrusted:set"
        item, described = self.convert(schema.get("items_schema", {"type": "any"}), config)

        def items(value: Any) -> Any:
            if type(value) is not list:
                raise Untrusted
            try:
                return {item(v) for v in value}
            except TypeError as exc:  # unhashable: validation says what is wrong
                raise Untrusted from exc

        return items, f"set[{described}]"

    def _dict(self, schema: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Convert, str]:
        keys = schema.get("keys_schema", {"type": "any"})
        if not plain(schema, "keys_schema", "values_schema") or not (
            keys["type"] == "any" or (keys["type"] == "str" and plain(keys))
        ):
            return untrusted, "untrusted:dict"
        value_of, described = self.convert(schema.get("values_schema", {"type": "any"}), config)
        if value_of is identity:
            return exact(dict), "dict[any]"

        def values(value: Any) -> Any:
            if type(value) is not dict:
                raise Untrusted
            return {k: value_of(v) for k, v in value.items()}

        return values, f"dict[{described}]"

    def _union(self, schema: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Convert, str]:
        if not plain(schema, "choices", "mode", "auto_collapse", "custom_error_type"):
            return untrusted, "untrusted:union"
        if schema.get("mode", "smart") != "smart":
            return untrusted, "untrusted:union-mode"
        by_kind: dict[str, Convert | None] = {}
        parts = []
        for choice in schema["choices"]:
            choice_schema = choice[0] if isinstance(choice, tuple) else choice
            converted, described = self.convert(choice_schema, config)
            parts.append(described)
            for kind in kinds(choice_schema, self.definitions):
                # Two choices that take the same kind of JSON value: smart mode's pick
                # between them is validation's business.
                by_kind[kind] = None if kind in by_kind else converted
        get = by_kind.get

        def union(value: Any) -> Any:
            converted = get(JSON_KIND.get(type(value), ""))
            if converted is None:
                raise Untrusted
            return converted(value)

        return union, f"union[{'|'.join(parts)}]"

    # models
    def _model(self, schema: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[Convert, str]:
        cls = schema["cls"]
        model_config = schema.get("config", {})
        if (
            schema.get("root_model")
            or set(model_config) - CONFIG_KEYS
            or (schema.get("custom_init") and cls not in self.hooks.plain_inits)
        ):
            return untrusted, f"untrusted:model:{qualified_name(cls)}"
        # Model validators in 'before' mode wrap the fields inside the model schema:
        # converting it reaches _model_fields, which builds this model.
        self._models.append((cls, schema))
        try:
            return self.convert(schema["schema"], model_config)
        finally:
            self._models.pop()

    def _model_fields(
        self, fields_schema: Mapping[str, Any], config: Mapping[str, Any]
    ) -> tuple[Convert, str]:
        if not self._models:
            return untrusted, "untrusted:model-fields"
        cls, schema = self._models[-1]
        by_alias = config.get("validate_by_alias", True)
        by_name = config.get("validate_by_name", config.get("populate_by_name", False))
        extra = fields_schema.get("extra_behavior") or config.get("extra_fields_behavior")
        extra = extra or "ignore"
        if extra not in ("allow", "ignore", "forbid"):
            return untrusted, f"untrusted:extra:{qualified_name(cls)}"
        extra_of: Convert = identity
        described_extra = "any"
        if fields_schema.get("extras_schema") is not None:
            extra_of, described_extra = self.convert(fields_schema["extras_schema"], config)
        template: dict[str, Any] = {}
        factories: dict[str, Callable[[], Any]] = {}
        required: list[str] = []
        lookup: dict[str, FieldPlan] = {}
        described = []
        for name, model_field in fields_schema["fields"].items():
            field_schema = model_field["schema"]
            default: Any = PydanticUndefined
            factory: Callable[[], Any] | None = None
            if field_schema["type"] == "default":
                if field_schema.get("validate_default") or field_schema.get(
                    "default_factory_takes_data"
                ):
                    return untrusted, f"untrusted:default:{qualified_name(cls)}.{name}"
                factory = field_schema.get("default_factory")
                default = field_schema.get("default", PydanticUndefined)
                if factory is None and not hashable(default):
                    factory = copier(default)
                field_schema = field_schema["schema"]
            accept = accepts(field_schema)
            if field_schema["type"] == "nullable":  # None is in ``accept``: no wrapper
                converted, described_field = self.convert(field_schema["schema"], config)
                described_field = "?" + described_field
            else:
                converted, described_field = self.convert(field_schema, config)
            entry = FieldPlan(name, accept, converted)
            alias = model_field.get("validation_alias")
            if alias is not None and not isinstance(alias, str):
                return untrusted, f"untrusted:alias:{qualified_name(cls)}.{name}"
            names = [n for n, on in ((name, by_name or alias is None), (alias, by_alias)) if on]
            for key in names:
                if key is not None:
                    lookup[key] = entry
            template[name] = default
            if factory is not None:
                factories[name] = factory
                default_text = f"={qualified_name(factory)}()"
            elif default is PydanticUndefined:
                required.append(name)
                default_text = ""
            else:
                default_text = f"={default!r}"
            described.append(f"{name}({alias}):{described_field}{default_text}")
        build = model_builder(cls, schema, template, factories, required, lookup, extra, extra_of)
        text = (
            f"model:{qualified_name(cls)}[extra={extra}:{described_extra}]"
            f"{{{';'.join(described)}}}post_init={schema.get('post_init')}"
        )
        return build, text


def _model_name(definition: Mapping[str, Any]) -> str:
    """The model a definition builds (through any wrappers), else its ref."""
    schema = definition
    while schema["type"] != "model":
        if "schema" not in schema:
            return str(definition.get("ref", "?"))
        schema = schema["schema"]
    return qualified_name(schema["cls"])
