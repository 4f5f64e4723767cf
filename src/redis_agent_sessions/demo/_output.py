"""What the demo prints: compact values, readable times, the redis-cli commands to inspect
the data, and the operator CLI's commands that browse it, written as they work when pasted
into the shell that ran the demo."""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib.util
import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from redis_agent_sessions._messages import PROG
from redis_agent_sessions._redis.redact import has_secret
from redis_agent_sessions._redis.uri import parse_service_url
from redis_agent_sessions.demo._worker import APP
from redis_agent_sessions.keys import KeySpace, glob_escape

__all__ = [
    "RedisCli",
    "browse_commands",
    "cli_program",
    "clip",
    "print_cli_listing",
    "print_inspection",
    "removal_commands",
    "show",
    "text",
    "utc",
]


@dataclass(frozen=True)
class RedisCli:
    """``redis-cli`` command lines that reach the demo's data, TLS files and all."""

    any_key: list[str]
    """Runs a command on any key (on a cluster, following its redirects)."""
    nodes: list[list[str]]
    """One per node holding keys (a cluster's primaries): a scan sees one node's keys."""
    note: str
    """How to give the password, which is never printed."""
    cluster: bool = False
    """Whether the nodes are a cluster's, which refuse a command on keys of two slots."""

    @classmethod
    def of(cls, url: str, primaries: list[tuple[str, int]] | None) -> RedisCli:
        """For ``url``, read as the services read it; ``primaries`` (host, port) when it
        names a Redis Cluster, None for one node."""
        parsed = parse_service_url(url)
        parts = urlsplit(parsed.redis_url)
        params = parsed.redis_params
        options: list[str] = []
        user = unquote(parts.username) if parts.username else params.get("username")
        if user:
            options += ["--user", user]
        if parsed.scheme == "rediss":
            options.append("--tls")
            options += [
                arg
                for name, flag in _TLS_FILES.items()
                if name in params
                for arg in (flag, params[name])
            ]
            if params.get("ssl_cert_reqs", "").lower() == "none":
                options.append("--insecure")
        note = " (add -a <password>)" if parts.password or "password" in params else ""
        if parsed.scheme == "unix":
            node = ["redis-cli", "-s", parts.path, *options, *_db(params.get("db", "0"))]
            return cls(node, [node], note)
        if primaries is None:
            db = parts.path.strip("/") or params.get("db", "0")
            node = _address(parts.hostname, parts.port or 6379) + options + _db(db)
            return cls(node, [node], note)
        # A cluster has database 0 only, which needs no -n.
        redirected = [*_address(parts.hostname, parts.port or 6379), "-c", *options]
        nodes = [_address(host, port) + options for host, port in primaries]
        return cls(redirected, nodes, note, cluster=True)


_TLS_FILES = {
    "ssl_ca_certs": "--cacert",
    "ssl_ca_path": "--cacertdir",
    "ssl_certfile": "--cert",
    "ssl_keyfile": "--key",
}
"""redis-py's URL parameters naming TLS files, and redis-cli's options for them."""


def _address(host: str | None, port: int) -> list[str]:
    cli = ["redis-cli"]
    if host not in (None, "127.0.0.1", "localhost"):
        cli += ["-h", str(host)]
    return [*cli, "-p", str(port)]


def _db(db: str) -> list[str]:
    return ["-n", db] if db != "0" else []


def removal_commands(cli: RedisCli, prefix: str) -> list[str]:
    """Shell commands deleting every key under ``prefix`` (and nothing else), one per node."""
    pattern = glob_escape(prefix) + ":*"
    # A node of a cluster refuses one UNLINK of keys in different slots: one key a call.
    each = ["-r", "-n", "1"] if cli.cluster else []
    return [
        f"{shlex.join([*node, '--scan', '--pattern', pattern])} | "
        f"{shlex.join(['xargs', *each, *node, 'UNLINK'])}{cli.note}"
        for node in cli.nodes
    ]


def cli_program() -> str:
    """The operator CLI as the shell that ran the demo can run it: ``redis-agent-sessions``
    when PATH finds this interpreter's (an activated venv), else that script's path (relative
    to the current directory when under it: ``.venv/bin/redis-agent-sessions``), else this
    interpreter running the package."""
    script = Path(os.path.abspath(sys.executable)).parent / PROG
    on_path = shutil.which(PROG)
    if not (script.is_file() and os.access(script, os.X_OK)):
        return PROG if on_path else f"{shlex.quote(sys.executable)} -m redis_agent_sessions"
    if on_path and os.path.samefile(on_path, script):
        return PROG
    try:
        shown = str(script.relative_to(Path.cwd()))
    except ValueError:
        shown = str(script)
    return shlex.quote(shown)


def browse_commands(url: str, prefix: str) -> list[str]:
    """The operator CLI's listing of the demo's sessions on ``url`` and its view of user1's
    session, as shell commands.

    A URL holding a password is given as ``"$REDIS_URL"``: the demo ran with it set, so the
    commands work in the same shell, and no password is printed."""
    shown = '"$REDIS_URL"' if has_secret(url) else shlex.quote(url)
    where = f"--url {shown} --key-prefix {shlex.quote(prefix)}"
    program = cli_program()
    return [
        f"{program} ls {shlex.quote(APP)} {where}",
        f"{program} show {shlex.quote(APP)} user1 user1-trip {where}",
    ]


def needs_cli_extra() -> bool:
    """Whether the operator commands lack their extra (rich) here."""
    return importlib.util.find_spec("rich") is None


def missing_cli_extra() -> str:
    """What to say where an operator command would be printed but cannot run here."""
    pip = f"{shlex.quote(sys.executable)} -m pip install 'rich>=13'"
    return f"the operator CLI needs the [cli] extra, which this Python lacks: {pip}"


async def print_cli_listing(url: str, prefix: str) -> None:
    """Run the operator CLI's ``ls`` on the demo's sessions, as printed, and show its output
    (the URL goes by environment, so no password shows in a process listing)."""
    command = browse_commands(url, prefix)[0]
    print("\n== Look at it with the operator CLI (output now)")
    if needs_cli_extra():
        print(f"  ({missing_cli_extra()})")
        return
    print(f"  $ {command}")
    args = [sys.executable, "-m", "redis_agent_sessions", "ls", APP, "--key-prefix", prefix]
    env = {**os.environ, "REDIS_URL": url}
    proc = await asyncio.create_subprocess_exec(
        *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        out = b"(no answer within 30 s)"
    for line in out.decode(errors="replace").splitlines():
        print(f"    {line}".rstrip())


async def print_inspection(ctl: Any, cli: RedisCli, keys: KeySpace, *, own_server: bool) -> None:
    sk = keys.session(APP, "user1", "user1-trip")
    commands = [
        ["HGETALL", sk.meta], ["HGETALL", sk.state], ["HGETALL", sk.user_state],
        ["HGETALL", sk.app_state], ["XRANGE", sk.events, "-", "+"],
        ["ZRANGE", sk.user_sessions, "0", "-1", "WITHSCORES"],
        ["ZRANGE", sk.app_sessions, "0", "-1", "WITHSCORES"],
    ]  # fmt: skip
    missing = "" if shutil.which("redis-cli") else "; redis-cli is not installed here"
    print(
        f"\n== Look at it with redis-cli{cli.note} (user1's keys; output now, each event "
        f"summed up{missing})"
    )
    for cmd in commands:
        print("  $ " + shlex.join(cli.any_key + cmd))
        for line in await cli_lines(ctl, cmd[0], cmd[1]):
            print("    " + line)
    if not own_server:
        pattern = glob_escape(keys.prefix) + ":*"
        scans = [shlex.join([*node, "--scan", "--pattern", pattern]) for node in cli.nodes]
        where = ", on each primary:\n    " if cli.cluster else ": "
        print(f"  All demo keys{where}" + "\n    ".join(scans))


_TIMES = re.compile(r"(?:\w+_time|last_ms)")
"""Fields of a session's hash holding an epoch time (seconds; ``last_ms``: milliseconds)."""


async def cli_lines(ctl: Any, command: str, key: str) -> list[str]:
    """What redis-cli would show for ``command key``, one line per field/entry/member; epoch
    times are followed by the moment they stand for."""
    client: Any = ctl  # redis-py's reply types are unions of every protocol's shape
    if command == "XRANGE":
        entries = await client.xrange(key)
        return [f"{text(i)}  {_event(text(f[b'event']))}" for i, f in entries]
    if command == "HGETALL":
        pairs = [(text(k), text(v)) for k, v in (await client.hgetall(key)).items()]
        return [f"{k} -> {clip(v)}{_moment(k, v)}" for k, v in pairs]
    scored = await client.zrange(key, 0, -1, withscores=True)
    return [f"{text(k)} -> {_score(v)}{_moment('score', _score(v))}" for k, v in scored]


def _event(stored: str) -> str:
    """An event's JSON summed up: its author, what it says or answers, the state it sets."""
    try:
        event = json.loads(stored)
        said: list[str] = []
        for part in (event.get("content") or {}).get("parts") or []:
            if part.get("text"):
                said.append(clip(json.dumps(part["text"]), 60))
            elif part.get("function_response"):
                said.append(f"result of {part['function_response'].get('name')}")
            elif part.get("function_call"):
                said.append(f"call of {part['function_call'].get('name')}")
        delta = (event.get("actions") or {}).get("state_delta") or {}
        if delta:
            said.append("state " + ", ".join(delta))
        return f"event by {event.get('author')}: " + "; ".join(said)
    except (ValueError, AttributeError, TypeError):
        return clip(stored)


def _score(value: float) -> str:
    """A score as redis-cli prints it (the shortest form that reads back the same)."""
    return repr(float(value)) if value != int(value) else str(int(value))


def _moment(field: str, value: str) -> str:
    """``  (<UTC time>)`` after an epoch time (a session's ``*_time`` and ``last_ms`` fields,
    an index's scores); empty after anything else."""
    if field != "score" and not _TIMES.fullmatch(field):
        return ""
    try:
        seconds = float(value) / (1000 if field == "last_ms" else 1)
        return f"  ({utc(seconds)})"
    except (ValueError, OverflowError, OSError):
        return ""


def utc(seconds: float) -> str:
    """An epoch time as the operator CLI prints times: UTC, ISO-8601, to the second."""
    moment = dt.datetime.fromtimestamp(seconds, tz=dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def clip(value: str, width: int = 96) -> str:
    return value if len(value) <= width else value[: width - 3] + "..."


def show(value: Any) -> str:
    """Compact display: flights by number, everything else as short JSON."""
    if value is None:
        return "not set"
    if isinstance(value, list) and all(isinstance(v, dict) and "flight" in v for v in value):
        return "[" + ", ".join(v["flight"] for v in value) + "]"
    if isinstance(value, dict) and "flight" in value:
        return f"{value['flight']} ({value.get('time')}, ${value.get('price')})"
    return clip(value if isinstance(value, str) else json.dumps(value, default=str), 80)
