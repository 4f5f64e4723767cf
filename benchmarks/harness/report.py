"""What a benchmark prints: the environment header, tables, progress, and ``--json PATH``.

Text goes to stdout, progress to stderr. ``--json PATH`` writes the whole result as JSON to
PATH (``-``: to stdout, instead of the text).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import platform
import pstats
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.asyncio.connection import DefaultParser

import redis_agent_sessions
from benchmarks.harness import servers

__all__ = [
    "Progress",
    "Table",
    "add_flags",
    "cprofile_text",
    "emit",
    "environment",
    "environment_lines",
    "file_system",
    "latency_cells",
    "ms",
    "ratio_row",
    "ratio_table",
    "share_table",
    "sign",
    "us",
    "verdict",
]


class Progress:
    """``[tag 12.3 s] message`` lines on stderr."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.started = time.perf_counter()

    def __call__(self, message: str) -> None:
        elapsed = time.perf_counter() - self.started
        print(f"[{self.tag} {elapsed:5.1f} s] {message}", file=sys.stderr, flush=True)


# -- the environment header ------------------------------------------------------------------


def environment(servers: dict[str, str] | None = None, **more: Any) -> dict[str, Any]:
    """Versions (python, redis-py and its parser, this package, each redis server named in
    ``servers``: label -> version), the machine, and ``more``."""
    try:
        loop: str | None = type(asyncio.get_running_loop()).__name__
    except RuntimeError:
        loop = None
    return {
        "python": platform.python_version(),
        "redis_py": redis.__version__,
        "parser": DefaultParser.__name__,
        "redis_agent_sessions": redis_agent_sessions.__version__,
        "redis_servers": dict(servers or {}),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "event_loop": loop,
        **more,
    }


async def server_environment(client: Any, **more: Any) -> dict[str, Any]:
    """:func:`environment` of a run against ``client``'s server."""
    return environment({"redis": await servers.server_version(client)}, **more)


def environment_lines(title: str, env: dict[str, Any]) -> list[str]:
    """The header every benchmark prints first."""
    servers = ", ".join(
        version if len(env["redis_servers"]) == 1 else f"{version} ({name})"
        for name, version in env["redis_servers"].items()
    )
    return [
        title,
        f"redis-agent-sessions {env['redis_agent_sessions']}, python {env['python']}, "
        f"redis-py {env['redis_py']} ({env['parser']}), redis-server {servers or '-'}; "
        f"{env['cpus']} CPUs, 1-min load {env['loadavg_1m']:.2f} at start",
    ]


def file_system(path: str) -> str:
    """The type of the file system ``path`` is on (``tmpfs``, ``ext4``, ...), from
    /proc/mounts; ``unknown`` where that cannot be read."""
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


# -- arguments and output --------------------------------------------------------------------


def parser(doc: str | None, prog: str | None = None) -> argparse.ArgumentParser:
    """A benchmark's argument parser, described by the first line of its docstring; ``prog``
    names it in the usage line (argparse's default, the script's file name, would be
    ``__main__.py`` for a benchmark that is a package)."""
    description = doc.splitlines()[0] if doc else None
    return argparse.ArgumentParser(prog=prog, description=description)


def add_flags(
    parser: argparse.ArgumentParser, *, url: bool = False, quick: str | None = None
) -> argparse.ArgumentParser:
    """``--json PATH``, and ``--url`` / ``--quick`` (with its help text) where asked."""
    if url:
        parser.add_argument("--url", help="use this Redis instead of starting a throwaway one")
    if quick is not None:
        parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument(
        "--json",
        metavar="PATH",
        help="also write the result as JSON to PATH ('-': only the JSON, on stdout)",
    )
    return parser


def emit(
    result: dict[str, Any], text: Callable[[dict[str, Any]], str], json_path: str | None
) -> None:
    """Print the text report (unless ``--json -``) and write the JSON where asked."""
    dumped = json.dumps(result, indent=2, default=str)
    if json_path == "-":
        print(dumped)
        return
    print(text(result))
    if json_path:
        Path(json_path).write_text(dumped + "\n", encoding="utf-8")
        print(f"\nJSON result written to {json_path}")


# -- tables and numbers ----------------------------------------------------------------------


@dataclass
class Table:
    """Columns padded to fit: the first left-aligned (``left`` of them), the rest right."""

    header: tuple[str, ...]
    rows: list[tuple[str, ...]] = field(default_factory=list)
    left: int = 1

    def render(self) -> str:
        cells = [self.header, *self.rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(self.header))]

        def line(row: tuple[str, ...]) -> str:
            head = [c.ljust(w) for c, w in zip(row[: self.left], widths, strict=False)]
            rest = (c.rjust(w) for c, w in zip(row[self.left :], widths[self.left :], strict=True))
            return "  ".join([*head, *rest]).rstrip()

        return "\n".join([line(self.header), *(line(r) for r in self.rows)])

    def add(self, *cells: str) -> None:
        self.rows.append(cells)


def us(value: float) -> str:
    return f"{value:,.1f}"


def ms(value_us: float) -> str:
    """Microseconds shown as milliseconds."""
    return f"{value_us / 1e3:,.2f}"


def sign(value: float) -> str:
    return f"{value:+,.1f}"


def latency_cells(label: str, s: dict[str, Any]) -> tuple[str, ...]:
    """label, n, p50, p99, mean (us) of a :class:`~.timing.Stats` as a dict."""
    return (label, str(s["n"]), us(s["p50_us"]), us(s["p99_us"]), us(s["mean_us"]))


def share_table(title: str, parts: dict[str, float], total: float) -> Table:
    table = Table((title, "us", "share"))
    for name, value in parts.items():
        table.add(name, us(value), f"{value / total:.0%}")
    return table


def verdict(value: float, target: float, *, at_least: bool = False) -> str:
    """``met`` when ``value`` is at most ``target`` (or ``at_least`` it), else ``MISSED``."""
    return "met" if (value >= target if at_least else value <= target) else "MISSED"


def ratio_row(
    name: str,
    value: float,
    target: float | None,
    *,
    at_least: bool = False,
    ok: bool = True,
    fmt: str = "{:.2f}",
) -> dict[str, Any]:
    """A ratio and its verdict: at most ``target`` (or ``at_least`` it), and ``ok``; shown
    (value and target) with ``fmt``, e.g. ``"{:.1%}"``."""
    met = target is not None and ok and (value >= target if at_least else value <= target)
    verdict = None if target is None else ("PASS" if met else "FAIL")
    return {
        "name": name,
        "value": value,
        "target": target,
        "verdict": verdict,
        "min": at_least,
        "fmt": fmt,
    }


def ratio_table(rows: Sequence[dict[str, Any]], title: str = "ratios from this run") -> str:
    table = Table((title, "value", "target", "verdict"))
    for r in rows:
        fmt = r.get("fmt", "{:.2f}")
        shown = str if fmt == "{:.2f}" else fmt.format  # a plain target as it was given
        target = (
            "-" if r["target"] is None else f"{'>=' if r['min'] else '<='} {shown(r['target'])}"
        )
        table.add(r["name"], fmt.format(r["value"]), target, r["verdict"] or "info")
    return table.render()


async def profiled(work: Callable[[], Awaitable[Any]], header: str, top: int) -> str:
    """:func:`cprofile_text` of ``work``, awaited under cProfile."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        await work()
    finally:
        profiler.disable()
    return cprofile_text(profiler, header, top)


def cprofile_text(
    source: cProfile.Profile | str, header: str, top: int, order: str = "tottime"
) -> str:
    """The ``top`` rows of a profile (or a saved stats file) by ``order``, under ``header``
    (none when empty)."""
    out = io.StringIO()
    pstats.Stats(source, stream=out).strip_dirs().sort_stats(order).print_stats(top)
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    return "\n".join([*([header] if header else []), *lines[start:]]).rstrip()
