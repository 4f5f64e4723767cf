"""The Python side of each Lua script, by name: what a call sends and how its reply reads.

Each script shipped in ``lua/`` has a ``Script``: its call object, a NamedTuple whose
fields are the script's KEYS and then its ARGV, in the order its header declares them
(``-- KEYS[n] name: ...``, ``-- ARGV[n] name: ...``; ``-- ARGV[n]... name: ...`` for a last
field whose items are that position and the ones after it), and the function that reads
its reply into a reply object. ``tests/test_lua_calls.py`` holds every header and its call
object alike, so a position cannot move on one side only.

NamedTuples, not dataclasses: every append builds one, and a NamedTuple is built and laid out
flat in C (a frozen dataclass with an append's 29 fields takes several times as long to make).
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["C", "R", "Script", "raw"]

C = TypeVar("C", bound=tuple[Any, ...])
R = TypeVar("R")


@dataclass(frozen=True, eq=False)
class Script(Generic[C, R]):
    """One ``lua/<name>.lua``: its call object (``call``), whose first ``keys`` fields are
    KEYS and the rest ARGV, and how its reply is read (``reply(call, raw)``, after the
    refusals every script shares are raised: see ``scripts.checked``)."""

    name: str
    call: type[C]
    keys: int
    reply: Callable[[C, Any], R]
    more_keys: bool = False
    """The last KEYS field is a sequence: its items are that key and the ones after it."""
    more_args: bool = False
    """The last ARGV field is a sequence: its items are that argument and the ones after."""
    _key_gaps: tuple[int, ...] = field(init=False, repr=False)
    _arg_gaps: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # A field typed ``... | None`` is left out when None, and the ones after it move up
        # (the header says where, as for keys a layout does not have). Known here, once,
        # so that a call looks only at those fields, last first.
        hints = typing.get_type_hints(self.call)
        names: tuple[str, ...] = self.call._fields  # type: ignore[attr-defined]
        gaps = [i for i, n in enumerate(names) if type(None) in typing.get_args(hints[n])]
        keys = tuple(i for i in reversed(gaps) if i < self.keys)
        args = tuple(i - self.keys for i in reversed(gaps) if i >= self.keys)
        object.__setattr__(self, "_key_gaps", keys)
        object.__setattr__(self, "_arg_gaps", args)

    @property
    def optional(self) -> list[str]:
        """The fields left out when None."""
        key_fields, arg_fields = self.fields()
        gone = [key_fields[i] for i in self._key_gaps] + [arg_fields[i] for i in self._arg_gaps]
        return sorted(gone, key=[*key_fields, *arg_fields].index)

    def split(self, call: C) -> tuple[list[Any], list[Any]]:
        """``call``'s KEYS and ARGV, as sent."""
        n = self.keys
        keys = list(call[:n])
        args = list(call[n:])
        for i in self._key_gaps:
            if keys[i] is None:
                del keys[i]
        for i in self._arg_gaps:
            if args[i] is None:
                del args[i]
        if self.more_keys:
            keys[-1:] = keys[-1]
        if self.more_args:
            args[-1:] = args[-1]
        return keys, args

    def fields(self) -> tuple[list[str], list[str]]:
        """The names of the call object's KEYS fields and of its ARGV fields."""
        names = list(self.call._fields)  # type: ignore[attr-defined]
        return names[: self.keys], names[self.keys :]


def raw(call: Any, reply: Any) -> Any:
    """A reply taken as the script gives it (a list of hashes, of members, a count)."""
    return reply
