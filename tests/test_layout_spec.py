"""docs/layout-spec.md cannot drift from the code: it names every key kind keys.py builds,
every session script with its KEYS and ARGV as its call object has them, every Lua library
and the memory scripts."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from redis_agent_sessions._redis import jobs_calls, memory_calls
from redis_agent_sessions._redis.calls import Script
from redis_agent_sessions._redis.layout_version import LAYOUT_VERSION
from redis_agent_sessions._redis.scripts import LIBRARIES
from redis_agent_sessions._redis.session_calls import SCRIPTS
from redis_agent_sessions.keys import KeySpace

SPEC = Path(__file__).resolve().parent.parent / "docs" / "layout-spec.md"
PLACEHOLDERS = {
    "app_name": "<app>",
    "user_id": "<user>",
    "session_id": "<id>",
    "memory_id": "<id>",
    "fact_id": "<id>",
    "token": "<token>",
    "term": "<term>",
    "gram": "<gram>",
    "shard": "<n>",
    "n": "<n>",
    "job": "<job>",
}
NOT_KEYS = {
    "app_acl_keys": "ACL rules built from the keys",
    "demo": "the demo's control keys, no part of a deployment's layout",
    "job_shard": "a number",
    "memory_entries_pattern": "a SCAN pattern",
    "memory_owner": "parses a key",
    "memory_index_prefix": "an index's prefix, named with its index",
    "memory_user_index_prefix": "an index's prefix, named with its index",
    "memory_app_index_prefix": "an index's prefix, named with its index",
}
# The job lists of a user's session: ``job_events`` builds the <user>:<session> form.
SPELLED = {"job_events": {"session_id": "<session>"}}


def spec() -> str:
    return SPEC.read_text(encoding="utf-8")


def built_keys() -> dict[str, list[str]]:
    """Each KeySpace method's keys, built with the spec's placeholders."""
    space = KeySpace()
    out: dict[str, list[str]] = {}
    for name, method in inspect.getmembers(KeySpace, inspect.isfunction):
        if name.startswith("_") or name in NOT_KEYS:
            continue
        names = list(inspect.signature(method).parameters)[1:]
        args = [SPELLED.get(name, {}).get(n, PLACEHOLDERS[n]) for n in names]
        built: Any = getattr(space, name)(*args)
        if isinstance(built, str):
            out[name] = [built]
        else:  # SessionKeys, JobKeys: their key fields
            values = [getattr(built, f.name) for f in dataclasses.fields(built)]
            out[name] = [v for v in values if v.startswith("ras:") and v != built_tag(built)]
    return out


def built_tag(built: Any) -> str | None:
    """A JobKeys' common start (no key itself)."""
    return getattr(built, "tag", None)


@pytest.mark.parametrize("kind", sorted(built_keys()))
def test_the_spec_names_every_key_kind(kind: str) -> None:
    text = spec()
    for key in built_keys()[kind]:
        assert f"`{key}`" in text, f"docs/layout-spec.md does not name {key} ({kind})"


def test_every_public_keyspace_method_is_a_key_or_said_not_to_be() -> None:
    methods = {n for n, _ in inspect.getmembers(KeySpace, inspect.isfunction)}
    public = {n for n in methods if not n.startswith("_")}
    assert set(NOT_KEYS) <= public
    assert public - set(NOT_KEYS) == set(built_keys())


def notation(script: Script[Any, Any]) -> tuple[str, str]:
    """A script's KEYS and ARGV as the spec's table writes them: optional fields end ``?``,
    a last field that takes the rest ``...``."""
    optional = set(script.optional)

    def names(fields: list[str], more: bool) -> str:
        shown = [
            f"`{f}{'?' if f in optional else ''}{'...' if more and i == len(fields) - 1 else ''}`"
            for i, f in enumerate(fields)
        ]
        return ", ".join(shown) or "(none)"

    keys, args = script.fields()
    return names(keys, script.more_keys), names(args, script.more_args)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_the_spec_gives_every_session_script_its_keys_and_argv(script: Script[Any, Any]) -> None:
    keys, args = notation(script)
    row = f"| `{script.name}.lua` | {keys} | {args} |"
    assert row in spec(), f"docs/layout-spec.md lacks (or misstates) the row\n{row}"


def test_the_spec_names_the_libraries_and_the_memory_scripts() -> None:
    text = spec()
    for library in LIBRARIES:
        assert f"`{library}.lua`" in text, library
    for script in (*memory_calls.SCRIPTS, *jobs_calls.SCRIPTS):
        assert f"`{script.name}.lua`" in text, script.name


def test_the_spec_is_of_this_layout() -> None:
    assert re.search(rf"\*\*layout {LAYOUT_VERSION}\*\*", spec())
