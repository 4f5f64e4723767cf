"""Running a test's helper script in its own OS process."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from _cli import FORKERS

ADK = ("google.adk.agents", "google.adk.runners", "redis_agent_sessions.adk")
"""What the ADK helper scripts import, once for all of them (``preload``)."""


async def run_helper(*args: str | Path, preload: tuple[str, ...] = ()) -> Any:
    """Run a helper script (``args[0]``) in a new OS process (this venv's python, forked
    from one that imported ``preload`` beforehand: ``_cli.Forkers``); the JSON value it
    prints, once it exited 0."""
    script, *rest = map(str, args)
    done = await asyncio.to_thread(FORKERS.run, rest, script=script, preload=preload, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
async def processes() -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """Processes this test started; any still running at the end is killed (by handle)."""
    started: list[asyncio.subprocess.Process] = []
    yield started
    for proc in started:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def start(
    started: list[asyncio.subprocess.Process], script: Path, *args: Any
) -> asyncio.subprocess.Process:
    """``script`` with ``args`` in a new OS process (this venv's python), its pipes open,
    recorded in ``started`` (the :func:`processes` fixture) to be killed if left running."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        *map(str, args),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    started.append(proc)
    return proc
