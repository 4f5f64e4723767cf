"""Stored data printed on a real terminal (a pty): escape sequences anyone could store in an
id, a state key, an author or a text come out shown, never obeyed.

Each command is a fresh interpreter whose stdin, stdout and stderr are the pty's follower
end, as in a user's shell, so the CLI's console sees a terminal and styles its output. What
it wrote is read from the leader end: the only escape sequences in it must be rich's own
colours (SGR, ``ESC [ ... m``), and no C1 control, DEL or BEL may be there raw.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from _servers import skip_without
from redis_agent_sessions import Event, RedisSessionService, SessionServiceConfig

pytestmark = [pytest.mark.real, pytest.mark.cli]

HOSTILE = (
    "\x1b]0;PWNED\x07"  # retitles the window
    "\x1b[2J"  # clears the screen
    "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"  # a link hiding its target
    "\x9b31m"  # C1 CSI: ESC [ in one byte
    "\x7f[bold]:x:\n"  # DEL, rich markup, an emoji code, a newline
)
SHOWN = r"\x1b]0;PWNED\x07\x1b[2J\x1b]8;;http://evil.example/\x1b\click\x1b]8;;\x1b\\x9b31m"
"""How HOSTILE's start is printed: each control character as its escape."""

APP, USER, SESSION = f"app{HOSTILE}x", f"user{HOSTILE}x", f"session{HOSTILE}x"
GUARD = 120  # seconds before a command that never ends fails the test (not a timing check)
_STYLING = re.compile(r"\x1b\[[0-9;]*m")
_RAW = re.compile(r"[\x00-\x09\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029]")
"""Control characters other than the pty's own CR LF."""


def _event(text: str, **delta: Any) -> Event:
    return Event.model_validate(
        {
            "author": f"agent{HOSTILE}x",
            "invocation_id": "inv-1",
            "content": {"role": "model", "parts": [{"text": text}]},
            "actions": {"state_delta": delta},
        }
    )


@pytest.fixture
async def stored() -> AsyncIterator[list[str]]:
    """A session whose ids, state key and value, author and text are all HOSTILE; the
    command line's flags to reach it."""
    url = skip_without("REDIS_URL")
    prefix = f"tty-{uuid.uuid4().hex[:8]}"
    client = Redis.from_url(url)
    service = RedisSessionService(client, config=SessionServiceConfig(key_prefix=prefix))
    session = await service.create_session(
        app_name=APP, user_id=USER, session_id=SESSION, state={f"key{HOSTILE}": HOSTILE}
    )
    await service.append_event(session, _event(f"text{HOSTILE}x", **{f"delta{HOSTILE}": 1}))
    try:
        yield ["--url", url, "--key-prefix", prefix]
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


def _start(argv: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    """The command on a new pty, 50 x 2000 (wide enough that no cell is cut): the process
    and the pty's leader end."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 2000, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "redis_agent_sessions", *argv],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env={**env, "TERM": "xterm-256color"},
        start_new_session=True,  # the pty becomes its controlling terminal, as in a shell
    )
    os.close(follower)
    return proc, leader


def _read(leader: int, until: Callable[[str], bool], so_far: bytearray) -> str:
    """Reads the pty into ``so_far`` until ``until(text)`` or the end of its output."""
    deadline = time.monotonic() + GUARD
    while not until(so_far.decode(errors="replace")):
        ready, _, _ = select.select([leader], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"no output for {GUARD} s; so far: {so_far!r}"
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the command ended and the follower end is closed
            break
        if not chunk:
            break
        so_far += chunk
    return so_far.decode()


def on_pty(*args: str) -> str:
    proc, leader = _start(list(args))
    try:
        out = _read(leader, lambda _: False, bytearray())
        assert proc.wait(timeout=GUARD) == 0, out
    finally:
        os.close(leader)
    return out


def assert_shown_not_obeyed(out: str) -> None:
    assert "Traceback" not in out, out
    unstyled = _STYLING.sub("", out)
    assert "\x1b" not in unstyled, repr(out)
    assert not _RAW.search(unstyled), repr(out)
    assert SHOWN in out, out


@pytest.mark.parametrize(
    ("command", "fields"),
    [
        ("ls", ["app"]),
        ("ls APP", ["user", "session"]),
        ("show", ["session", "app", "user", "key", "delta", "agent", "text"]),
        ("tail", ["agent", "text", "delta"]),
        ("stats", ["app"]),
    ],
)
def test_human_output_shows_control_characters_escaped(
    stored: list[str], command: str, fields: list[str]
) -> None:
    args = {
        "ls": ["ls"],
        "ls APP": ["ls", APP],
        "show": ["show", APP, USER, SESSION],
        "tail": ["tail", APP, USER, SESSION],
        "stats": ["stats"],
    }[command]
    out = on_pty(*args, *stored)
    assert_shown_not_obeyed(out)
    for field in fields:  # each stored string shown, all of it (markup and emoji as written)
        assert f"{field}{SHOWN}\\x7f[bold]:x:\\x0a" in out, (field, out)


def _strings(value: Any) -> set[str]:
    """Every string of a JSON document, its keys too."""
    if isinstance(value, dict):
        return {s for k, v in value.items() for s in (k, *_strings(v))}
    if isinstance(value, list):
        return {s for item in value for s in _strings(item)}
    return {value} if isinstance(value, str) else set()


@pytest.mark.parametrize(
    ("args", "exact"),
    [
        (["ls"], [APP]),
        (["ls", APP], [USER, SESSION]),
        (["show", APP, USER, SESSION], [APP, USER, SESSION, f"key{HOSTILE}", HOSTILE]),
        (["tail", APP, USER, SESSION], [f"agent{HOSTILE}x", f"text{HOSTILE}x"]),
    ],
)
def test_json_output_escapes_c1_and_reads_back_exactly(
    stored: list[str], args: list[str], exact: list[str]
) -> None:
    out = on_pty(*args, "--json", *stored)
    assert not _RAW.search(out), repr(out)
    assert "\\u009b31m\\u007f" in out
    assert set(exact) <= _strings(json.loads(out))


def test_tail_follow_shows_a_new_hostile_event_escaped(stored: list[str]) -> None:
    proc, leader = _start(["tail", APP, USER, SESSION, "-f", *stored])
    output = bytearray()
    try:
        _read(leader, lambda text: f"text{SHOWN}" in text, output)
        url, prefix = stored[1], stored[3]

        async def append() -> None:
            async with RedisSessionService.from_url(
                url, config=SessionServiceConfig(key_prefix=prefix)
            ) as service:
                session = await service.get_session(app_name=APP, user_id=USER, session_id=SESSION)
                assert session is not None
                await service.append_event(session, _event(f"followed{HOSTILE}x"))

        asyncio.run(append())
        out = _read(leader, lambda text: f"followed{SHOWN}" in text, output)
    finally:
        # SIGTERM, not Ctrl-C's SIGINT: how tail -f ends is test_cli_tail_tmux.py's subject.
        proc.terminate()
        proc.wait(timeout=GUARD)
        os.close(leader)
    assert_shown_not_obeyed(out)
