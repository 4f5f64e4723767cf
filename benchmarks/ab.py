"""A/B benchmark of two versions of the library (not a test), in one run on one Redis 7.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.ab HEAD              # HEAD (A) against the working tree (B)
    .venv/bin/python -m benchmarks.ab v0.1.0 HEAD       # two revisions
    .venv/bin/python -m benchmarks.ab HEAD~3 --rounds 5 --json ab.json
    .venv/bin/python -m benchmarks.ab HEAD --quick      # fewer calls, 2 rounds
    .venv/bin/python -m benchmarks.ab HEAD --ttl 3600   # the services give sessions a TTL

Each revision named is checked out with ``git worktree add --detach`` into a temporary
directory under /tmp (removed again with ``git worktree remove`` at the end, also on an
error or Ctrl-C); the working tree is used as it is. One throwaway Redis 7 serves every
measurement. Each version runs in its own subprocess (this venv's interpreter,
``PYTHONPATH`` = that tree's ``src``, so only the library differs; the measuring code is
this file's, for both), which sets up its sessions, warms up, then measures block by
block on command. Rounds interleave the versions: in each round, for each metric, a
block of A and a block of B (A first in odd rounds, B first in even ones), so the two
blocks compared are measured seconds apart:

- ``append_event p50``: 2,000 appends (``--appends``) to one session, core service;
- ``get_session p50``: full reads of a 1,000-event session, cache off (``--reads`` reads);
- ``cached get_session p50``: the same read through a service with
  ``SessionServiceConfig(read_cache_bytes=256 << 20)``, each read after one event appended
  by another service (the cache holds all but that event);
- with ``--ingest N``, memory ingestion: the wall time per entry of N entries (the memory
  benchmark's) added 1,000 at a time to one user (``add_events_to_memory``, plain
  backend), each version its own app, whose user grows by N each round.

Only the public API is used, so any revision with ``RedisSessionService`` works (the cached
read is skipped where ``read_cache_bytes`` does not exist). Reported per metric: each
version's median over rounds of its p50, and B/A: the ratio taken within each round, then
the median of the rounds (``benchmarks.harness.timing``); 1.00 = no change, below 1 = B is
faster.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Imported by the worker too, against either version of the library: only the timing
# helpers and the public-API workloads here (the servers and the report are imported
# where the orchestrator needs them).
from benchmarks.harness import timing
from benchmarks.harness.workloads import make_event, make_memory_events

REPO = Path(__file__).resolve().parents[1]
APP = "bench_ab"
SEED_EVENTS = 1000
WARMUP_APPENDS = 200
WARMUP_READS = 5
METRICS = {
    "append_p50_us": "append_event p50, us",
    "get_p50_us": f"get_session of {SEED_EVENTS:,} events p50 (cache off), us",
    "cached_p50_us": f"cached get_session of {SEED_EVENTS:,}+ events p50 (1 new event), us",
    "ingest_us": "memory ingestion, wall us per entry",
}


# -- the worker: one version, measuring block by block -----------------------------------------


class Measurer:
    """One version's services and sessions on the shared server, and the timed blocks."""

    async def setup(self, url: str, ttl: int | None = None) -> dict[str, Any]:
        from redis.asyncio import Redis

        import redis_agent_sessions
        from redis_agent_sessions import RedisSessionService, SessionServiceConfig

        self.client = Redis.from_url(url)
        prefix = f"ras-ab-{uuid.uuid4().hex[:8]}"
        self.invocation = str(uuid.uuid4())
        self.service = RedisSessionService(
            self.client, config=SessionServiceConfig(key_prefix=prefix, ttl_seconds=ttl)
        )
        # append_event: warm-up on a scratch session; the timed appends go to one session.
        await self.seeded(WARMUP_APPENDS)
        self.appending = await self.service.create_session(app_name=APP, user_id="u")
        self.appended = 0
        # get_session of a 1,000-event session, no cache.
        big = await self.seeded(SEED_EVENTS)
        self.big = {"app_name": APP, "user_id": "u", "session_id": big.id}
        for _ in range(WARMUP_READS):
            await self.service.get_session(**self.big)
        # The same read through the cache, after one event appended by another service.
        self.cached: Any = None
        if "read_cache_bytes" in SessionServiceConfig.model_fields:
            self.cached = RedisSessionService(
                self.client,
                config=SessionServiceConfig(key_prefix=prefix, read_cache_bytes=256 << 20),
            )
            self.other = await self.seeded(SEED_EVENTS)
            self.other_ids = {"app_name": APP, "user_id": "u", "session_id": self.other.id}
            self.turn = SEED_EVENTS
            await self.cached.get_session(**self.other_ids)  # fills the cache
            for _ in range(WARMUP_READS):
                await self.append_then_read()
        return {
            "library": redis_agent_sessions.__file__,
            "version": getattr(redis_agent_sessions, "__version__", "?"),
            "cached": self.cached is not None,
        }

    async def ingested(self, count: int) -> float:
        """Wall microseconds per entry of ``count`` memory entries added 1,000 at a time."""
        from redis_agent_sessions import RedisMemoryService

        if not hasattr(self, "memory"):
            self.memory = RedisMemoryService(self.client, backend="plain")
            self.memory_app = f"ab{uuid.uuid4().hex[:8]}"
            self.entries = 0
        events = make_memory_events(random.Random(self.entries), self.entries, count, "e")
        self.entries += count
        start = time.perf_counter_ns()
        for i in range(0, count, 1000):
            await self.memory.add_events_to_memory(
                app_name=self.memory_app, user_id="me", events=events[i : i + 1000], session_id="s"
            )
        return (time.perf_counter_ns() - start) / count / 1e3

    async def seeded(self, events: int) -> Any:
        session = await self.service.create_session(app_name=APP, user_id="u")
        for i in range(events):
            await self.service.append_event(session, make_event(i, self.invocation))
        return session

    async def append_then_read(self) -> int:
        await self.service.append_event(self.other, make_event(self.turn, self.invocation))
        self.turn += 1
        start = time.perf_counter_ns()
        got = await self.cached.get_session(**self.other_ids)
        elapsed = time.perf_counter_ns() - start
        assert got is not None
        assert len(got.events) == self.turn
        return elapsed

    async def block(self, metric: str, count: int) -> float | None:
        """p50 (us) of ``count`` timed calls of ``metric``."""
        samples: list[int] = []
        if metric == "ingest_us":
            return await self.ingested(count)
        if metric == "append_p50_us":
            start = self.appended
            self.appended += count
            pairs = [
                (self.appending, make_event(i, self.invocation))
                for i in range(start, start + count)
            ]
            with timing.settled_gc():
                await timing.timed_appends(self.service, pairs, samples)
        elif metric == "get_p50_us":

            async def read() -> Any:
                return await self.service.get_session(**self.big)

            samples = await timing.time_calls(read, count, 0)
        elif self.cached is None:
            return None
        else:
            with timing.settled_gc():
                samples = [await self.append_then_read() for _ in range(count)]
        return timing.percentile(samples, 50) / 1e3


async def serve(url: str, ttl: int | None = None) -> None:
    """Answer the orchestrator: one JSON line per command line on stdin."""
    measurer = Measurer()
    try:
        print(json.dumps(await measurer.setup(url, ttl)), flush=True)
        for line in sys.stdin:
            command = json.loads(line)
            if command.get("quit"):
                break
            p50 = await measurer.block(command["metric"], int(command["count"]))
            print(json.dumps({"p50_us": p50}), flush=True)
    finally:
        client = getattr(measurer, "client", None)
        if client is not None:
            await client.aclose()


def worker(args: argparse.Namespace) -> int:
    asyncio.run(serve(args.url, args.ttl))
    return 0


# -- the orchestrator ------------------------------------------------------------------------


@dataclass
class Version:
    label: str
    src: Path
    rev: str | None  # None: the working tree


def git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


@contextlib.contextmanager
def checkouts(revisions: Sequence[str | None]) -> Iterator[list[Version]]:
    """A version per revision (None: the working tree); revisions in git worktrees under a
    temporary directory in /tmp, removed on the way out."""
    base = Path(tempfile.mkdtemp(prefix="ras-ab-", dir="/tmp"))
    added: list[Path] = []
    try:
        versions = []
        by_sha: dict[str, Path] = {}
        for rev in revisions:
            if rev is None:
                versions.append(Version("working tree", REPO / "src", None))
                continue
            sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
            if sha not in by_sha:
                path = base / sha[:12]
                print(f"[ab] git worktree add --detach {path} {sha[:12]}", file=sys.stderr)
                git("worktree", "add", "--detach", str(path), sha)
                added.append(path)
                by_sha[sha] = path
            versions.append(Version(f"{rev} ({sha[:7]})", by_sha[sha] / "src", rev))
        yield versions
    finally:
        for path in added:
            print(f"[ab] git worktree remove --force {path}", file=sys.stderr)
            done = subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                print(f"[ab] could not remove {path}: {done.stderr.strip()}", file=sys.stderr)
        shutil.rmtree(base, ignore_errors=True)


class Worker:
    """One version's measuring subprocess: this venv's interpreter, ``PYTHONPATH`` = that
    tree's ``src`` (then this repository, for the measuring code), commands on its stdin."""

    def __init__(self, version: Version, url: str, ttl: int | None = None) -> None:
        self.version = version
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(version.src), str(REPO)])}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.ab", "--worker", "--url", url]
            + (["--ttl", str(ttl)] if ttl else []),
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.info = self._reply()
        library = Path(self.info["library"]).resolve()
        if not library.is_relative_to(version.src.resolve()):
            raise SystemExit(f"{version.label}: the worker imported {library}")

    def _reply(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            raise SystemExit(f"{self.version.label}: the worker exited ({code}); see above")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def block(self, metric: str, count: int) -> float | None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"metric": metric, "count": count}) + "\n")
        self.process.stdin.flush()
        p50: float | None = self._reply()["p50_us"]
        return p50

    def close(self) -> None:
        """Ask it to quit; stop it (its pid: a process this run started) if it does not."""
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(json.dumps({"quit": True}) + "\n")
                self.process.stdin.close()
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


def orchestrate(args: argparse.Namespace) -> int:
    import redis

    from benchmarks.harness import report, servers

    progress = report.Progress("ab")
    revisions: list[str | None] = [args.base, args.new]
    counts = {"append_p50_us": args.appends, "get_p50_us": args.reads, "cached_p50_us": args.reads}
    if args.ingest:
        counts["ingest_us"] = args.ingest
    with contextlib.ExitStack() as stack:
        a, b = stack.enter_context(checkouts(revisions))
        node = stack.enter_context(servers.redis7(name="ab"))
        with redis.Redis.from_url(node.url) as probe:
            version = str(probe.info("server").get("redis_version"))
        workers = {}
        for side, one in (("A", a), ("B", b)):
            progress(f"{side} = {one.label}: starting its worker (setup and warm-up)")
            workers[side] = Worker(one, node.url, args.ttl)
            stack.callback(workers[side].close)
        rounds: list[dict[str, dict[str, Any]]] = []
        for round_no in range(args.rounds):
            order = ["A", "B"] if round_no % 2 == 0 else ["B", "A"]
            progress(f"round {round_no + 1}/{args.rounds} ({' then '.join(order)} per metric)")
            of_round: dict[str, dict[str, Any]] = {"A": {}, "B": {}}
            for metric in METRICS:
                for side in order:
                    count = counts.get(metric, 0)
                    of_round[side][metric] = workers[side].block(metric, count) if count else None
            rounds.append(of_round)
    env = report.environment(
        {"redis": version},
        appends=args.appends,
        reads=args.reads,
        ingest=args.ingest,
        ttl_seconds=args.ttl,
    )
    result: dict[str, Any] = {
        "environment": env,
        "A": {"label": a.label, "src": str(a.src), **workers["A"].info},
        "B": {"label": b.label, "src": str(b.src), **workers["B"].info},
        "rounds": rounds,
        "metrics": {},
    }
    for key in METRICS:
        values = {side: [r[side][key] for r in rounds] for side in ("A", "B")}
        if any(v is None for side in values.values() for v in side):
            result["metrics"][key] = None
            continue
        ratios = [r["B"][key] / r["A"][key] for r in rounds]
        result["metrics"][key] = {
            "A_p50_us": timing.median_of(values["A"]),
            "B_p50_us": timing.median_of(values["B"]),
            "ratio": timing.median_of(ratios),
            "round_ratios": ratios,
        }
    report.emit(result, render, args.json)
    return 0


def render(result: dict[str, Any]) -> str:
    from benchmarks.harness import report

    env = result["environment"]
    rounds = len(result["rounds"])
    table = report.Table(
        ("metric (median of rounds)", "A", "B", "B/A", "per-round B/A"),
    )
    for key, label in METRICS.items():
        m = result["metrics"][key]
        if m is None:
            asked = key != "ingest_us" or env.get("ingest")
            why = "not in one of the versions" if asked else "not asked: --ingest N"
            table.add(label, "-", "-", "-", f"({why})")
            continue
        table.add(
            label,
            report.us(m["A_p50_us"]),
            report.us(m["B_p50_us"]),
            f"{m['ratio']:.2f}",
            " ".join(f"{r:.2f}" for r in m["round_ratios"]),
        )
    return "\n".join(
        [
            *report.environment_lines("redis-agent-sessions A/B benchmark", env),
            f"A = {result['A']['label']}: {result['A']['src']}",
            f"B = {result['B']['label']}: {result['B']['src']}",
            f"{rounds} rounds; per round and metric a block of each version (A first in odd "
            f"rounds, B in even): {env['appends']} appends, {env['reads']} reads"
            + (f", {env['ingest']:,} memory entries" if env.get("ingest") else ""),
            "",
            table.render(),
            "",
            "B/A: the ratio within each round, median of the rounds; below 1.00 = B faster",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("base", nargs="?", help="revision A (e.g. HEAD, a tag, a commit)")
    parser.add_argument("new", nargs="?", default=None, help="revision B (default: working tree)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3; quick 2)")
    parser.add_argument("--appends", type=int, default=None, help="timed appends (2000)")
    parser.add_argument("--reads", type=int, default=None, help="timed reads per metric (200)")
    parser.add_argument(
        "--ingest", type=int, default=0, help="memory entries ingested per block (none)"
    )
    parser.add_argument("--quick", action="store_true", help="300 appends, 30 reads, 2 rounds")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON to PATH")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument(
        "--ttl", type=int, default=None, help="ttl_seconds of the measured services (none)"
    )
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (2 if args.quick else 3)
    args.appends = args.appends or (300 if args.quick else 2000)
    args.reads = args.reads or (30 if args.quick else 200)
    if args.worker:
        return worker(args)
    if not args.base:
        parser.error("name revision A (e.g. HEAD)")
    return orchestrate(args)


if __name__ == "__main__":
    raise SystemExit(main())
