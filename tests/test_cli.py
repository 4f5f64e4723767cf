"""The operator CLI, run as a user runs it: a subprocess per command, on real Redis 7 and on
the real cluster, with data seeded through the library under a fresh key prefix."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError

from _cli import Cli, drop
from redis_agent_sessions import (
    Event,
    RedisMemoryService,
    RedisSessionService,
    Session,
    SessionServiceConfig,
)


def _bare(*args: str) -> Any:
    """The CLI without the fixture's URL and prefix."""
    command = [sys.executable, "-m", "redis_agent_sessions", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def _event(author: str, ts: float, parts: list[dict[str, Any]], **delta: Any) -> Event:
    return Event.model_validate(
        {
            "author": author,
            "invocation_id": "inv-1",
            "timestamp": ts,
            "content": {"role": "user" if author == "user" else "model", "parts": parts},
            "actions": {"state_delta": delta},
        }
    )


async def seed(cli: Cli, *, age_days: float = 0) -> dict[str, Session]:
    """Two apps: booking (alice 2 sessions, bob 1) and 'other app' (an awkward session id),
    with text, unicode, function calls and responses, inline data and None values."""
    base = time.time() - age_days * 86400
    made: dict[str, Session] = {}
    async with cli.service() as svc:
        for user, sid in (("alice", "a1"), ("alice", "a2"), ("bob", "b1")):
            s = await svc.create_session(
                app_name="booking",
                user_id=user,
                session_id=sid,
                state={"step": 0, "user:lang": "fr", "app:version": 2, "nothing": None},
            )
            await svc.append_event(
                s,
                _event("user", base + 1, [{"text": f"Book Paris ✈ for {user} — café?"}], step=1),
            )
            await svc.append_event(
                s,
                _event(
                    "agent",
                    base + 2,
                    [
                        {"function_call": {"id": "c1", "name": "book", "args": {"to": "Paris"}}},
                        {"inline_data": {"mime_type": "image/png", "data": "iVBORw0KGgo="}},
                    ],
                    **{"user:seen": True, "none": None},
                ),
            )
            await svc.append_event(
                s,
                _event(
                    "tool",
                    base + 3,
                    [{"function_response": {"id": "c1", "name": "book", "response": {"ok": 1}}}],
                    **{"app:bookings": 1},
                ),
            )
            await svc.append_event(s, _event("agent", base + 4, [{"text": f"Done, {user} 日本"}]))
            made[sid] = s
        odd = await svc.create_session(app_name="other app", user_id="carol", session_id="s:1 {x}")
        await svc.append_event(odd, _event("user", base + 5, [{"text": "hello"}]))
        made["odd"] = odd
    return made


async def test_ls_lists_apps_then_sessions_paged(cli: Cli) -> None:
    await seed(cli)
    apps = {a["app_name"]: a["sessions"] for a in cli.json("ls")}
    assert apps == {"booking": 3, "other app": 1}
    human = cli.run("ls")
    assert human.returncode == 0
    assert "booking" in human.stdout
    assert "other app" in human.stdout

    first = cli.json("ls", "booking", "--limit", "2", "--order", "created", "--oldest-first")
    assert [s["id"] for s in first["sessions"]] == ["a1", "a2"]
    assert [s["events"] for s in first["sessions"]] == [4, 4]
    assert first["sessions"][0]["state_keys"] == 3  # step, nothing (None), none
    rest = cli.json(
        "ls", "booking", "--limit", "2", "--order", "created", "--oldest-first",
        "--page", first["next_page_token"],
    )  # fmt: skip
    assert [s["id"] for s in rest["sessions"]] == ["b1"]
    assert rest["next_page_token"] is None
    assert [s["id"] for s in cli.json("ls", "booking", "--user", "bob")["sessions"]] == ["b1"]
    table = cli.run("ls", "other app").stdout
    assert "s:1 {x}" in table
    assert "carol" in table


async def test_show_prints_state_by_scope_and_a_transcript(cli: Cli) -> None:
    await seed(cli)
    out = cli.run("show", "booking", "alice", "a1")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for expected in (
        "user:lang",
        "app:version",
        'call book({"to":"Paris"})',
        "result book:",
        "image/png",
        "Book Paris ✈ for alice — café?",
        "Done, alice 日本",
        "state step = 1",
    ):
        assert expected in text, (expected, text)
    record = cli.json("show", "booking", "alice", "a1")
    assert record["state"] == {
        "session": {"none": None, "nothing": None, "step": 1},
        "user": {"lang": "fr", "seen": True},
        "app": {"bookings": 1, "version": 2},
    }
    async with cli.service() as svc:
        stored = await svc.get_session(app_name="booking", user_id="alice", session_id="a1")
    assert stored is not None
    assert record["events"] == [e.model_dump(mode="json", exclude_none=True) for e in stored.events]
    assert record["last_update_time"] == stored.last_update_time
    last = cli.json("show", "booking", "alice", "a1", "--last", "1")
    assert [e["id"] for e in last["events"]] == [stored.events[-1].id]


async def test_tail_prints_the_newest_events(cli: Cli) -> None:
    await seed(cli)
    out = cli.run("tail", "booking", "bob", "b1", "-n", "2")
    assert out.returncode == 0, out.stderr
    assert "Done, bob 日本" in out.stdout
    assert "Book Paris" not in out.stdout
    lines = cli.run("tail", "booking", "bob", "b1", "-n", "4", "--json").stdout.splitlines()
    assert [json.loads(line)["author"] for line in lines] == ["user", "agent", "tool", "agent"]


async def test_search_shows_scores_and_matched_words(cli: Cli) -> None:
    made = await seed(cli)
    assert cli.run("search", "booking", "alice", "paris").returncode == 1  # no memory yet
    client = cli.client()
    async with client:
        memory = RedisMemoryService(client, config=SessionServiceConfig(key_prefix=cli.prefix))
        await memory.add_session_to_memory(made["a1"])
    results = cli.json("search", "booking", "alice", "paris café zebra")
    assert results
    assert results[0]["matched_words"] == ["café", "paris"]
    assert results[0]["found_by"] == ["keyword"]
    scores = [row["score"] for row in results]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] > 0
    human = cli.run("search", "booking", "alice", "paris")
    assert human.returncode == 0
    assert "0.00" not in human.stdout
    assert "paris" in human.stdout
    assert cli.run("search", "booking", "alice", "zebra").returncode == 1


async def test_stats_counts_every_app(cli: Cli) -> None:
    await seed(cli)
    report = cli.json("stats")
    apps = {a["app_name"]: a for a in report["apps"]}
    assert apps["booking"]["sessions"] == 3
    assert apps["booking"]["users"] == 2
    assert apps["booking"]["events"] == 12
    assert apps["other app"]["events"] == 1
    assert apps["booking"]["bytes"] > 0
    assert apps["booking"]["bytes_sampled_sessions"] == 3
    assert report["server"]["version"].split(".")[0] >= "7"
    assert report["server"]["name"] == "Redis"
    human = cli.run("stats", "booking")
    assert human.returncode == 0
    assert "MEMORY USAGE" in human.stdout
    assert report["memory_vectors"] is None
    assert "vectors: none" in human.stdout
    assert cli.run("stats", "nope").returncode == 1


async def test_export_flush_import_export_is_byte_identical(cli: Cli, tmp_path: Path) -> None:
    await seed(cli)
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    for app, name in (("booking", "b"), ("other app", "o")):
        assert cli.run("export", app, "-o", str(tmp_path / f"{name}1.jsonl")).returncode == 0
    first.write_bytes((tmp_path / "b1.jsonl").read_bytes() + (tmp_path / "o1.jsonl").read_bytes())
    async with cli.service() as svc:
        before = await svc.get_session(app_name="booking", user_id="alice", session_id="a1")
    await drop(cli, cli.prefix)
    assert cli.run("ls").returncode == 1

    imported = cli.run("import", str(first))
    assert imported.returncode == 0, imported.stderr
    assert "imported 4 sessions (13 events)" in imported.stderr
    for app, name in (("booking", "b"), ("other app", "o")):
        assert cli.run("export", app, "-o", str(tmp_path / f"{name}2.jsonl")).returncode == 0
    second.write_bytes((tmp_path / "b2.jsonl").read_bytes() + (tmp_path / "o2.jsonl").read_bytes())
    assert second.read_bytes() == first.read_bytes()
    async with cli.service() as svc:
        after = await svc.get_session(app_name="booking", user_id="alice", session_id="a1")
        assert after == before
        # The imported session takes appends like any other.
        assert after is not None
        await svc.append_event(after, _event("user", time.time(), [{"text": "again"}]))
    assert len(cli.json("show", "booking", "alice", "a1")["events"]) == 5


async def test_import_refuses_existing_sessions_unless_told(cli: Cli, tmp_path: Path) -> None:
    await seed(cli)
    dump = tmp_path / "booking.jsonl"
    assert cli.run("export", "booking", "-o", str(dump)).returncode == 0
    refused = cli.run("import", str(dump))
    assert refused.returncode == 1  # what is stored stops it (data), not how it was called
    assert "exists" in refused.stderr
    assert "stopped there: nothing was imported before it" in refused.stderr
    skipped = cli.run("import", str(dump), "--skip-existing")
    assert skipped.returncode == 0
    assert "3 existed" in skipped.stderr
    async with cli.service() as svc:
        s = await svc.get_session(app_name="booking", user_id="bob", session_id="b1")
        assert s is not None
        await svc.append_event(s, _event("user", time.time(), [{"text": "newer"}]))
    replaced = cli.run("import", str(dump), "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert len(cli.json("show", "booking", "bob", "b1")["events"]) == 4


async def test_a_bad_line_stops_the_import_with_earlier_sessions_whole(
    cli: Cli, tmp_path: Path
) -> None:
    await seed(cli)
    dump = tmp_path / "booking.jsonl"
    assert cli.run("export", "booking", "-o", str(dump)).returncode == 0
    lines = dump.read_bytes().splitlines()
    broken = json.loads(lines[1])
    broken["events"][2]["timestamp"] = "yesterday"
    cases = [
        b"not json",
        json.dumps(broken).encode(),
        json.dumps({**json.loads(lines[1]), "state": {"session": [], "user": {}}}).encode(),
    ]
    target = f"{cli.prefix}-import"
    try:
        for bad in cases:
            dump.write_bytes(b"\n".join([lines[0], bad, lines[2]]))
            result = cli.run("import", str(dump), prefix=target, stdin="")
            assert result.returncode == 2, result.stderr
            assert f"{dump}:2:" in result.stderr
            ls = cli.run("ls", "booking", "--json", prefix=target)
            ids = [s["id"] for s in json.loads(ls.stdout)["sessions"]]
            assert ids == ["a1"]  # the first line whole, nothing of the second or third
            shown = cli.run("show", "booking", "alice", "a1", "--json", prefix=target)
            assert len(json.loads(shown.stdout)["events"]) == 4
            await drop(cli, target)
    finally:
        await drop(cli, target)


async def test_delete_asks_first_and_purge_deletes_only_old_sessions(cli: Cli) -> None:
    await seed(cli, age_days=10)
    refused = cli.run("delete", "booking", "alice", "a1", stdin="")
    assert refused.returncode == 2
    assert "--yes" in refused.stderr
    assert cli.json("show", "booking", "alice", "a1")["id"] == "a1"
    assert cli.run("delete", "booking", "alice", "a1", "--yes").returncode == 0
    assert cli.run("show", "booking", "alice", "a1").returncode == 1
    assert cli.run("delete", "booking", "alice", "a1", "--yes").returncode == 1

    async with cli.service() as svc:  # one recent session of alice
        fresh = await svc.create_session(app_name="booking", user_id="alice", session_id="new")
        await svc.append_event(fresh, _event("user", time.time(), [{"text": "hi"}]))
    assert cli.run("purge", "booking", "--older-than", "30d").returncode == 1
    dry = cli.run("purge", "booking", "--older-than", "7d", "--dry-run")
    assert dry.returncode == 0
    assert "2 sessions" in dry.stdout
    assert cli.run("purge", "booking", "--older-than", "7d", stdin="").returncode == 2
    done = cli.run("purge", "booking", "--older-than", "7d", "--yes")
    assert done.returncode == 0
    assert "deleted 2 sessions" in done.stderr
    remaining = cli.json("ls", "booking")["sessions"]
    assert [s["id"] for s in remaining] == ["new"]


def test_only_a_server_not_there_gets_the_how_to_start_one_hint() -> None:
    from redis_agent_sessions.cli._context import _nothing_there

    assert _nothing_there(RedisConnectionError("Error 111 connecting to 127.0.0.1:1."))
    assert _nothing_there(TimeoutError("Timeout connecting to server"))
    assert _nothing_there(ConnectionRefusedError(111, "Connection refused"))
    # A server that answers (a wrong password) is there: starting one would not help.
    assert not _nothing_there(AuthenticationError("invalid username-password pair"))


async def test_bad_input_gets_one_clear_line(cli: Cli) -> None:
    made = await seed(cli)
    assert cli.run("ls", "nope").returncode == 1
    assert cli.run("show", "booking", "alice", "missing").returncode == 1
    assert cli.run("tail", "booking", "alice", "missing").returncode == 1
    bad_duration = cli.run("purge", "booking", "--older-than", "soon")
    assert bad_duration.returncode == 2
    assert "duration" in bad_duration.stderr

    unreachable = _bare("ls", "--url", "redis://127.0.0.1:1/0")
    assert unreachable.returncode == 2
    assert "cannot reach Redis" in unreachable.stderr
    # Nothing listens there: the one line says what to do next.
    assert "docs/tutorial.md#2-have-a-redis" in unreachable.stderr
    assert "redis-agent-sessions demo --keep-server" in unreachable.stderr
    assert len(unreachable.stderr.splitlines()) == 1
    for url in ("http://localhost", "redis://localhost:6379/0?key_prefx=x"):
        malformed = _bare("ls", "--url", url)
        assert malformed.returncode == 2
        assert "bad Redis URL" in malformed.stderr
        assert len(malformed.stderr.splitlines()) == 1

    keys = RedisSessionService(Redis(), config=SessionServiceConfig(key_prefix=cli.prefix))
    meta = keys._engine.keys.session("booking", "alice", "a2").meta
    events = keys._engine.keys.session("booking", "bob", "b1").events
    client = cli.client()
    async with client:
        await client.xadd(events, {"event": b"{not json"})
        await client.delete(meta)
        await client.set(meta, "garbage")
    corrupt = cli.run("show", "booking", "bob", "b1")
    assert corrupt.returncode == 1
    assert events in corrupt.stderr
    wrong_type = cli.run("show", "booking", "alice", "a2")
    assert wrong_type.returncode == 1
    assert "WRONGTYPE" in wrong_type.stderr
    assert made


async def test_a_bad_page_token_names_the_flag_given(cli: Cli) -> None:
    await seed(cli)
    for token in ("garbage", "W1tdLFtdXQ"):  # not a token; a token of another listing
        bad = cli.run("ls", "booking", "--page", token)
        assert bad.returncode == 2, bad.stderr
        assert bad.stderr.startswith("redis-agent-sessions: --page "), bad.stderr
        assert "page_token" not in bad.stderr


async def test_output_into_a_closed_pipe_ends_quietly_as_unix_tools_do(cli: Cli) -> None:
    """``export APP | head``: once the reader is gone, every command writing to stdout stops
    with no message and the status of a process killed by SIGPIPE (128 + 13)."""
    await seed(cli)
    for args in (["export", "booking"], ["ls", "booking"], ["show", "booking", "bob", "b1"],
                 ["ls", "booking", "--json"], ["stats"]):  # fmt: skip
        result = into_closed_pipe(cli.argv(*args))
        assert (result.returncode, result.stderr) == (141, ""), (args, result.stderr)


def into_closed_pipe(argv: list[str]) -> Any:
    """``argv`` run with its stdout a pipe whose reader is gone before the first write."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(argv, stdout=write, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)


def test_operator_commands_without_the_extra_say_what_to_install() -> None:
    code = (
        "import sys; sys.modules['rich'] = None\n"
        "from redis_agent_sessions.cli import main\n"
        "sys.exit(main(['ls', '--url', 'redis://127.0.0.1:1/0']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 2
    assert "pip install 'redis-agent-sessions[cli]'" in result.stderr
    helped = subprocess.run(
        [sys.executable, "-c", code.replace("'ls', '--url', 'redis://127.0.0.1:1/0'", "'-h'")],
        capture_output=True,
        text=True,
    )
    assert helped.returncode == 0
    assert "demo" in helped.stdout
    assert "migrate" in helped.stdout


@pytest.mark.fake
@pytest.mark.cli
async def test_an_import_failing_part_way_leaves_no_partial_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import fakeredis

    from redis_agent_sessions._redis import concern
    from redis_agent_sessions.cli._records import import_record, read_record

    client = fakeredis.FakeAsyncRedis()
    source = RedisSessionService(client, config=SessionServiceConfig(key_prefix="src"))
    s = await source.create_session(app_name="a", user_id="u", session_id="s", state={"k": 1})
    for i in range(4):
        await source.append_event(s, _event("user", 100.0 + i, [{"text": f"t{i}"}], k=i))
    record = await read_record(source._engine, "a", "u", "s")
    assert record is not None

    target = RedisSessionService(client, config=SessionServiceConfig(key_prefix="dst"))
    assert await import_record(target._engine, {**record, "id": "whole"})
    real = concern.run_many

    async def failing(c: Any, script: Any, calls: list[Any], shortfalls: list[str]) -> Any:
        await real(c, script, calls[:2], shortfalls)  # two events land, then the link drops
        raise ConnectionError("the connection dropped")

    monkeypatch.setattr(concern, "run_many", failing)
    with pytest.raises(ConnectionError):
        await import_record(target._engine, record)
    assert await target.get_session(app_name="a", user_id="u", session_id="s") is None
    whole = await read_record(target._engine, "a", "u", "whole")
    assert whole is not None
    assert whole["events"] == record["events"]
    assert whole["state"] == record["state"]
    await client.aclose()


@pytest.mark.cli
def test_stats_names_valkey_by_its_own_version() -> None:
    """Valkey reports redis_version 7.2.4 to clients that check it; its own is valkey_version
    (INFO server of valkey-server 9.1.2)."""
    from redis_agent_sessions._redis.identity import server_identity

    valkey = {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "9.1.2"}
    assert server_identity(valkey) == ("Valkey", "9.1.2")
    assert server_identity({"redis_version": "8.2.3"}) == ("Redis", "8.2.3")


async def test_stats_shows_what_a_restricted_user_may_see(cli: Cli) -> None:
    """Managed services refuse some commands to their users (MODULE LIST, MEMORY USAGE,
    CONFIG, INFO in part: issue 44 names them; and SCAN, for a stricter user): stats says so
    where it would show them, and shows the rest."""
    import uuid

    await seed(cli)
    admin = cli.client()
    name, password = f"ras-restricted-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    rules = ["on", f">{password}", f"~{cli.prefix}:*", "+@all", "-module", "-memory", "-config"]
    rules += ["-info", "-scan"]
    try:
        if cli.cluster:
            await admin.initialize()
        nodes = admin.get_nodes() if cli.cluster else [None]
        for node in nodes:
            options = {"target_nodes": node} if cli.cluster else {}
            await admin.execute_command("ACL", "SETUSER", name, "reset", *rules, **options)
        scheme, rest = cli.url.split("://", 1)
        url = f"{scheme}://{name}:{password}@{rest.split('@')[-1]}"
        flags = ["--url", url, "--key-prefix", cli.prefix, *(["--cluster"] if cli.cluster else [])]
        argv = [sys.executable, "-m", "redis_agent_sessions", "stats", "--json", *flags]
        result = await asyncio.to_thread(
            subprocess.run, argv, capture_output=True, text=True, timeout=120
        )
        for node in nodes:
            options = {"target_nodes": node} if cli.cluster else {}
            await admin.execute_command("ACL", "DELUSER", name, **options)
    finally:
        await admin.aclose()
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["server"]["version"].startswith("unknown (INFO server")
    assert report["server"]["modules"] == ["unknown (MODULE LIST refused)"]
    assert report["memory"]["text"].startswith("unknown (INFO memory")
    booking = next(a for a in report["apps"] if a["app_name"] == "booking")
    assert (booking["sessions"], booking["bytes"]) == (3, None)
    # The memory users' learned facts are found by SCAN: refused, they are unknown.
    assert booking["learned_facts"] is None
    assert report["learned_facts_unknown"].startswith("unknown (")
