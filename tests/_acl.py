"""The documentation's least-privilege ACL user (docs/security.md), made on a real server
for the contract suites.

The rules are read from the page itself, so the published lines are the ones tested: each
fenced block of ``ACL SETUSER ras-worker`` lines is one set of rules (a block's lines add up,
as ``ACL SETUSER`` does).
"""

from __future__ import annotations

import re
import shlex
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

PAGE = Path(__file__).resolve().parents[1] / "docs" / "security.md"
_BLOCK = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)
_LINE = re.compile(r"^ACL SETUSER ras-worker (.+)$", re.M)


def readme_rules() -> dict[str, list[str]]:
    """The documented rules: ``base`` (sessions + plain memory), then the extras for the
    ``search`` backend, learned ``facts``, their ``background`` generation's workers, the
    ``replicas`` and ``aof`` write concerns, and a ``cluster``."""
    blocks = [_LINE.findall(block) for block in _BLOCK.findall(PAGE.read_text())]
    sets = [[rule for line in lines for rule in shlex.split(line)] for lines in blocks if lines]
    names = ["base", "search", "facts", "background", "replicas", "aof", "cluster"]
    assert len(sets) == len(names), sets
    return dict(zip(names, sets, strict=True))


def readme_commands(*, search: bool = False) -> list[str]:
    """The commands the documented line grants (``+name``), for the one-missing checks."""
    rules = readme_rules()
    granted = rules["base"] + (rules["search"] if search else [])
    return [r[1:] for r in granted if r.startswith("+")]


@asynccontextmanager
async def acl_user(
    admin: Any,
    *,
    search: bool = False,
    facts: bool = False,
    background: bool = False,
    concern: str | None = None,
    without: str | None = None,
    keys: list[str] | None = None,
) -> AsyncIterator[Any]:
    """A client logged in as a fresh user with the documented rules (the search ones with
    ``search``, the learned facts' with ``facts``, those and the workers' with
    ``background``, those of a write ``concern``, the
    cluster ones when ``admin`` is a RedisCluster: set on every node), minus ``+without``;
    with ``keys``, those key rules in place of the documented ``~ras:*`` (a tenant's)."""
    readme = readme_rules()
    cluster = isinstance(admin, RedisCluster)
    rules = readme["base"] + (readme["search"] if search else []) + readme.get(concern or "", [])
    rules += readme["facts"] if facts or background else []
    rules += readme["background"] if background else []
    rules += readme["cluster"] if cluster else []
    name, password = f"ras-test-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    rules = [f">{password}" if r.startswith(">") else r for r in rules]
    if keys is not None:
        at = rules.index("~ras:*")
        rules[at : at + 1] = keys
    if without is not None:
        assert f"+{without}" in rules, without
        rules.remove(f"+{without}")
    nodes = admin.get_nodes() if cluster else [None]
    for node in nodes:
        options = {"target_nodes": node} if cluster else {}
        await admin.execute_command("ACL", "SETUSER", name, "reset", *rules, **options)
    client: Any
    if cluster:
        node = admin.get_default_node()
        client = RedisCluster(host=node.host, port=node.port, username=name, password=password)
    else:
        kwargs: dict[str, Any] = admin.connection_pool.connection_kwargs
        client = Redis(
            host=kwargs.get("host", "localhost"),
            port=kwargs.get("port", 6379),
            db=kwargs.get("db", 0),
            username=name,
            password=password,
        )
    try:
        yield client
    finally:
        await client.aclose()
        for node in nodes:
            options = {"target_nodes": node} if cluster else {}
            await admin.execute_command("ACL", "DELUSER", name, **options)
