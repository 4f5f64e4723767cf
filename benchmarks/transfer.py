"""Benchmark of the operator CLI's ``export`` and ``import`` (not a test): throughput as an
operator sees it, each command run as its own ``python -m redis_agent_sessions`` process.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.transfer            # 10,000 sessions x 50 events
    .venv/bin/python -m benchmarks.transfer --quick    # 1,000 sessions x 50 events
    .venv/bin/python -m benchmarks.transfer --json -   # only the JSON result on stdout
    .venv/bin/python -m benchmarks.transfer --profile-import   # + cProfile of one import
    .venv/bin/python -m benchmarks.transfer --url redis://127.0.0.1:6379/0

It starts a throwaway Redis 7 and always stops it. With ``--url`` it writes only keys under
random prefixes and deletes them at the end. The export files go to a temporary directory,
removed at the end.

Seeding (untimed): 10,000 sessions of one app over 1,000 users (``--quick``: 1,000 over
100), each created by the real ``create_session`` with a small state (session and ``user:``
keys) and given 50 events by the real ``append_event``, one after another per session,
sessions concurrently (``asyncio.gather`` over chunks of 64) on one ``redis.asyncio.Redis``
client. Each event has ~200 characters of text; every 5th also carries a function call
part and a function response part; each has a state delta with session keys, every 10th
also a ``user:`` key.

Timed, three rounds, each command a subprocess of the real CLI with ``--url`` and
``--key-prefix`` (wall time from spawn to exit, so interpreter start, imports and connecting
are in it, as for an operator; progress bars are off because stderr is a pipe):

* (a) ``export APP -o FILE`` of all the seeded sessions;
* (b) ``import FILE`` (the first round's export) into a fresh key prefix;
* (c) ``export APP -o FILE`` of that imported prefix, which must give the same bytes as (a).

After each round the imported prefix is deleted (SCAN + UNLINK). Reported per command: the
median over the rounds of wall seconds, sessions/s, events/s, and the file size in MB
(10^6 bytes); plus, for scale, the wall time of ``ls APP --limit 1`` (start, connect, one
read). Every export of the seeded data (and every re-export) must be byte-identical to the
first. ``--profile-import`` adds one more import of the first 1,000 sessions of the file
under ``python -m cProfile``, with the server's command times (``INFO commandstats``) over it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from benchmarks.harness import report, servers
from benchmarks.harness.timing import median_of
from benchmarks.harness.workloads import make_transfer_event, user_name
from redis_agent_sessions import RedisSessionService, Session, SessionServiceConfig

APP = "bench_transfer"
CHUNK = 64  # sessions seeded concurrently (the pool allows 100)
PROFILE_SESSIONS = 1_000
CLI = [sys.executable, "-m", "redis_agent_sessions"]

progress = report.Progress("transfer")


@dataclass(frozen=True)
class Plan:
    name: str
    sessions: int
    events: int  # per session
    users: int
    rounds: int


FULL = Plan("full", 10_000, 50, 1_000, 3)
QUICK = Plan("quick", 1_000, 50, 100, 3)


# -- seeding ---------------------------------------------------------------------------------


async def seed_one(service: RedisSessionService, plan: Plan, number: int) -> None:
    session: Session = await service.create_session(
        app_name=APP,
        user_id=user_name(number, plan.users),
        state={"topic": "flights", "booking_step": "start", "user:name": f"Traveller {number}"},
    )
    for turn in range(plan.events):
        await service.append_event(session, make_transfer_event(number, turn))


async def seed(service: RedisSessionService, plan: Plan) -> dict[str, float]:
    started = time.perf_counter()
    step = max(CHUNK, plan.sessions // 10)
    for start in range(0, plan.sessions, CHUNK):
        numbers = range(start, min(plan.sessions, start + CHUNK))
        # Each chunk's sessions (and their events) are dropped before the next chunk.
        await asyncio.gather(*(seed_one(service, plan, n) for n in numbers))
        done = numbers[-1] + 1
        if done // step != start // step or done == plan.sessions:
            progress(f"seeded {done:,}/{plan.sessions:,} sessions")
    seconds = time.perf_counter() - started
    calls = plan.sessions * (1 + plan.events)
    return {"seconds": seconds, "calls": calls, "calls_per_s": calls / seconds}


# -- the CLI, as subprocesses ----------------------------------------------------------------


@dataclass
class CliRun:
    command: str
    seconds: float
    sessions: int
    events: int
    bytes: int
    said: str  # the command's last line on stderr

    @property
    def sessions_per_s(self) -> float:
        return self.sessions / self.seconds

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds


def cli_env() -> dict[str, str]:
    # --url and --key-prefix say everything; nothing inherited may point elsewhere or draw bars.
    return {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "RAS_PROGRESS")}


async def cli(*args: str) -> tuple[float, str]:
    """Run the CLI; its wall seconds and its stderr. Fails the benchmark on a non-zero exit."""
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        *args,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=cli_env(),
    )
    _, err = await proc.communicate()
    seconds = time.perf_counter() - started
    said = err.decode(errors="replace").strip()
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(args[:2])}` exited with {proc.returncode}: {said}")
    return seconds, said


def counted(said: str, verb: str, plan: Plan) -> None:
    # The CLI groups thousands (1,000), as its counts read everywhere.
    expected = f"{verb} {plan.sessions:,} sessions ({plan.sessions * plan.events:,} events)"
    if said.splitlines()[-1] != expected:
        raise RuntimeError(f"expected {expected!r}, the CLI said {said!r}")


async def export(url: str, prefix: str, path: Path, plan: Plan) -> CliRun:
    seconds, said = await cli("export", APP, "-o", str(path), "--url", url, "--key-prefix", prefix)
    counted(said, "exported", plan)
    events = plan.sessions * plan.events
    return CliRun("export", seconds, plan.sessions, events, size_of(path), said)


async def import_file(url: str, prefix: str, path: Path, plan: Plan) -> CliRun:
    seconds, said = await cli("import", str(path), "--url", url, "--key-prefix", prefix)
    counted(said, "imported", plan)
    events = plan.sessions * plan.events
    return CliRun("import", seconds, plan.sessions, events, size_of(path), said)


def size_of(path: Path) -> int:
    return path.stat().st_size


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def summary(runs: list[CliRun]) -> dict[str, Any]:
    return {
        "runs": len(runs),
        "seconds": [round(r.seconds, 3) for r in runs],
        "median_s": median_of([r.seconds for r in runs]),
        "sessions_per_s": median_of([r.sessions_per_s for r in runs]),
        "events_per_s": median_of([r.events_per_s for r in runs]),
        "file_mb": runs[0].bytes / 1e6,
        "sessions": runs[0].sessions,
        "events": runs[0].events,
    }


# -- the profile of one import ---------------------------------------------------------------


async def profile_import(
    client: Redis, url: str, prefix: str, source: Path, folder: Path, top: int = 25
) -> dict[str, Any]:
    """One import of the file's first sessions under cProfile, and the server's time over it."""
    part = folder / "profile-part.jsonl"
    with source.open("rb") as f, part.open("wb") as out:
        for _, line in zip(range(PROFILE_SESSIONS), f, strict=False):
            out.write(line)
    stats_file = folder / "import.pstats"
    before = await servers.command_stats(client)
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cProfile",
        "-o",
        str(stats_file),
        "-m",
        "redis_agent_sessions",
        "import",
        str(part),
        "--url",
        url,
        "--key-prefix",
        prefix,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=cli_env(),
    )
    _, err = await proc.communicate()
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"the profiled import failed: {err.decode(errors='replace')}")
    server = servers.stats_delta(before, await servers.command_stats(client))
    await servers.delete_prefix(client, prefix)
    texts = {
        order: report.cprofile_text(str(stats_file), "", top, order)
        for order in ("tottime", "cumulative")
    }
    return {
        "sessions": PROFILE_SESSIONS,
        "wall_s_under_cprofile": seconds,
        "said": err.decode(errors="replace").strip(),
        "server_commands": {
            cmd: {"calls": calls, "usec": usec}
            for cmd, (calls, usec) in sorted(server.items(), key=lambda kv: -kv[1][1])
            if cmd != "info"
        },
        "by_own_time": texts["tottime"],
        "by_cumulative_time": texts["cumulative"],
    }


# -- run & report ----------------------------------------------------------------------------


async def run(url: str, owned: bool, plan: Plan, profile: bool = False) -> dict[str, Any]:
    client = Redis.from_url(url, decode_responses=False)
    tag = uuid.uuid4().hex[:8]
    source = f"ras-bench-transfer-{tag}"
    imports = [f"ras-bench-transfer-{tag}-import{n}" for n in range(plan.rounds)]
    try:
        with tempfile.TemporaryDirectory(prefix="ras-bench-transfer-") as tmp:
            folder = Path(tmp)
            env = await report.server_environment(
                client,
                url=url,
                own_server=owned,
                plan=asdict(plan),
            )
            service = RedisSessionService(client, config=SessionServiceConfig(key_prefix=source))
            progress(f"seeding {plan.sessions:,} sessions x {plan.events} events")
            seeding = await seed(service, plan)
            progress(
                f"seeded in {seeding['seconds']:.1f} s ({seeding['calls_per_s']:,.0f} calls/s)"
            )
            memory = await client.info("memory")
            env["redis_used_memory_after_seeding"] = memory.get("used_memory_human")
            baseline = []
            for _ in range(3):
                seconds, _ = await cli(
                    "ls", APP, "--limit", "1", "--json", "--url", url, "--key-prefix", source
                )
                baseline.append(seconds)
            exports: list[CliRun] = []
            imported: list[CliRun] = []
            reexports: list[CliRun] = []
            first = folder / "export-1.jsonl"
            reference = ""
            identical = True
            for n in range(plan.rounds):
                path = first if n == 0 else folder / f"export-{n + 1}.jsonl"
                progress(f"round {n + 1}/{plan.rounds}: export")
                exports.append(await export(url, source, path, plan))
                digest = sha256(path)
                reference = reference or digest
                identical &= digest == reference
                if path != first:
                    path.unlink()
                progress(f"round {n + 1}/{plan.rounds}: import into a fresh prefix")
                imported.append(await import_file(url, imports[n], first, plan))
                progress(f"round {n + 1}/{plan.rounds}: export of the imported prefix")
                again = folder / "reexport.jsonl"
                reexports.append(await export(url, imports[n], again, plan))
                identical &= sha256(again) == reference
                again.unlink()
                await servers.delete_prefix(client, imports[n])
                progress(
                    f"round {n + 1}: export {exports[-1].seconds:.1f} s, import "
                    f"{imported[-1].seconds:.1f} s, re-export {reexports[-1].seconds:.1f} s"
                )
            profiled = None
            if profile:
                progress(f"profiling one import of {PROFILE_SESSIONS:,} sessions")
                prefix = f"ras-bench-transfer-{tag}-profile"
                profiled = await profile_import(client, url, prefix, first, folder)
    finally:
        if not owned:
            for prefix in (source, *imports):
                await servers.delete_prefix(client, prefix)
        await client.aclose()
    return {
        "environment": env,
        "seeding": seeding,
        "cli_baseline_ls_s": median_of(baseline),
        "export": summary(exports),
        "import": summary(imported),
        "reexport": summary(reexports),
        "byte_identical": identical,
        "export_sha256": reference,
        "import_profile": profiled,
    }


def render(result: dict[str, Any]) -> str:
    env = result["environment"]
    plan = env["plan"]
    where = "own throwaway server" if env["own_server"] else "given --url"
    seeding = result["seeding"]
    out = [
        *report.environment_lines(
            f"redis-agent-sessions export/import benchmark ({plan['name']} run)", env
        ),
        f"server {env['url']} ({where})",
        f"{plan['sessions']:,} sessions x {plan['events']} events over {plan['users']:,} users "
        f"(redis used_memory {env['redis_used_memory_after_seeding']}); seeded in "
        f"{seeding['seconds']:.1f} s ({seeding['calls_per_s']:,.0f} create/append calls/s)",
        f"each command a CLI subprocess; medians of {plan['rounds']} runs; `ls APP --limit 1` "
        f"(start + connect + one read) takes {result['cli_baseline_ls_s']:.2f} s",
        "",
    ]
    table = report.Table(("command", "wall s", "sessions/s", "events/s", "file MB", "runs (s)"))
    for key, label in (
        ("export", "export APP -o FILE"),
        ("import", "import FILE (fresh prefix)"),
        ("reexport", "export of the imported prefix"),
    ):
        s = result[key]
        table.add(
            label,
            f"{s['median_s']:.2f}",
            f"{s['sessions_per_s']:,.0f}",
            f"{s['events_per_s']:,.0f}",
            f"{s['file_mb']:.1f}",
            ", ".join(f"{x:.2f}" for x in s["seconds"]),
        )
    same = "yes" if result["byte_identical"] else "NO"
    out += [
        table.render(),
        "",
        f"exports of the seeded data and of each import byte-identical: {same} "
        f"(sha256 {result['export_sha256'][:16]}...)",
    ]
    prof = result["import_profile"]
    if prof:
        server = report.Table(("server commands over the profiled import", "calls", "ms"))
        for cmd, v in list(prof["server_commands"].items())[:10]:
            server.add(cmd, f"{v['calls']:,}", f"{v['usec'] / 1e3:,.0f}")
        out += [
            "",
            f"profiled import of {prof['sessions']:,} sessions: "
            f"{prof['wall_s_under_cprofile']:.1f} s under cProfile ({prof['said']})",
            "(EVALSHA's time includes the commands its script runs, listed too)",
            server.render(),
            "",
            "cProfile, by own time:",
            prof["by_own_time"],
            "",
            "cProfile, by cumulative time:",
            prof["by_cumulative_time"],
        ]
    out += ["", f"wall time {env['wall_seconds']} s", ""]
    compact = dict(result)
    if compact["import_profile"]:
        compact["import_profile"] = {
            k: v
            for k, v in compact["import_profile"].items()
            if k not in ("by_own_time", "by_cumulative_time")
        }
    out.append(json.dumps(compact, indent=2))
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = report.parser(__doc__)
    report.add_flags(parser, url=True, quick="1,000 sessions x 50 events")
    parser.add_argument(
        "--profile-import",
        action="store_true",
        help=f"also profile one import of {PROFILE_SESSIONS:,} sessions (cProfile)",
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    result = servers.run_on(
        args.url, lambda served, owned: run(served, owned, plan, profile=args.profile_import)
    )
    report.emit(result, render, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
