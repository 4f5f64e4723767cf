"""The layout's test vectors (``layout/vectors/*.json``, format in its README) run against the
Python services: each vector's operations, what each must return, and the exact keys and
values they leave in Redis, on one node and on a cluster: fakeredis (and its slot-checked
cluster layout), Redis 7 and a Redis Cluster, as the least-privilege ACL user, and Valkey.

The runner is kept generic on purpose: each operation is one service call, each matcher one
rule of the README, so that a port's runner (TypeScript, Go, ...) can mirror it line by line.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster

from _backends import backend, pick, worker
from redis_agent_sessions import Event, GetSessionConfig, RedisSessionService
from redis_agent_sessions import errors as error_types

VECTORS = Path(__file__).resolve().parent.parent / "layout" / "vectors"
LAYOUT = 1
"""The layout these vectors and this runner are for."""


def expand(value: Any) -> Any:
    """``value`` with every ``{"$repeat": [text, n]}`` replaced by ``text * n`` (the README:
    big payloads without big files)."""
    if isinstance(value, dict):
        if set(value) == {"$repeat"}:
            text, times = value["$repeat"]
            return text * times
        return {k: expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v) for v in value]
    return value


def load(path: Path) -> dict[str, Any]:
    vector: dict[str, Any] = expand(json.loads(path.read_text(encoding="utf-8")))
    return vector


def vector_files() -> list[Path]:
    return sorted(VECTORS.glob("*.json"))


# -- matchers (README, "Matching values") ----------------------------------------------------


def text(raw: Any) -> str:
    return raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)


def matches(expected: Any, raw: Any) -> bool:
    """Whether a stored value (bytes) is what ``expected`` says."""
    if isinstance(expected, str):
        return text(raw) == expected
    if isinstance(expected, bool):  # before int: a bool is no number here
        raise AssertionError(f"no matcher takes a bare boolean: {expected!r}")
    if isinstance(expected, int | float):
        return number_equal(float(text(raw)), expected)
    if isinstance(expected, dict) and set(expected) == {"json"}:
        return json_equal(json.loads(text(raw)), expected["json"])
    if isinstance(expected, dict) and set(expected) == {"any"}:
        return raw is not None
    raise AssertionError(f"unknown matcher {expected!r}")


def number_equal(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=0, abs_tol=1e-6)


def json_equal(actual: Any, expected: Any) -> bool:
    """JSON values alike: objects by their members whatever the order, numbers by value."""
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and set(actual) == set(expected)
            and all(json_equal(actual[k], v) for k, v in expected.items())
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(json_equal(a, e) for a, e in zip(actual, expected, strict=True))
        )
    if isinstance(expected, bool) or isinstance(actual, bool):
        return actual is expected
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return number_equal(actual, expected)
    return bool(actual == expected)


# -- what Redis holds ------------------------------------------------------------------------


async def all_keys(client: Any) -> list[bytes]:
    if isinstance(client, RedisCluster):
        found: set[bytes] = set()
        for node in client.get_primaries():
            found.update(await client.keys(target_nodes=node))
        return sorted(found)
    return sorted(await client.keys("*"))


async def dump(client: Any) -> dict[str, tuple[str, Any]]:
    """Every key with its type and value, as the README's key entries read them."""
    out: dict[str, tuple[str, Any]] = {}
    for key in await all_keys(client):
        kind = text(await client.type(key))
        value: Any
        if kind == "string":
            value = await client.get(key)
        elif kind == "hash":
            value = {text(f): v for f, v in (await client.hgetall(key)).items()}
        elif kind == "zset":
            value = [(text(m), s) for m, s in await client.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            entries = await client.xrange(key)
            value = [(text(i), {text(f): v for f, v in fs.items()}) for i, fs in entries]
        elif kind == "set":
            value = sorted(text(m) for m in await client.smembers(key))
        elif kind == "list":
            value = [text(v) for v in await client.lrange(key, 0, -1)]
        else:
            raise AssertionError(f"key {key!r} has a type the layout never uses: {kind}")
        out[text(key)] = (kind, value)
    return out


def check_key(name: str, entry: dict[str, Any], kind: str, value: Any) -> None:
    where = f"key {name}"
    assert kind == entry["type"], f"{where}: type {kind}, expected {entry['type']}"
    want = entry["value"]
    if kind == "string":
        assert matches(want, value), f"{where}: {value!r} is not {want!r}"
    elif kind == "hash":
        assert set(value) == set(want), f"{where}: fields {sorted(value)}, expected {sorted(want)}"
        for field, matcher in want.items():
            assert matches(matcher, value[field]), f"{where} field {field}: {value[field]!r}"
    elif kind == "zset":
        assert [m for m, _ in value] == [m for m, _ in want], f"{where}: members {value}"
        for (member, score), (_, expected) in zip(value, want, strict=True):
            assert matches(expected, repr(score)), f"{where} {member}: score {score}"
    elif kind == "stream":
        assert len(value) == len(want), f"{where}: {len(value)} entries, expected {len(want)}"
        for (entry_id, fields), expected in zip(value, want, strict=True):
            assert matches(expected["id"], entry_id), f"{where}: entry {entry_id}"
            assert set(fields) == set(expected["fields"]), f"{where} {entry_id}: {fields}"
            for field, matcher in expected["fields"].items():
                assert matches(matcher, fields[field]), f"{where} {entry_id} {field}"
    else:  # set (sorted) and list
        assert value == want, f"{where}: {value!r}"


async def check_keys(client: Any, expected: dict[str, Any], layout: str) -> None:
    """Redis holds exactly the keys ``expected`` lists for ``layout``, with those values."""
    wanted = {k: e for k, e in expected.items() if layout in e.get("layouts", [layout])}
    stored = await dump(client)
    assert sorted(stored) == sorted(wanted), "keys differ"
    for name, entry in wanted.items():
        check_key(name, entry, *stored[name])


# -- the operations (README, "Operations"): one service call each ----------------------------


class Run:
    """One vector's run: the service, and the session copies its operations named."""

    def __init__(self, service: RedisSessionService) -> None:
        self.service = service
        self.copies: dict[str, Any] = {}

    async def create_session(self, op: dict[str, Any]) -> Any:
        # create_time pins the creation clock (the README: no generated value in a vector);
        # the public call takes none, the import path that keeps an original's does.
        session = await self.service._engine.writes.create_session(
            app_name=op["app_name"],
            user_id=op["user_id"],
            session_id=op["session_id"],
            state=op.get("state"),
            ttl=None,
            create_time=op["create_time"],
        )
        return self.keep(op, session)

    async def get_session(self, op: dict[str, Any]) -> Any:
        config = op.get("config")
        session = await self.service.get_session(
            app_name=op["app_name"],
            user_id=op["user_id"],
            session_id=op["session_id"],
            config=None if config is None else GetSessionConfig(**config),
        )
        return self.keep(op, session)

    async def append_event(self, op: dict[str, Any]) -> Any:
        event = Event.model_validate(op["event"])
        return {"event": await self.service.append_event(self.copies[op["session"]], event)}

    async def list_sessions(self, op: dict[str, Any]) -> Any:
        listed = await self.service.list_sessions(
            app_name=op["app_name"], user_id=op.get("user_id")
        )
        return {"sessions": listed.sessions}

    async def delete_session(self, op: dict[str, Any]) -> Any:
        await self.service.delete_session(
            app_name=op["app_name"], user_id=op["user_id"], session_id=op["session_id"]
        )
        return {}

    def keep(self, op: dict[str, Any], session: Any) -> dict[str, Any]:
        if "as" in op and session is not None:
            self.copies[op["as"]] = session
        return {"session": session}


def canonical(result: dict[str, Any]) -> dict[str, Any]:
    """A call's result in the canonical encoding, for comparing with ``expect``: model
    fields that are None left out (as stored), null values in state and deltas kept."""
    out: dict[str, Any] = {}
    for name, value in result.items():
        if isinstance(value, list):
            out[name] = [v.model_dump(mode="json", exclude_none=True) for v in value]
        else:
            out[name] = None if value is None else value.model_dump(mode="json", exclude_none=True)
    return out


async def run_vector(vector: dict[str, Any], admin: Any, client: Any, layout: str) -> None:
    assert vector["layout"] == LAYOUT, f"a vector of layout {vector['layout']}"
    run = Run(RedisSessionService(client))
    for step, op in enumerate(vector["operations"]):
        where = f"operation {step} ({op['op']})"
        if op["op"] == "delete_key":  # what eviction or an operator does, not a service
            await admin.delete(op["key"])
            continue
        before = await dump(admin) if op.get("unchanged") else None
        expect = op.get("expect", {})
        if "error" in expect:
            error = getattr(error_types, expect["error"])
            with pytest.raises(error):
                await getattr(run, op["op"])(op)
        else:
            got = canonical(await getattr(run, op["op"])(op))
            for name, value in expect.items():
                assert json_equal(got[name], value), f"{where}: {name} {got[name]!r}"
        if before is not None:
            assert await dump(admin) == before, f"{where}: changed what Redis holds"
    await check_keys(admin, vector["keys"], layout)


@pytest.fixture(
    params=pick("fake", "fake-slots", "real", "cluster", "acl", "valkey", "valkey-cluster")
)
async def clients(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Any, Any, str]]:
    kind: str = request.param
    async with backend(kind, monkeypatch) as admin, worker(kind, admin) as client:
        yield admin, client, "cluster" if "cluster" in kind or kind == "fake-slots" else "single"


@pytest.mark.parametrize("path", vector_files(), ids=lambda p: p.stem)
async def test_vector(path: Path, clients: tuple[Any, Any, str]) -> None:
    await run_vector(load(path), *clients)


def test_vectors_are_there_and_named_by_their_file() -> None:
    files = vector_files()
    assert len(files) >= 8
    for path in files:
        vector = json.loads(path.read_text(encoding="utf-8"))
        assert vector["name"] == path.stem
        assert vector["layout"] == LAYOUT
