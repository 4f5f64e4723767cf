"""``import`` given hostile records (issue 52): a refused record exits 2 naming file and line,
and leaves every key of the database as it was (its type, content and expiry, as
``_snapshot`` compares them), the shared user and app scopes included; ``--replace`` replaces
only a session whose new record is known good. What it accepts, the API accepts too, and it
reads back exactly as given. The file is read as a stream, a line never held beyond its
limit."""

from __future__ import annotations

import asyncio
import copy
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from _cli import Cli, drop
from _servers import skip_without
from _snapshot import snapshot
from redis_agent_sessions import Event, RedisSessionService, SessionServiceConfig
from redis_agent_sessions._redis.codec import MAX_TIME, MIN_TIME
from redis_agent_sessions.config import MAX_TTL_SECONDS
from redis_agent_sessions.errors import InvalidInputError

# The import's own modules show what they print with rich, the [cli] extra.
pytest.importorskip("rich", reason="needs the [cli] extra (rich is not installed)")
from redis_agent_sessions.cli._jsonl import (
    LineTooLong,
    count_lines,
    lines,
    loads,
)
from redis_agent_sessions.cli._records import import_record, read_record

APP, USER, SID = "a", "u", "s1"
MIB = 1 << 20


async def seed(cli: Cli) -> dict[str, Any]:
    """The session every case aims at, with state in every scope and two events; its
    record as ``show --json`` (and ``export``) gives it."""
    async with cli.service() as svc:
        s = await svc.create_session(
            app_name=APP,
            user_id=USER,
            session_id=SID,
            state={"k": 1, "user:n": 1, "app:plan": "free"},
        )
        for i in range(2):
            await svc.append_event(s, Event(id=f"e{i}", author="user", timestamp=1.7e9 + i))
    record: dict[str, Any] = cli.json("show", APP, USER, SID)
    return record


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change of the record: ``value`` at ``path`` (dot-separated; a number indexes a
    list); ``DROP`` removes the field."""

    def change(record: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = record
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        key: Any = int(last) if isinstance(target, list) else last
        if value is DROP:
            if isinstance(target, list) or key in target:
                del target[key]
        else:
            target[key] = value

    return change


DROP = object()
HACKED = _set("state.app.plan", "HACKED")
OVERSIZED = _set("events.1.custom_metadata", {"pad": "x" * (MIB + 50_000)})

# (id, changes, what the one-line error says: a regular expression). Each case's record is
# the seeded one with these changes, under the seeded session's id (--replace) or a new one.
E0, E1 = r"events\[0\]", r"events\[1\]"
CASES: list[tuple[str, list[Callable[[dict[str, Any]], None]], str]] = [
    # 1: the shared state used to be written before the event's size was checked.
    ("app-state-and-event-over-limit", [HACKED, OVERSIZED], E1 + r" is \d+ bytes encoded"),
    ("user-state-and-event-over-limit", [_set("state.user.n", 666), OVERSIZED], "over the limit"),
    # 3: failed inside the script, leaving metadata and state behind.
    ("ttl-1e30", [HACKED, _set("ttl", 10**30)], "ttl must be at most 3153600000 seconds"),
    ("ttl-over-limit", [_set("ttl", MAX_TTL_SECONDS + 1)], "ttl must be at most"),
    # 2 and 4: a time that is no stream id, once reported as corrupt data (exit 1).
    (
        "event-time-1e300",
        [HACKED, _set("events.1.timestamp", 1e300)],
        E1 + r"\.timestamp must",
    ),
    ("event-time-2e16", [_set("events.0.timestamp", 2e16)], E0 + r"\.timestamp must be"),
    ("event-time-negative", [_set("events.0.timestamp", -1e300)], E0 + r"\.timestamp must"),
    (
        "event-time-text",
        [_set("events.0.timestamp", "1")],
        E0 + r"\.timestamp must be a number",
    ),
    ("event-time-missing", [_set("events.0.timestamp", DROP)], E0 + r"\.timestamp must be"),
    # 5: an id that ADK's readers replace with a new random one on every read.
    ("event-id-empty", [HACKED, _set("events.0.id", "")], E0 + r"\.id must be a non-empty"),
    (
        "event-id-missing",
        [_set("events.1.id", DROP)],
        E1 + r"\.id must be a non-empty string",
    ),
    ("event-id-padded", [_set("events.1.id", " e1")], "surrounding spaces"),
    ("event-id-twice", [_set("events.1.id", "e0")], "appears twice"),
    ("event-partial", [_set("events.1.partial", True)], E1 + " is partial"),
    ("event-bad-field", [_set("events.0.author", 5)], E0 + " is not a valid event"),
    # 6: a time no reader can show (ls and show failed for the whole app).
    ("create-time-1e300", [HACKED, _set("create_time", 1e300)], "create_time must be epoch"),
    ("update-time-1e300", [_set("last_update_time", 1e300)], "last_update_time must be epoch"),
    ("create-time-int-1e30", [_set("create_time", 10**30)], "create_time must be epoch"),
    # 7: changed silently: moved to another scope, or made a float.
    ("session-key-app-prefix", [_set("state.session.app:x", 1)], "has a scope prefix"),
    ("session-key-user-prefix", [_set("state.session.user:x", 1)], "has a scope prefix"),
    ("session-key-temp-prefix", [_set("state.session.temp:x", 1)], "has a scope prefix"),
    ("session-int-65-bits", [_set("state.session.big", 2**64)], "Integer exceeds 64-bit range"),
    ("app-int-below-64-bits", [_set("state.app.big", -(2**63) - 1)], "Integer exceeds 64-bit"),
    ("unknown-field", [HACKED, _set("extra", 1)], "unknown field 'extra': an import would drop it"),
]


def _record(base: dict[str, Any], changes: list[Callable[[dict[str, Any]], None]], sid: str) -> Any:
    record = copy.deepcopy(base)
    record["id"] = sid
    for change in changes:
        change(record)
    return record


# One case or two of each defect of issue 52, run as the command (the rest are run
# in-process, below: each command is a process, forked and connecting anew).
ON_THE_COMMAND_LINE = [
    "app-state-and-event-over-limit",  # 1, and 2 with --replace
    "ttl-1e30",  # 3
    "event-time-1e300",  # 2 and 4
    "event-time-2e16",  # 4
    "event-id-empty",  # 5
    "create-time-1e300",  # 6
    "session-int-65-bits",  # 7
    "session-key-app-prefix",  # 7
]


@pytest.mark.parametrize("replace", [True, False], ids=["replace", "new"])
async def test_a_refused_record_changes_no_key(cli: Cli, tmp_path: Path, replace: bool) -> None:
    base = await seed(cli)
    dump = tmp_path / "hostile.jsonl"
    before = await cli.snapshot()
    cases = {name: (changes, message) for name, changes, message in CASES}
    for name in ON_THE_COMMAND_LINE:
        changes, message = cases[name]
        record = _record(base, changes, SID if replace else "fresh")
        # json writes integers beyond 64 bits exactly; the blank line first is counted.
        dump.write_text("\n" + json.dumps(record) + "\n")
        flags = ["--replace"] if replace else []
        result = cli.run("import", str(dump), *flags)
        assert result.returncode == 2, (name, result.stderr)
        assert f"{dump}:2: " in result.stderr, (name, result.stderr)
        assert re.search(message, result.stderr), (name, result.stderr)
        assert "nothing was imported before it" in result.stderr, name
        assert await cli.snapshot() == before, name
    # The comparison sees a change: the same record, unchanged, replaces the session.
    good = _record(base, [HACKED], SID)
    dump.write_text(json.dumps(good) + "\n")
    assert cli.run("import", str(dump), "--replace").returncode == 0
    assert await cli.snapshot() != before
    assert cli.json("show", APP, USER, SID) == good


@pytest.mark.parametrize("replace", [True, False], ids=["replace", "new"])
async def test_every_case_is_refused_before_any_write(cli: Cli, replace: bool) -> None:
    """Every case, as the command runs it (the line's JSON, then ``import_record``)."""
    base = await seed(cli)
    before = await cli.snapshot()
    async with cli.service() as svc:
        for name, changes, message in CASES:
            line = json.dumps(_record(base, changes, SID if replace else "fresh")).encode()
            with pytest.raises(InvalidInputError, match=message):
                await import_record(svc._engine, loads(line), replace=replace)
            assert await cli.snapshot() == before, name


async def test_a_line_over_the_limit_is_refused_unread(cli: Cli, tmp_path: Path) -> None:
    """A 200 MB line once peaked at 896 MB; now a line is refused at its limit, before its
    record is even decoded (the case of 1 with a line of 300 KB and a limit of 200 KB)."""
    base = await seed(cli)
    dump = tmp_path / "long.jsonl"
    record = _record(base, [HACKED, _set("events.0.custom_metadata", {"pad": "x" * 300_000})], SID)
    dump.write_text("\n" + json.dumps(record) + "\n")
    before = await cli.snapshot()
    result = cli.run("import", str(dump), "--replace", "--max-line-bytes", "200000")
    assert result.returncode == 2, result.stderr
    assert f"{dump}:2: the line is longer than 200,000 bytes (--max-line-bytes)" in result.stderr
    assert "nothing was imported before it" in result.stderr
    assert await cli.snapshot() == before
    accepted = cli.run("import", str(dump), "--replace", "--max-line-bytes", "400000")
    assert accepted.returncode == 0, accepted.stderr
    assert cli.json("show", APP, USER, SID) == record


async def test_numbers_beyond_64_bits_in_events_are_kept_exactly(cli: Cli, tmp_path: Path) -> None:
    """The API stores them (pydantic keeps them exact); import did too, as floats."""
    base = await seed(cli)
    numbers = {"big": 2**70, "negative": -(2**64), "edge": 2**64 - 1, "digits": "1" * 25}
    record = _record(base, [_set("events.0.custom_metadata", numbers)], "big")
    dump, out = tmp_path / "big.jsonl", tmp_path / "out.jsonl"
    dump.write_text(json.dumps(record, separators=(",", ":")) + "\n")
    assert cli.run("import", str(dump)).returncode == 0
    async with cli.service() as svc:
        got = await svc.get_session(app_name=APP, user_id=USER, session_id="big")
    assert got is not None
    assert got.events[0].custom_metadata == numbers
    assert type(got.events[0].custom_metadata["big"]) is int
    assert cli.run("export", APP, "--user", USER, "-o", str(out)).returncode == 0
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r for r in exported if r["id"] == "big"] == [record]


async def test_readers_show_a_time_no_datetime_holds(cli: Cli) -> None:
    """Written by hand (the library refuses it): ls, ls APP and show go on, showing it."""
    await seed(cli)
    async with cli.service() as svc:
        keys = svc._engine.keys.session(APP, USER, SID)
    client = cli.client()
    async with client:
        await client.hset(keys.meta, mapping={"create_time": "1e300", "last_update_time": "nan"})
        apps = svc._engine.keys.apps()
        await client.zadd(apps, dict.fromkeys(await client.zrange(apps, 0, -1), 1e300), xx=True)
    for args in (["ls"], ["ls", APP], ["ls", APP, "--json"], ["show", APP, USER, SID]):
        result = cli.run(*args)
        assert result.returncode == 0, (args, result.stderr)
    assert "1e+300" in cli.run("show", APP, USER, SID).stdout
    assert cli.json("ls") == [{"app_name": APP, "sessions": 1, "first_session": "1e+300"}]
    listed = cli.json("ls", APP)["sessions"][0]
    assert (listed["create_time"], listed["last_update_time"]) == ("1e+300", "nan")


# -- the line reader ----------------------------------------------------------------------


class _Counted(io.RawIOBase):
    """A raw stream of ``data`` that counts how much of it was read."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = self.data[self.read_bytes : self.read_bytes + len(buffer)]
        buffer[: len(chunk)] = chunk
        self.read_bytes += len(chunk)
        return len(chunk)


def test_a_line_over_the_limit_is_not_read_whole() -> None:
    raw = _Counted(b'{"a": 1}\n\n{"pad": "' + b"x" * (64 * MIB) + b'"}\n{}\n')
    walk = lines(io.BufferedReader(raw), 2 * MIB)
    number, box = next(walk)
    assert (number, box) == (1, [bytearray(b'{"a": 1}\n')])
    with pytest.raises(LineTooLong) as refused:
        next(walk)
    assert refused.value.number == 3
    assert raw.read_bytes < 4 * MIB  # of the 64 MiB line, the limit and a chunk or two


@pytest.mark.parametrize("limit", [8, 9, 10])
def test_the_line_limit_leaves_the_newline_out(limit: int) -> None:
    stream = io.BytesIO(b'{"a":123}\n')  # 9 bytes and the newline
    if limit < 9:
        with pytest.raises(LineTooLong):
            list(lines(stream, limit))
    else:
        assert [(n, box.pop()) for n, box in lines(stream, limit)] == [(1, b'{"a":123}\n')]


def test_lines_are_counted_a_chunk_at_a_time() -> None:
    text = b"\n".join([b"{}", b"", b"  ", b"x" * (3 * MIB), b"{}", b"\t"]) + b"\n{}"
    assert count_lines(io.BytesIO(text)) == 4
    assert count_lines(io.BytesIO(b"")) == 0


@pytest.mark.parametrize(
    "text",
    [
        b'{"n": 18446744073709551616}',
        b'{"n":[-9223372036854775809]}',
        b'{"n": 1, "m": 123456789012345678901234567890}',
    ],
)
def test_integers_beyond_64_bits_are_read_exactly(text: bytes) -> None:
    # Compared as text: 2**64 == float(2**64) in Python.
    exact = repr(json.loads(text))
    assert repr(orjson.loads(text)) != exact  # a float: what import stored before
    assert repr(loads(text)) == exact
    assert repr(loads(bytearray(text))) == exact


def test_long_digits_in_strings_leave_numbers_as_they_are() -> None:
    assert loads(b'{"s": "12345678901234567890123", "f": 1.5e300}') == {
        "s": "12345678901234567890123",
        "f": 1.5e300,
    }


# -- whatever the record, refused untouched or imported exactly -----------------------------

TIMES = st.sampled_from(
    [0, 1.5, 1.7e9, MAX_TIME, MIN_TIME, MAX_TIME + 1, 1e300, -1e300, 2e16, 10**30, True, "1"]
)
VALUES = st.sampled_from(
    [1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 1e300, "x", None, [1], {"n": 2**70}]
)
KEYS = st.sampled_from(["k", "app:x", "user:y", "temp:z", "", "a b"])
CHANGES = st.one_of(
    st.tuples(st.sampled_from(["create_time", "last_update_time"]), TIMES),
    st.tuples(st.just("ttl"), st.sampled_from([0, 60, MAX_TTL_SECONDS, MAX_TTL_SECONDS + 1])),
    st.tuples(st.just("ttl"), st.sampled_from([10**30, -1, 1.5, True, "60s", None])),
    st.tuples(st.sampled_from(["events.0.timestamp", "events.1.timestamp"]), TIMES),
    st.tuples(
        st.sampled_from(["events.0.id", "events.1.id"]),
        st.sampled_from(["", " x", "x", "e0", "e1", 5, None, DROP, "y" * 1025]),
    ),
    st.tuples(st.sampled_from(["events.0.custom_metadata", "events.1.partial"]), VALUES),
    st.tuples(st.sampled_from(["state.session", "state.user", "state.app"]), KEYS).flatmap(
        lambda scope_key: st.tuples(st.just(".".join(scope_key)), VALUES)
    ),
    st.tuples(st.sampled_from(["extra", "events.1.timestamp", "app_name"]), st.just(DROP)),
)


def same(a: Any, b: Any) -> bool:
    """``a == b``, where a number beyond a float's exact range must keep its type too
    (``2**64 == float(2**64)``): 0 and 0.0 are the same time, 2**64 and 1.8e19 are not."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a) > 2**53:
        return a == b and type(a) is type(b)
    return bool(a == b)


@pytest.fixture(scope="module")
def redis_url() -> str:
    return skip_without("REDIS_URL")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(CHANGES, min_size=1, max_size=3))
@example([("state.session.big", 2**64)])  # refused (the API refuses it), not made a float
@example([("events.0.custom_metadata", {"n": 2**70})])  # kept exact, as the API keeps it
@example([("state.session.app:x", 1)])  # refused, not moved to the app scope
@example([("create_time", 1e300), ("events.1.id", "")])
@pytest.mark.real
def test_any_record_is_refused_untouched_or_imported_exactly(
    redis_url: str, changes: list[tuple[str, Any]]
) -> None:
    """In-process, as the CLI runs it: the line's JSON (``loads``), then ``import_record``
    with ``--replace`` over a session that exists."""

    async def main() -> None:
        client = Redis.from_url(redis_url)
        prefix = "hostile-prop"
        service = RedisSessionService(client, config=SessionServiceConfig(key_prefix=prefix))
        engine = service._engine
        try:
            s = await service.create_session(
                app_name=APP, user_id=USER, session_id=SID, state={"k": 1, "app:plan": "free"}
            )
            for i in range(2):
                await service.append_event(s, Event(id=f"e{i}", timestamp=1.7e9 + i))
            base = await read_record(engine, APP, USER, SID)
            record = _record(base or {}, [_set(path, value) for path, value in changes], SID)
            before = await snapshot(client)
            try:
                done = await import_record(engine, loads(json.dumps(record).encode()), replace=True)
            except InvalidInputError:
                event("refused")
                assert await snapshot(client) == before
                return
            event("imported")
            assert done
            got = await read_record(engine, APP, USER, SID, exact=True)
            # What the API takes for a ttl, as the record keeps it: whole seconds, if any.
            ttl = record.pop("ttl", None)
            if ttl is not None:
                record["ttl"] = int(ttl.removesuffix("s")) if isinstance(ttl, str) else ttl
            assert same(got, record)
        finally:
            async with Redis.from_url(redis_url) as admin:
                keys = [k async for k in admin.scan_iter(match=f"{prefix}:*")]
                if keys:
                    await admin.delete(*keys)
            await client.aclose()

    asyncio.run(main())


async def test_a_large_session_is_sent_in_parts(cli: Cli, tmp_path: Path) -> None:
    """More than one pipeline (of at most 8 MiB of events), one session all the same."""
    base = await seed(cli)
    pad = "x" * 900_000
    events = [
        {"id": f"p{i}", "author": "user", "timestamp": 1.8e9 + i, "custom_metadata": {"p": pad}}
        for i in range(12)
    ]
    record = {**base, "id": "large", "events": events, "last_update_time": 1.8e9 + 11}
    dump = tmp_path / "large.jsonl"
    dump.write_text(json.dumps(record) + "\n")
    assert cli.run("import", str(dump)).returncode == 0
    shown = cli.json("show", APP, USER, "large")
    assert [e["id"] for e in shown["events"]] == [e["id"] for e in events]
    assert shown == record
    await drop(cli, cli.prefix)
