"""The TypeScript package (typescript/): the copy of the Lua scripts its build makes is the
Python package's, byte for byte, and its own test suite (``npm test``: its service, and every
layout vector) passes against the test servers. The suite skips without node or without
the package built (scripts/test.sh builds it when node is on PATH)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path

import pytest

from _servers import skip_without
from redis_agent_sessions._redis.scripts import LIBRARIES

ROOT = Path(__file__).resolve().parent.parent
TYPESCRIPT = ROOT / "typescript"
LUA = ROOT / "src" / "redis_agent_sessions" / "_redis" / "lua"


def test_the_lua_copy_is_the_python_packages() -> None:
    """What the build copies (``scripts/sync-lua.mjs``): each script the TypeScript service
    runs, and the libraries its ``-- uses:`` line names, unchanged."""
    if not (TYPESCRIPT / "lua").is_dir():
        pytest.skip("the TypeScript package is not built: npm ci && npm run build in typescript/")
    sync = (TYPESCRIPT / "scripts" / "sync-lua.mjs").read_text(encoding="utf-8")
    listed = re.search(r"const scripts = \[([^\]]*)\]", sync)
    assert listed is not None
    names = set(re.findall(r"'([a-z_]+)'", listed[1]))
    for name in list(names):
        head = (LUA / f"{name}.lua").read_text(encoding="utf-8")
        uses = re.search(r"^-- uses:(.*)$", head, re.MULTILINE)
        names |= {part.strip() for part in uses[1].split(",")} if uses else set()
    copied = {p.stem for p in (TYPESCRIPT / "lua").glob("*.lua")}
    assert copied == names, "run `npm run build` in typescript/"
    for name in names:
        assert (TYPESCRIPT / "lua" / f"{name}.lua").read_bytes() == (
            LUA / f"{name}.lua"
        ).read_bytes(), f"typescript/lua/{name}.lua differs: run `npm run build`"


def test_the_typescript_libraries_are_the_python_packages() -> None:
    """What a ``-- uses:`` line may name (``src/scripts.ts``'s LIBRARIES), in the order
    prepended: the Python package's list, which a split or renamed library changes."""
    source = (TYPESCRIPT / "src" / "scripts.ts").read_text(encoding="utf-8")
    listed = re.search(r"export const LIBRARIES = \[([^\]]*)\]", source)
    assert listed is not None
    assert tuple(re.findall(r"'(\w+)'", listed[1])) == LIBRARIES


@pytest.mark.real
async def test_the_typescript_suite_passes() -> None:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("node and npm are not on PATH")
    if not (TYPESCRIPT / "dist" / "test").is_dir():
        pytest.skip("the TypeScript package is not built: npm ci && npm run build in typescript/")
    env = {
        **os.environ,
        "REDIS_URL": skip_without("REDIS_URL"),
        "REDIS_CLUSTER_URL": skip_without("REDIS_CLUSTER_URL"),
    }
    proc = await asyncio.create_subprocess_exec(
        npm,
        "test",
        cwd=TYPESCRIPT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    report = out.decode()
    assert proc.returncode == 0, report
    # Nothing of it skipped: both servers were given.
    assert re.search(r"skipped 0\b", report), report
