"""Benchmark of appends and full reads (not a test): latency, throughput, and where time goes.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.append            # full run, ~1 minute
    .venv/bin/python -m benchmarks.append --quick    # smoke run, well under 30 s
    .venv/bin/python -m benchmarks.append --json out.json
    .venv/bin/python -m benchmarks.append --url redis://127.0.0.1:6379/0

Without ``--url`` it starts a throwaway Redis 7 (``benchmarks.harness.servers``) and always
stops it. With ``--url`` it writes only keys under a random prefix and deletes them at the end.

Everything runs in one process, on one ``redis.asyncio.Redis`` client (bytes replies,
hiredis parser when installed), so the raw EVALSHA round trips and the library calls are
measured on the same connection pool in the same run. Latencies come from
``time.perf_counter_ns`` around each awaited call; GC and percentiles as in
``benchmarks.harness.timing``. The Python profile (manual timers and cProfile) runs last, in
its own phase, so it does not touch the main numbers. Reads through the read cache and
ADK reads: ``benchmarks.reads`` and ``benchmarks.adk``; contended appends:
``benchmarks.contention``; pure CPU parts (encoding, decoding): ``benchmarks.cpu``.

The package: this module holds the plan and the constants its parts share; ``phases`` runs
the timed phases, ``profile`` the profile phase, and ``__main__`` the run and its report.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.harness import report

APP = "bench_app"
USERS = 50
HISTORY_SIZES = (1, 100, 1000, 10_000)
GET_SESSION_EVENTS = 1000
RECENT = 20
TARGET_APPEND_VS_RAW = 1.5
TARGET_10K_VS_1 = 1.2
TARGET_GET_MS = 8.0

TRIVIAL_LUA = "return 1"
HSET_XADD_LUA = """\
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XADD', KEYS[2], '*', 'event', ARGV[3])
"""

progress = report.Progress("append")


@dataclass(frozen=True)
class Plan:
    """How many operations each phase runs."""

    name: str
    appends: int  # measured appends per history size
    warmup: int  # untimed calls before each timed phase
    raw_calls: int
    get_full_calls: int
    get_recent_calls: int
    throughput_appends: int  # per concurrency case, split across the tasks
    profile_appends: int


FULL = Plan("full", 2000, 200, 5000, 300, 2000, 8000, 3000)
QUICK = Plan("quick", 200, 30, 500, 30, 200, 800, 300)
