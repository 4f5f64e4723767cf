"""Running a test's helper script in its own OS process."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest


async def run_helper(*args: str | Path) -> dict[str, Any]:
    """Run a helper script in a new OS process (this venv's python); the JSON object it
    prints, once it exited 0."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *map(str, args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out)
    return result


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
