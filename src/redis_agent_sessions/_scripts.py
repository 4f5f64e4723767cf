"""Lua sources shipped in the package, registered on each client.

Registration goes through redis-py's ``register_script``, which runs EVALSHA and
loads the script again when the server answers NOSCRIPT (after a restart or
SCRIPT FLUSH), so callers never handle that themselves.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from redis.commands.core import AsyncScript

__all__ = ["lua_source", "register"]


@cache
def lua_source(name: str) -> str:
    """The text of ``lua/<name>.lua`` inside this package."""
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")


def register(client: Any, name: str) -> AsyncScript:
    """``lua/<name>.lua`` bound to ``client``."""
    script: AsyncScript = client.register_script(lua_source(name))
    return script
