"""The Python-Lua boundary by name: each script's header declares its KEYS and ARGV by name,
in the order of its call object's fields (``_redis/calls.py``), and the Lua libraries it calls
(its ``-- uses:`` line; no others are prepended to it)."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any, cast

import pytest

from redis_agent_sessions._redis import jobs_calls, memory_calls, session_calls
from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.calls import Script
from redis_agent_sessions.errors import RedisSessionsError

LUA = resources.files("redis_agent_sessions._redis").joinpath("lua")
_FILES = sorted(p.name[:-4] for p in LUA.iterdir() if p.name.endswith(".lua"))
SCRIPTS = [name for name in _FILES if not name.startswith("_")]
LIBRARIES = [name for name in _FILES if name.startswith("_")]
# What Lua 5.1 and Redis give every script; any other name a script calls is its own or a
# library's.
BUILTINS = {
    "assert", "error", "ipairs", "next", "pairs", "pcall", "rawequal", "rawget", "rawset",
    "select", "setmetatable", "getmetatable", "tonumber", "tostring", "type", "unpack",
}  # fmt: skip


def _source(name: str) -> str:
    return LUA.joinpath(f"{name}.lua").read_text("utf-8")


def _code(text: str) -> str:
    """Lua text without its comments and with every string literal emptied (names in them
    are not calls); one pass, so that a ``--`` inside a string is no comment."""

    def blank(found: re.Match[str]) -> str:
        return "" if found.group(0).startswith("--") else "''"

    return re.sub(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|--[^\n]*", blank, text)


def _defined(code: str) -> set[str]:
    """The names a chunk defines at its top level (``local function f``, ``local X =``)."""
    found = set(re.findall(r"^local function (\w+)", code, re.M))
    return found | set(re.findall(r"^local (\w+)\s*=", code, re.M))


def _names(code: str) -> set[str]:
    """Every name a chunk mentions, fields (``a.b``, ``a:b``) left out."""
    return set(re.findall(r"(?<![.:\w])([A-Za-z_]\w*)", code))


KEYWORDS = {"and", "elseif", "function", "if", "in", "not", "or", "return", "until", "while"}


def _called(code: str) -> set[str]:
    return set(re.findall(r"(?<![.:\w])([A-Za-z_]\w*)\s*\(", code)) - KEYWORDS


DEFINED = {lib: _defined(_code(_source(lib))) for lib in LIBRARIES}


def _needed(code: str, own: set[str]) -> list[str]:
    """The libraries defining a name ``code`` mentions and does not define itself, in the
    order they are prepended."""
    names = _names(code) - own
    return [lib for lib in _scripts.LIBRARIES if DEFINED[lib] & names]


def test_the_libraries_are_the_files_and_define_distinct_names() -> None:
    assert sorted(_scripts.LIBRARIES) == LIBRARIES
    for i, lib in enumerate(LIBRARIES):
        for other in LIBRARIES[i + 1 :]:
            assert not DEFINED[lib] & DEFINED[other], (lib, other)


@pytest.mark.parametrize("lib", LIBRARIES)
def test_a_library_calls_only_libraries_prepended_before_it(lib: str) -> None:
    code = _code(_source(lib))
    needed = _needed(code, DEFINED[lib])
    order = _scripts.LIBRARIES
    assert all(order.index(n) < order.index(lib) for n in needed), (lib, needed)


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_declares_exactly_the_libraries_it_calls(name: str) -> None:
    text = _source(name)
    code = _code(text)
    declared = _scripts.uses(text)
    needed = _needed(code, _defined(code))
    # What those libraries call in turn comes with them.
    for lib in list(needed):
        needed += [n for n in _needed(_code(_source(lib)), DEFINED[lib]) if n not in needed]
    assert declared == sorted(needed, key=_scripts.LIBRARIES.index), name
    # Every function it calls is a builtin, its own, or one of theirs.
    known = BUILTINS | _names(code) & _defined(code) | {"redis"}
    for lib in declared:
        known |= DEFINED[lib]
    local = set(re.findall(r"\blocal function (\w+)", code))
    local |= set(re.findall(r"\blocal (\w+)\s*=\s*function\b", code))
    assert _called(code) <= known | local, (name, _called(code) - known - local)


@pytest.mark.parametrize("name", SCRIPTS)
def test_only_the_declared_libraries_are_prepended(name: str) -> None:
    own = _source(name)
    first = own.split("\n", 1)[0] + "\n" if own.startswith("#!") else ""
    libraries = "".join(_source(lib) for lib in _scripts.uses(own))
    assert _scripts.lua_source(name) == first + libraries + own.removeprefix(first)


def test_an_unknown_library_is_refused() -> None:
    with pytest.raises(RedisSessionsError, match="_nope"):
        _scripts.uses("-- A script.\n-- uses: _permitted, _nope\n-- KEYS[1] k: a key\nreturn 1\n")
    assert _scripts.uses("-- A script that calls no library.\nreturn 1\n") == []


# -- KEYS and ARGV by name ---------------------------------------------------------------------

CALLS: dict[str, Script[Any, Any]] = {
    s.name: s for s in session_calls.SCRIPTS + memory_calls.SCRIPTS + jobs_calls.SCRIPTS
}
DECLARATION = re.compile(r"-- (KEYS|ARGV)\[(\d+)\](\.\.\.)? (\w+): \S")


def _declared(text: str) -> dict[str, list[tuple[int, bool, str]]]:
    """The KEYS and ARGV a script's opening comment declares: (position, whether the
    position and those after it are meant (``KEYS[n]...``), name), in order."""
    found: dict[str, list[tuple[int, bool, str]]] = {"KEYS": [], "ARGV": []}
    for line in text.splitlines():
        if not line.startswith(("--", "#!")):
            break
        if line.startswith(("-- KEYS[", "-- ARGV[")):
            match = DECLARATION.match(line)
            assert match is not None, f"not a declaration ('-- KEYS[n] name: ...'): {line!r}"
            group, at, more, name = match.groups()
            found[group].append((int(at), more is not None, name))
    return found


def test_every_script_has_a_call_object() -> None:
    assert sorted(CALLS) == SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_header_declares_the_call_objects_fields_in_order(name: str) -> None:
    script = CALLS[name]
    declared = _declared(_source(name))
    for group, fields, more in zip(
        ("KEYS", "ARGV"), script.fields(), (script.more_keys, script.more_args), strict=True
    ):
        positions = [at for at, _, _ in declared[group]]
        assert positions == list(range(1, len(positions) + 1)), (name, group, positions)
        assert [n for _, _, n in declared[group]] == fields, (name, group)
        # Only the last may stand for a run of positions, and the call object says so too.
        runs = [is_run for _, is_run, _ in declared[group]]
        assert runs == [False] * (len(runs) - 1) + [more] if runs else not more, (name, group)


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_call_is_sent_as_its_header_lists_it(name: str) -> None:
    """Each field lands at its declared position; a run's items go in its place, and an
    optional field set to None is left out (the later ones move up)."""
    script = CALLS[name]
    declared = _declared(_source(name))
    runs = {n for group in declared.values() for _, is_run, n in group if is_run}
    values = {n: [f"{n}.1", f"{n}.2"] if n in runs else n for n in script.call._fields}
    keys, args = script.split(script.call(**values))
    expected = {
        group: [x for _, _, n in declared[group] for x in (values[n] if n in runs else [n])]
        for group in ("KEYS", "ARGV")
    }
    assert (keys, args) == (expected["KEYS"], expected["ARGV"])
    gone = script.optional
    if gone:
        keys, args = script.split(script.call(**{**values, **dict.fromkeys(gone)}))
        assert not set(gone) & {*keys, *args}
        assert len(keys) + len(args) == len(expected["KEYS"]) + len(expected["ARGV"]) - len(gone)


def test_the_keys_a_layout_lacks_are_optional() -> None:
    assert session_calls.APPEND_EVENT.optional == ["app_updated", "app_expiry"]
    assert session_calls.READ_SESSION.optional == ["anchor"]
    assert session_calls.PRUNE_INDEX.optional == ["app_updated", "app_expiry"]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ([1, 3, b"5-0", [b"m"]], (1, 3, b"5-0", [b"m"], None)),
        ([1, 3, b"5-0", [], ["catch-up"]], (1, 3, b"5-0", [], ["catch-up"])),
        ([2, 3, b"", [b"entry"]], (2, 3, None, [b"entry"], None)),
        ([-1], (-1, None, None, [], None)),
        ([-2, 4], (-2, 4, None, [], None)),
        ([-2, 4, ["catch-up"]], (-2, 4, None, [], ["catch-up"])),
    ],
)
def test_an_append_reply_is_read_by_name(reply: list[Any], expected: tuple[Any, ...]) -> None:
    read = session_calls.APPEND_EVENT.reply(cast(Any, None), reply)
    assert (read.status, read.revision, read.stream_id, read.after, read.catch_up) == expected
    incomplete = session_calls.APPEND_EVENT.reply(cast(Any, None), [-5, b"meta", b"events"])
    assert (incomplete.status, incomplete.key, list(incomplete.missing)) == (
        -5,
        b"meta",
        [b"events"],
    )
