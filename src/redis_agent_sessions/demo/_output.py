"""What the demo prints: compact values, the redis-cli commands to inspect the data, and
the operator CLI's command that lists it."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from typing import Any
from urllib.parse import parse_qs, urlsplit

import redis
from redis.asyncio import Redis

from redis_agent_sessions._messages import PROG
from redis_agent_sessions.demo._worker import APP
from redis_agent_sessions.keys import KeySpace, glob_escape

__all__ = [
    "browse_command",
    "clip",
    "print_inspection",
    "redact",
    "removal_command",
    "show",
    "text",
    "url_problem",
]


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a Redis URL redis-py can use, or None when it is.

    redis-py parses a URL only when the first connection is made, deep in a traceback;
    parsing it up front (without connecting) lets the demo say so in one line.
    """
    try:
        redis.ConnectionPool.from_url(url)
    except ValueError as exc:  # bad scheme, port, or query option (redis-py and urllib)
        return str(exc).replace("\n", " ")
    return None


def _cli(url: str) -> tuple[list[str], str]:
    """``redis-cli`` with the options that reach the server of ``url``, and a password note."""
    parts = urlsplit(url)
    cli = ["redis-cli"]
    query_db = parse_qs(parts.query).get("db", ["0"])[0]
    if parts.scheme == "unix":
        cli += ["-s", parts.path]
        db = query_db
    else:
        if parts.hostname not in (None, "127.0.0.1", "localhost"):
            cli += ["-h", parts.hostname]
        cli += ["-p", str(parts.port or 6379)]
        db = parts.path.strip("/") or query_db
    if db != "0":
        cli += ["-n", db]
    if parts.scheme == "rediss":
        cli.append("--tls")
    note = " (add -a <password>)" if parts.password else ""
    return cli, note


def removal_command(url: str, prefix: str) -> str:
    """A shell command deleting every key under ``prefix`` (and nothing else) on ``url``."""
    cli, note = _cli(url)
    scan = shlex.join([*cli, "--scan", "--pattern", glob_escape(prefix) + ":*"])
    return f"{scan} | xargs {shlex.join([*cli, 'UNLINK'])}{note}"


def browse_command(url: str, prefix: str) -> str:
    """The operator CLI's listing of the demo's sessions on ``url``, as a shell command.

    A URL holding a password is given as ``"$REDIS_URL"``: the demo ran with it set, so the
    command works in the same shell, and no password is printed."""
    shown = '"$REDIS_URL"' if urlsplit(url).password is not None else shlex.quote(url)
    return f"{PROG} ls {shlex.quote(APP)} --url {shown} --key-prefix {shlex.quote(prefix)}"


def needs_cli_extra() -> bool:
    """Whether the operator commands lack their extra (rich) here; the demo needs none."""
    return importlib.util.find_spec("rich") is None


async def print_inspection(ctl: Redis, url: str, keys: KeySpace, *, own_server: bool) -> None:
    cli, note = _cli(url)
    sk = keys.session(APP, "user1", "user1-trip")
    commands = [
        ["HGETALL", sk.meta], ["HGETALL", sk.state], ["HGETALL", sk.user_state],
        ["HGETALL", sk.app_state], ["XRANGE", sk.events, "-", "+"],
        ["ZRANGE", sk.user_sessions, "0", "-1", "WITHSCORES"],
        ["ZRANGE", sk.app_sessions, "0", "-1", "WITHSCORES"],
    ]  # fmt: skip
    when = "output now, before the server is stopped" if own_server else "output now"
    print(f"\n== Look at it yourself{note} (user1's keys; {when})")
    for cmd in commands:
        print("  $ " + shlex.join(cli + cmd))
        for line in await cli_lines(ctl, cmd[0], cmd[1]):
            print("    " + line)
    if not own_server:
        pattern = glob_escape(keys.prefix) + ":*"
        print(f"  All demo keys: {shlex.join([*cli, '--scan', '--pattern', pattern])}")


async def cli_lines(ctl: Redis, command: str, key: str) -> list[str]:
    """What redis-cli would show for ``command key``, one line per field/entry/member."""
    client: Any = ctl  # redis-py's reply types are unions of every protocol's shape
    if command == "XRANGE":
        entries = await client.xrange(key)
        return [f"{text(i)}  {clip(text(f[b'event']))}" for i, f in entries]
    if command == "HGETALL":
        pairs = list((await client.hgetall(key)).items())
    else:
        pairs = list(await client.zrange(key, 0, -1, withscores=True))
    return [f"{text(k)} -> {clip(text(v))}" for k, v in pairs]


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def clip(value: str, width: int = 96) -> str:
    return value if len(value) <= width else value[: width - 3] + "..."


def show(value: Any) -> str:
    """Compact display: flights by number, everything else as short JSON."""
    if value is None:
        return "unset"
    if isinstance(value, list) and all(isinstance(v, dict) and "flight" in v for v in value):
        return "[" + ", ".join(v["flight"] for v in value) + "]"
    if isinstance(value, dict) and "flight" in value:
        return f"{value['flight']} ({value.get('time')}, ${value.get('price')})"
    return clip(value if isinstance(value, str) else json.dumps(value, default=str), 80)


def redact(url: str) -> str:
    try:
        password = urlsplit(url).password
    except ValueError:
        # Too malformed to parse (e.g. "redis://[x"), yet it may still hold a password.
        return re.sub(r"(//[^/@]*?:)[^/@]*@", r"\1***@", url, count=1)
    if password is None:
        return url
    return url.replace(f":{password}@", ":***@", 1)
