"""What the operator commands print, as a reader sees it: the sessions a dry-run purge would
delete, counts in the right number, one time format, and tables without trailing spaces; on
real Redis 7 and on the real cluster (the ``cli`` fixture of ``_cli.py``)."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from pathlib import Path

import pytest

from _cli import Cli, drop
from redis_agent_sessions import RedisMemoryService, SessionServiceConfig
from redis_agent_sessions._messages import plural
from test_cli import _event, seed

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
"""UTC, ISO-8601 with the zone marked, to the second: the one time format of the output."""


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, tz=dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_plural_names_one_and_many() -> None:
    assert plural(1, "session") == "1 session"
    assert plural(0, "session") == "0 sessions"
    assert plural(2, "entry", "entries") == "2 entries"
    assert plural(1, "entry", "entries") == "1 entry"
    assert plural(12_345, "user") == "12,345 users"
    assert plural(1, "write", at_least=True) == "1+ writes"


async def test_purge_dry_run_lists_the_sessions_it_would_delete(cli: Cli) -> None:
    made = await seed(cli, age_days=10)
    async with cli.service() as svc:  # one recent session, which is not listed
        fresh = await svc.create_session(app_name="booking", user_id="alice", session_id="new")
        await svc.append_event(fresh, _event("user", time.time(), [{"text": "hi"}]))
    dry = cli.run("purge", "booking", "--older-than", "7d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    header, *rows, summary = dry.stdout.splitlines()
    assert header.split() == ["APP", "USER", "SESSION", "UPDATED"]
    listed = {tuple(row.split()) for row in rows}
    assert listed == {
        ("booking", user, sid, _iso(made[sid].last_update_time))
        for user, sid in (("alice", "a1"), ("alice", "a2"), ("bob", "b1"))
    }
    assert re.fullmatch(rf"3 sessions last updated before {ISO} \(dry run\)", summary), summary

    report = cli.json("purge", "booking", "--older-than", "7d", "--dry-run", "--user", "alice")
    assert report["dry_run"] is True
    assert report["count"] == 2
    assert re.fullmatch(ISO, report["last_updated_before"])
    assert sorted(report["sessions"], key=lambda s: s["id"]) == [
        {
            "app_name": "booking",
            "user_id": "alice",
            "id": sid,
            "last_update_time": _iso(made[sid].last_update_time),
        }
        for sid in ("a1", "a2")
    ]
    assert len(cli.json("ls", "booking")["sessions"]) == 4  # a dry run deletes nothing
    nothing = cli.run("purge", "booking", "--older-than", "30d", "--dry-run", "--json")
    assert (nothing.returncode, nothing.stdout) == (1, "")


async def test_purge_dry_run_streams_every_page_under_one_header(cli: Cli) -> None:
    """Two full pages of the walk (500 sessions each): all listed, one header, the columns
    aligned, and JSON that parses."""
    old = time.time() - 3600
    async with cli.service() as svc:
        for i in range(1000):
            await svc._engine.writes.create_session(
                app_name="bulk", user_id=f"u{i % 7}", session_id=f"s{i:04d}", create_time=old + i
            )
    dry = cli.run("purge", "bulk", "--older-than", "1m", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    header, *rows, summary = dry.stdout.splitlines()
    assert header.split() == ["APP", "USER", "SESSION", "UPDATED"]
    assert sorted(row.split()[2] for row in rows) == [f"s{i:04d}" for i in range(1000)]
    assert len({row.index(" s") for row in rows}) == 1  # the SESSION column lines up
    assert summary.startswith("1,000 sessions last updated before ")
    report = cli.json("purge", "bulk", "--older-than", "1m", "--dry-run")
    assert report["count"] == len(report["sessions"]) == 1000


async def test_counts_read_in_the_right_number(cli: Cli, tmp_path: Path) -> None:
    old = time.time() - 10 * 86400
    async with cli.service() as svc:
        s = await svc.create_session(app_name="solo", user_id="ann", session_id="only")
        await svc.append_event(s, _event("user", old, [{"text": "hi"}]))
    dump = tmp_path / "solo.jsonl"
    exported = cli.run("export", "solo", "-o", str(dump))
    assert "exported 1 session (1 event)" in exported.stderr
    target = f"{cli.prefix}-copy"
    try:
        imported = cli.run("import", str(dump), prefix=target)
        assert "imported 1 session (1 event)" in imported.stderr
        again = cli.run("import", str(dump), "--skip-existing", prefix=target)
        assert "imported 0 sessions (0 events); 1 existed and was skipped" in again.stderr
        stopped = cli.run("import", str(dump), prefix=target)
        assert "nothing was imported before it" in stopped.stderr
        twice = tmp_path / "twice.jsonl"
        lines = dump.read_text().splitlines()
        other = json.loads(lines[0]) | {"id": "other"}
        twice.write_text("\n".join([json.dumps(other), lines[0]]) + "\n")
        stopped = cli.run("import", str(twice), prefix=target)
        assert "the 1 session imported before it is whole" in stopped.stderr
    finally:
        await drop(cli, target)
    dry = cli.run("purge", "solo", "--older-than", "7d", "--dry-run")
    assert "\n1 session last updated before " in dry.stdout
    asked = cli.run("purge", "solo", "--older-than", "7d", stdin="")
    assert "Delete 1 session of app 'solo'" in asked.stderr
    asked = cli.run("delete", "solo", "ann", "only", stdin="")
    assert "(1 event)?" in asked.stderr
    done = cli.run("delete", "solo", "ann", "only", "--yes")
    assert "deleted session 'only' (1 event)" in done.stderr
    stats = cli.run("stats", "--sample", "1")
    assert "up to 1 session per app" in stats.stdout


async def test_times_are_utc_iso_8601_with_the_zone_marked(cli: Cli) -> None:
    made = await seed(cli)
    a1 = made["a1"]
    apps = cli.json("ls")
    assert all(re.fullmatch(ISO, app["first_session"]) for app in apps)
    listed = {s["id"]: s for s in cli.json("ls", "booking")["sessions"]}
    assert listed["a1"]["last_update_time"] == _iso(a1.last_update_time)
    assert re.fullmatch(ISO, listed["a1"]["create_time"])
    old_style = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d|\d\d:\d\d:\d\d\.\d|\bUTC\b")
    for args in (
        ("ls",),
        ("ls", "booking"),
        ("show", "booking", "alice", "a1"),
        ("tail", "booking", "alice", "a1"),
    ):
        out = cli.run(*args)
        assert out.returncode == 0, out.stderr
        assert re.search(ISO, out.stdout), (args, out.stdout)
        assert not old_style.search(out.stdout), (args, out.stdout)
    shown = cli.run("show", "booking", "alice", "a1").stdout
    assert f"updated {_iso(a1.last_update_time)}" in shown
    # A memory entry's own timestamp (ADK's: local time, no zone) is shown the same way.
    client = cli.client()
    async with client:
        memory = RedisMemoryService(client, config=SessionServiceConfig(key_prefix=cli.prefix))
        await memory.add_session_to_memory(a1)
    found = cli.json("search", "booking", "alice", "paris")
    assert all(re.fullmatch(ISO, entry["timestamp"]) for entry in found), found
    assert _iso(a1.events[0].timestamp) in {entry["timestamp"] for entry in found}
    human = cli.run("search", "booking", "alice", "paris").stdout
    assert _iso(a1.events[0].timestamp) in human
    assert not old_style.search(human), human


@pytest.mark.parametrize("memory", [False, True], ids=["sessions", "with-memory"])
async def test_no_output_line_ends_with_a_space(cli: Cli, memory: bool) -> None:
    made = await seed(cli, age_days=10)
    if memory:
        client = cli.client()
        async with client:
            config = SessionServiceConfig(key_prefix=cli.prefix)
            await RedisMemoryService(client, config=config).add_session_to_memory(made["a1"])
    commands = [
        ("ls",),
        ("ls", "booking"),
        ("ls", "booking", "--limit", "1"),
        ("show", "booking", "alice", "a1"),
        ("show", "other app", "carol", "s:1 {x}"),
        ("tail", "booking", "alice", "a1"),
        ("stats",),
        ("purge", "booking", "--older-than", "1d", "--dry-run"),
        ("ping",),
        ("expired", "booking", "--dry-run"),
        ("sweep", "booking", "--dry-run"),
    ]
    if memory:
        commands.append(("search", "booking", "alice", "paris"))
    for args in commands:
        out = cli.run(*args)
        assert out.returncode == 0, (args, out.stderr)
        padded = [line for line in out.stdout.splitlines() if line != line.rstrip()]
        assert padded == [], (args, out.stdout)
