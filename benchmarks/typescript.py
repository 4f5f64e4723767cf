"""Benchmark of the TypeScript package (not a test): a Node append against a Python append.

Usage (from the repository root, typescript/ built: ``npm ci && npm run build`` there)::

    .venv/bin/python -m benchmarks.typescript [--rounds 20] [--per-round 50]
    .venv/bin/python -m benchmarks.typescript --quick      # 5 rounds
    .venv/bin/python -m benchmarks.typescript --json out.json [--url redis://...]

Starts a throwaway Redis 7 (or uses ``--url``) and appends the same ADK events (the
booking conversation of ``benchmarks.harness.workloads.make_adk_event``: user text, tool
call, tool result and reply with state deltas) through the Python ADK service and through
the TypeScript service (``typescript/dist/bench/append.js``, one Node process), each onto a
session of its own, in alternating rounds of ``--per-round`` appends. Each side times its
own calls (``perf_counter_ns`` / ``process.hrtime``): p50 over all rounds, and the ratio
as the median of the per-round ratios. Then the package's size: ``npm pack --dry-run``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from benchmarks.harness import report, servers, timing
from benchmarks.harness.workloads import make_adk_event, unique_prefix
from redis_agent_sessions import SessionServiceConfig
from redis_agent_sessions.adk import RedisSessionService

TYPESCRIPT = Path(__file__).resolve().parent.parent / "typescript"
NODE_BENCH = TYPESCRIPT / "dist" / "bench" / "append.js"
WARMUP = 20
NODE_WARMUP_ROUNDS = 4

progress = report.Progress("typescript")


def package_size() -> dict[str, Any]:
    """What ``npm pack --dry-run`` reports: the tarball's size, unpacked, files."""
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("npm is not on PATH")
    out = subprocess.run(
        [npm, "pack", "--dry-run", "--json"],
        cwd=TYPESCRIPT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    packed = json.loads(out)[0]
    return {
        "tarball_bytes": packed["size"],
        "unpacked_bytes": packed["unpackedSize"],
        "files": packed["entryCount"],
    }


async def bench(url: str, rounds: int, per_round: int, scratch: Path) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None or not NODE_BENCH.is_file():
        raise SystemExit("needs node and typescript/ built: npm ci && npm run build there")
    prefix = unique_prefix("ts")
    client = Redis.from_url(url)
    service = RedisSessionService(client, config=SessionServiceConfig(key_prefix=prefix))
    events = [make_adk_event(i) for i in range(WARMUP + rounds * per_round)]
    stored = [e.model_dump(mode="json", exclude_none=True) for e in events[:40]]
    events_file = scratch / "events.json"
    events_file.write_text(json.dumps(stored), encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        node,
        str(NODE_BENCH),
        url,
        prefix,
        str(events_file),
        str(per_round),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None

    async def node_round() -> list[int]:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(b"round\n")
        await proc.stdin.drain()
        samples: list[int] = json.loads(await proc.stdout.readline())["ns"]
        return samples

    try:
        env = await report.server_environment(client)
        session = await service.create_session(app_name="bench", user_id="u", session_id="py")
        clock = time.perf_counter_ns
        progress("warming up both")
        for event in events[:WARMUP]:
            await service.append_event(session, event)
        # Node's JIT compiles the append's path over its first few hundred calls.
        for _ in range(NODE_WARMUP_ROUNDS):
            await node_round()
        appends = timing.Rounds()
        at = WARMUP
        progress(f"{rounds} alternating rounds of {per_round} appends")
        with timing.settled_gc():
            for r in range(rounds):
                samples = []
                for event in events[at : at + per_round]:
                    start = clock()
                    await service.append_event(session, event)
                    samples.append(clock() - start)
                at += per_round
                appends.add("python", r, samples)
                appends.add("typescript", r, await node_round())
    finally:
        proc.stdin.close()
        await proc.wait()
        await client.aclose()
    return {
        "environment": env,
        "rounds": rounds,
        "per_round": per_round,
        "python_append_ms": appends.p50_ms("python"),
        "typescript_append_ms": appends.p50_ms("typescript"),
        "typescript_vs_python": appends.ratio("typescript", "python"),
        "package": package_size(),
    }


def render(r: dict[str, Any]) -> str:
    pkg = r["package"]
    table = report.Table(("", "p50"))
    table.add("append_event, Python (ADK service)", f"{r['python_append_ms'] * 1000:,.0f} us")
    table.add(
        "appendEvent, TypeScript (ADK-JS service)", f"{r['typescript_append_ms'] * 1000:,.0f} us"
    )
    return "\n".join(
        [
            *report.environment_lines("redis-agent-sessions TypeScript", r["environment"]),
            "",
            f"{r['rounds']} alternating rounds of {r['per_round']} appends each, same server",
            table.render(),
            f"TypeScript / Python, median of per-round ratios: {r['typescript_vs_python']:.2f}x",
            "",
            f"npm pack --dry-run: {pkg['tarball_bytes']:,} bytes packed, "
            f"{pkg['unpacked_bytes']:,} unpacked, {pkg['files']} files",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = report.parser(__doc__)
    parser.add_argument("--rounds", type=int, default=None, help="default 20 (--quick: 5)")
    parser.add_argument("--per-round", type=int, default=50)
    report.add_flags(parser, url=True, quick="5 rounds instead of 20")
    args = parser.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 20)
    with servers.redis_url(args.url) as (url, _), tempfile.TemporaryDirectory() as scratch:
        result = asyncio.run(bench(url, rounds, args.per_round, Path(scratch)))
    report.emit(result, render, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
