"""The README's usage example runs as written (on fakeredis)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from redis_agent_sessions import Content, MemoryEntry, Part

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


async def test_semantic_memory_example_runs() -> None:
    """The README's embedder example, with a model of the test's own."""
    pytest.importorskip("google.genai", reason="GoogleEmbedder needs the [adk] extra")
    [example] = [b for b in python_blocks() if "CallableEmbedder(model_fn" in b]
    redis = fakeredis.FakeAsyncRedis()
    namespace = {"redis": redis, "model_fn": lambda texts: [[1.0, 0.0] + [0.0] * 382] * len(texts)}
    exec(example, namespace)
    memory = namespace["memory"]
    assert memory.embedder.dimensions == 384
    assert memory.embedder.name == "minilm"
    await memory.add_memory(
        app_name="a", user_id="u", memories=[MemoryEntry(content=Content(parts=[Part(text="hi")]))]
    )
    found = await memory.search_memory(app_name="a", user_id="u", query="hello")
    assert found.memories[0].custom_metadata["redis_agent_sessions"]["found_by"] == ["vector"]
    await redis.aclose()
