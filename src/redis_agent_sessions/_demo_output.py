"""What the demo prints: compact values and the redis-cli commands to inspect the data."""

from __future__ import annotations

import json
import shlex
from typing import Any
from urllib.parse import urlsplit

from redis.asyncio import Redis

from ._demo_worker import APP
from .keys import KeySpace

__all__ = ["clip", "print_inspection", "redact", "show", "text"]


async def print_inspection(ctl: Redis, url: str, keys: KeySpace, *, own_server: bool) -> None:
    parts = urlsplit(url)
    cli = ["redis-cli"]
    if parts.hostname not in (None, "127.0.0.1", "localhost"):
        cli += ["-h", parts.hostname]
    cli += ["-p", str(parts.port or 6379)]
    db = parts.path.strip("/") or "0"
    if db != "0":
        cli += ["-n", db]
    if parts.scheme == "rediss":
        cli.append("--tls")
    note = " (add -a <password>)" if parts.password else ""
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
        print(f"  All demo keys: {shlex.join([*cli, '--scan', '--pattern', keys.prefix + ':*'])}")


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
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)
