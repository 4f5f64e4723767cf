"""``redis-agent-sessions reembed``: a keyword-only memory store gets vectors, in a subprocess
as an operator runs it, on Redis 7 and on the cluster (the ``cli`` fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

from _cli import Cli
from _embedders import SynonymEmbedder
from redis_agent_sessions import (
    Content,
    Event,
    Part,
    RedisMemoryService,
    Session,
    SessionServiceConfig,
)

pytestmark = pytest.mark.cli
SPEC = "import:_embedders:SynonymEmbedder"


def memory(cli: Cli, **kw: object) -> RedisMemoryService:
    config = SessionServiceConfig(key_prefix=cli.prefix)
    return RedisMemoryService.from_url(cli.url, config=config, cluster=cli.cluster, **kw)  # type: ignore[arg-type]


async def test_reembed_gives_a_keyword_store_vectors(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("rich", reason="needs the [cli] extra")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))  # where SPEC's module is
    events = [
        Event(author="user", timestamp=t, content=Content(parts=[Part(text=text)]))
        for t, text in enumerate(["I bought a Skoda", "my puppy is called Rex"], 1)
    ]
    async with memory(cli) as keyword:
        await keyword.add_session_to_memory(
            Session(id="s1", app_name="app", user_id="ann", events=events)
        )
    plan = cli.json("reembed", "--embedder", SPEC, "--dry-run")
    assert plan["dry_run"] is True
    assert (plan["users"], plan["entries"], plan["embedded"]) == (1, 2, 2)
    assert plan["recorded"] is None
    done = cli.run("reembed", "--embedder", SPEC, "--app", "app")
    assert done.returncode == 0, done.stderr
    assert "2 entries of 1 user: 0 already current, 2 embedded with synonyms-v1" in done.stderr
    async with memory(cli, embedder=SynonymEmbedder()) as semantic:
        found = await semantic.search_memory(app_name="app", user_id="ann", query="automobile")
        # The puppy's turn comes after, through the pair it makes with the car's (a turn's
        # vector holds its neighbours': docs/memory-ranking.md).
        texts = [m.content.text for m in found.memories]
        assert texts == ["I bought a Skoda", "my puppy is called Rex"]
    async with cli.service() as sessions:  # stats reports per app of sessions
        await sessions.create_session(app_name="app", user_id="ann")
    assert cli.json("stats")["memory_vectors"] == {"dimensions": 512, "model": "synonyms-v1"}
    assert "vectors: synonyms-v1 (512 dimensions)" in cli.run("stats").stdout
    again = cli.json("reembed", "--embedder", SPEC)
    assert (again["current"], again["embedded"]) == (2, 0)
    missing = cli.run("reembed")
    assert missing.returncode == 2
    assert "--embedder" in missing.stderr
    nobody = cli.run("reembed", "--embedder", SPEC, "--app", "nobody")
    assert nobody.returncode == 1
    assert "no memory entries in app 'nobody'" in nobody.stderr
