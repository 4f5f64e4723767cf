"""The README's usage example runs as written (on fakeredis)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import fakeredis

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


async def test_usage_example_runs() -> None:
    [usage] = [b for b in python_blocks() if "async def turn(redis: Redis)" in b]
    namespace: dict[str, Any] = {}
    exec(compile(usage, "README.md", "exec"), namespace)
    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    await namespace["turn"](client)  # its own assert checks the stored state
    keys = {k.decode() async for k in client.scan_iter()}
    assert "ras:{booking_app:user1}:user_state" in keys
    assert await client.hget("ras:{booking_app}:app_state", "maintenance_mode") == b"false"
    await client.aclose()
