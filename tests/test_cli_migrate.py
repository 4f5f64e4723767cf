"""``redis-agent-sessions migrate``: an ADK DatabaseSessionService file, copied into Redis.

The source is built by ADK itself and the CLI runs as a user would (a process of its own,
forked from one that imported it: ``_cli.Forkers``); every copied session must then read
back through our ADK drop-in exactly as ADK reads it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="needs the [adk] extra (google.adk is not installed)")
pytest.importorskip("sqlalchemy", reason="migrate reads through google-adk[db] (sqlalchemy)")
pytest.importorskip("aiosqlite")

from google.adk.events import Event, EventActions
from google.adk.sessions import DatabaseSessionService, Session
from google.genai import types
from redis.asyncio import Redis

from _cli import FORKERS
from _servers import skip_without
from redis_agent_sessions import SessionServiceConfig
from redis_agent_sessions.adk import RedisSessionService

pytestmark = [pytest.mark.real, pytest.mark.adk, pytest.mark.cli]

PNG = b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary \x00"


@dataclass
class Source:
    url: str
    ids: list[tuple[str, str, str]]  # (app, user, session id) of every session
    events: int


# What a migration imports beyond the other commands: once, in the forker.
PRELOAD = ("google.adk.sessions", "sqlalchemy.ext.asyncio", "aiosqlite")


def migrate(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "always::ResourceWarning"}
    env.pop("RAS_PROGRESS", None)
    argv = ["migrate", *args]
    return FORKERS.run(argv, env=env, preload=PRELOAD, timeout=300)


async def run(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(migrate, *args)


def text(role: str, value: str, **actions: Any) -> Event:
    return Event(
        author="user" if role == "user" else "agent",
        invocation_id="inv-1",
        content=types.Content(role=role, parts=[types.Part(text=value)]),
        actions=EventActions(**actions),
    )


async def build(path: Path) -> Source:
    """Several apps, users and sessions, written through ADK's own service."""
    adk = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{path}")
    ids: list[tuple[str, str, str]] = []
    events = 0

    async def session(app: str, user: str, sid: str, state: dict[str, Any], *evs: Event) -> None:
        nonlocal events
        s = await adk.create_session(app_name=app, user_id=user, session_id=sid, state=state)
        for event in evs:
            await adk.append_event(s, event)
        ids.append((app, user, sid))
        events += len(evs)

    call = types.FunctionCall(id="call-1", name="book_flight", args={"to": "Zürich", "n": 2})
    answer = types.FunctionResponse(id="call-1", name="book_flight", response={"ok": True})
    try:
        await session(
            "travel",
            "alice",
            "trip-1",
            {"city": "Zürich", "nothing": None, "user:tier": "gold", "app:version": 2},
            text("user", "Bonjour ✈️ 你好, book me a flight", state_delta={"asked": True}),
            Event(
                author="agent",
                invocation_id="inv-1",
                content=types.Content(role="model", parts=[types.Part(function_call=call)]),
            ),
            Event(
                author="agent",
                invocation_id="inv-1",
                content=types.Content(role="user", parts=[types.Part(function_response=answer)]),
                actions=EventActions(
                    state_delta={
                        "booked": True,
                        "user:last_city": "Zürich",
                        "app:bookings": 1,
                        "temp:scratch": "dropped",
                    }
                ),
            ),
            Event(
                author="agent",
                invocation_id="inv-1",
                content=types.Content(
                    role="model",
                    parts=[
                        types.Part(inline_data=types.Blob(mime_type="image/png", data=PNG)),
                        types.Part(text="Voilà — your ticket 🎫"),
                    ],
                ),
            ),
        )
        await session("travel", "alice", "trip-2", {"draft": True, "user:tier": "platinum"})
        await session(
            "travel",
            "bob",
            "b-1",
            {},
            text("user", "hello"),
            text("model", "hi bob", state_delta={"greeted": None, "app:bookings": 2}),
        )
        await session("support", "zoë", "ticket-1", {"prio": 1}, text("user", "ça marche pas"))
        await session("support", "alice", "ticket-2", {}, text("user", "refund", state_delta={}))
    finally:
        await adk.close()
    return Source(f"sqlite+aiosqlite:///{path}", ids, events)


@pytest.fixture
def redis_url() -> str:
    return skip_without("REDIS_URL")


@pytest.fixture
def prefix() -> str:
    return f"test-migrate-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def source(tmp_path: Path) -> Source:
    return await build(tmp_path / "adk.db")


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def keys_under(client: Redis, prefix: str) -> list[bytes]:
    return [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]


def dumped(session: Session) -> dict[str, Any]:
    return {
        "ids": (session.app_name, session.user_id, session.id),
        "state": session.state,
        "events": [e.model_dump(mode="json") for e in session.events],
        "last_update_time": session.last_update_time,
    }


async def test_migrate_copies_every_session_as_adk_reads_it(
    source: Source, redis_url: str, prefix: str, client: Redis
) -> None:
    done = await run("--from", source.url, "--url", redis_url, "--key-prefix", prefix)

    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.strip() == (
        f"migrated 5 sessions ({source.events} events) from 2 apps; 0 already in Redis; "
        "check: 5 of 5 source sessions present"
    )
    ours = RedisSessionService(client=client, config=SessionServiceConfig(key_prefix=prefix))
    adk = DatabaseSessionService(db_url=source.url)
    try:
        for app, user, sid in source.ids:
            theirs = await adk.get_session(app_name=app, user_id=user, session_id=sid)
            copied = await ours.get_session(app_name=app, user_id=user, session_id=sid)
            assert theirs is not None
            assert copied is not None, (app, user, sid)
            assert dumped(copied) == dumped(theirs)
            assert not any(key.startswith("temp:") for key in copied.state)
    finally:
        await adk.close()
    trip = await ours.get_session(app_name="travel", user_id="alice", session_id="trip-1")
    assert trip is not None
    assert trip.state["nothing"] is None
    assert trip.state["app:bookings"] == 2  # app state as it is now, not as trip-1 left it
    blob = trip.events[-1].content.parts[0].inline_data  # type: ignore[union-attr,index]
    assert blob is not None
    assert blob.data == PNG

    again = await run("--from", source.url, "--url", redis_url, "--key-prefix", prefix)

    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout.startswith("migrated 0 sessions (0 events) from 2 apps; 5 already in Redis")
    assert "check: 5 of 5 source sessions present" in again.stdout


async def test_an_interrupted_migration_resumes(
    source: Source, redis_url: str, prefix: str
) -> None:
    common = ("--from", source.url, "--url", redis_url, "--key-prefix", prefix)
    first = await run(*common, "--app", "support")
    assert (first.returncode, first.stderr) == (0, "")
    assert first.stdout.startswith("migrated 2 sessions (2 events) from 1 app; 0 already")

    rest = await run(*common)

    assert (rest.returncode, rest.stderr) == (0, "")
    assert rest.stdout.startswith(
        f"migrated 3 sessions ({source.events - 2} events) from 2 apps; 2 already in Redis"
    )
    assert "check: 5 of 5 source sessions present" in rest.stdout


async def test_dry_run_counts_and_writes_nothing(
    source: Source, redis_url: str, prefix: str, client: Redis
) -> None:
    done = await run("--from", source.url, "--url", redis_url, "--key-prefix", prefix, "--dry-run")

    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.strip() == (
        f"dry run: would migrate 5 sessions ({source.events} events) from 2 apps; "
        "0 already in Redis; nothing written"
    )
    assert await keys_under(client, prefix) == []


async def test_an_app_with_no_sessions_matches_nothing(
    source: Source, redis_url: str, prefix: str, client: Redis
) -> None:
    done = await run(
        "--from", source.url, "--url", redis_url, "--key-prefix", prefix, "--app", "nope"
    )

    assert done.returncode == 1
    assert (
        done.stderr == "redis-agent-sessions: app 'nope' has no sessions in the source database\n"
    )
    assert await keys_under(client, prefix) == []


def test_a_failed_count_check_exits_1(
    source: Source,
    redis_url: str,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from redis_agent_sessions.cli import _migrate, main

    async def lost(engine: Any, record: dict[str, Any], replace: bool = False) -> bool:
        return True  # reports a write that never reached Redis

    monkeypatch.setattr(_migrate, "import_record", lost)

    code = main(["migrate", "--from", source.url, "--url", redis_url, "--key-prefix", prefix])

    out, err = capsys.readouterr()
    assert code == 1
    assert "check: 0 of 5 source sessions present" in out
    assert err == "redis-agent-sessions: check failed: 5 source sessions are not in Redis\n"


async def test_a_database_without_sessions_matches_nothing(
    tmp_path: Path, redis_url: str, prefix: str
) -> None:
    empty = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}")
    await empty.prepare_tables()
    await empty.close()

    done = await run("--from", f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}", "--url", redis_url)

    assert done.returncode == 1
    assert "holds no sessions" in done.stderr


@pytest.mark.parametrize(
    ("source_url", "redis", "message"),
    [
        ("sqlite+aiosqlite:///{tmp}/missing.db", "", "no SQLite database file"),
        ("sqlite+aiosqlite:///{tmp}/adk.db", "redis://127.0.0.1:1/0", "cannot reach Redis"),
        ("not a url", "", "--from is not a database URL"),
        ("nosuchdb+nodriver://host/db", "", "bad --from"),
        ("sqlite:///{tmp}/adk.db", "", "asynchronous"),
        ("sqlite+aiosqlite:///{tmp}/garbage.db", "", "cannot read --from"),
    ],
    ids=["missing-file", "unreachable-redis", "malformed", "unknown-driver", "sync", "not-a-db"],
)
async def test_bad_input_is_one_line_and_exit_2(
    source: Source,
    tmp_path: Path,
    redis_url: str,
    prefix: str,
    client: Redis,
    source_url: str,
    redis: str,
    message: str,
) -> None:
    (tmp_path / "garbage.db").write_bytes(b"this is not a database " * 100)
    url = source_url.format(tmp=tmp_path)

    done = await run("--from", url, "--url", redis or redis_url, "--key-prefix", prefix)

    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("redis-agent-sessions: ")
    assert message in done.stderr
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr
    assert await keys_under(client, prefix) == []
    assert not (tmp_path / "missing.db").exists()
