"""Running a test's helper script in its own OS process."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any


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
