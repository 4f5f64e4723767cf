"""Pure CPU work of the library, timed by pyperf (not a test): no Redis involved.

Usage (from the repository root; pyperf's own options apply, ``--help`` lists them)::

    .venv/bin/python -m benchmarks.cpu                      # 10,000-event copies, minutes
    .venv/bin/python -m benchmarks.cpu --quick              # 1,000 events, --fast, ~1.5 min
    .venv/bin/python -m benchmarks.cpu -o base.json         # pyperf's JSON (also: --json)
    .venv/bin/python -m benchmarks.cpu --only decode        # names containing "decode"
    .venv/bin/python -m pyperf compare_to base.json new.json --table

pyperf runs each benchmark in several fresh worker processes (``python -m benchmarks.cpu
--worker ...``; so run it from the repository root), calibrates the loop count, discards
warm-ups, and reports mean +- standard deviation; ``-o``/``--json`` keeps every value. At
the end the main process prints medians and the ratios the README quotes (decoding one
event per pydantic call vs one call for the whole batch; copying cached events vs sharing
them).

Benchmarks (``core`` = this package's models, ``adk`` = google-adk's):

- ``encode_event[...]``: one event to its stored JSON (the codec an append uses);
- ``decode_1000[..., per event]`` / ``[..., batch]``: the stored JSON of 1,000 events back to
  models, one ``validate_json`` per event (what reads do) vs one call on a JSON array;
- ``copy_N[..., way]``: giving a caller N cached events it may change: a new list of the
  shared events (what the read cache does), ``model_copy()`` each, ``copy.deepcopy``,
  ``model_validate`` from cached dicts;
- ``cache_hit_N[core]``: the CPU side of a read cache hit on N events (entry lookup, a
  session built on a new list of the shared events);
- ``append_call[core]``: an append's work before its script call (delta split by scope,
  values encoded, event encoded, key names, script arguments);
- ``state_split_encode[core]``: a delta split by scope and its values encoded.
"""

from __future__ import annotations

import copy
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import pyperf
from pydantic import TypeAdapter
from redis.asyncio import Redis

from benchmarks.harness import internals
from benchmarks.harness.timing import percentile
from benchmarks.harness.workloads import make_adk_event, make_event

FULL_COPY_EVENTS = 10_000
QUICK_COPY_EVENTS = 1_000
DECODE_EVENTS = 1_000


def _events(family: str, count: int) -> list[Any]:
    if family == "adk":
        return [make_adk_event(i) for i in range(count)]
    invocation = str(uuid.uuid4())
    return [make_event(i, invocation) for i in range(count)]


def _service(family: str) -> Any:
    # Never connected: only the codec and key names are used.
    client = Redis(host="127.0.0.1", port=1)
    if family == "adk":
        from redis_agent_sessions.adk import RedisSessionService as AdkService

        return AdkService(client)
    from redis_agent_sessions import RedisSessionService

    return RedisSessionService(client)


def _raws(events: list[Any]) -> list[bytes]:
    return [e.__pydantic_serializer__.to_json(e, exclude_none=True) for e in events]


# -- fixtures: each builds (untimed) what one benchmark calls ----------------------------------


def encode_event(family: str) -> Callable[[], Any]:
    codec = internals.codec(_service(family))
    event = _events(family, 2)[1]
    return lambda: codec.encode_event(event)


def decode_per_event(family: str) -> Callable[[], Any]:
    codec = internals.codec(_service(family))
    raws = _raws(_events(family, DECODE_EVENTS))
    return lambda: codec.decode_events(raws)


def decode_batch(family: str) -> Callable[[], Any]:
    events = _events(family, DECODE_EVENTS)
    batch = TypeAdapter(list[type(events[0])]).validate_json  # type: ignore[misc]
    joined = b"[" + b",".join(_raws(events)) + b"]"
    return lambda: batch(joined)


def copy_way(family: str, way: str, count: int) -> Callable[[], Any]:
    events = _events(family, count)
    if way == "share":
        return lambda: list(events)
    if way == "model_copy":
        return lambda: [e.model_copy() for e in events]
    if way == "deepcopy":
        return lambda: copy.deepcopy(list(events))
    cls = type(events[0])
    dicts = [e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in events]
    return lambda: [cls.model_validate(d) for d in dicts]


def cache_hit(count: int) -> Callable[[], Any]:
    return internals.cache_hit_work(_service("core"), _events("core", count))


def append_call() -> Callable[[], Any]:
    from redis_agent_sessions import Session

    service = _service("core")
    session = Session(id="s-1", app_name="bench_app", user_id="user-0001", state={"turn": 0})
    event = _events("core", 2)[1]
    return internals.append_call_work(service, session, event)


def state_split_encode() -> Callable[[], Any]:
    delta = _events("core", 2)[1].actions.state_delta
    return internals.state_encode_work(delta)


COPY_WAYS = {
    "share": "share (new list, shared events)",
    "model_copy": "model_copy() each (shallow)",
    "deepcopy": "copy.deepcopy",
    "validate": "model_validate from cached dicts",
}


def benchmarks(quick: bool) -> dict[str, Callable[[], Callable[[], Any]]]:
    """Name -> a builder of the zero-argument callable to time."""
    n = QUICK_COPY_EVENTS if quick else FULL_COPY_EVENTS
    out: dict[str, Callable[[], Callable[[], Any]]] = {}
    for family in ("core", "adk"):
        out[f"encode_event[{family}]"] = lambda f=family: encode_event(f)
        out[f"decode_{DECODE_EVENTS}[{family}, per event]"] = lambda f=family: decode_per_event(f)
        out[f"decode_{DECODE_EVENTS}[{family}, batch]"] = lambda f=family: decode_batch(f)
    for family in ("core", "adk"):
        for way in COPY_WAYS:
            out[f"copy_{n}[{family}, {way}]"] = lambda f=family, w=way: copy_way(f, w, n)
    out[f"cache_hit_{n}[core]"] = lambda: cache_hit(n)
    out["append_call[core]"] = append_call
    out["state_split_encode[core]"] = state_split_encode
    return out


def time_func(build: Callable[[], Callable[[], Any]]) -> Callable[[int], float]:
    """pyperf's ``time_func(loops)``: the fixture is built on the first call, untimed."""
    held: list[Callable[[], Any]] = []

    def timed(loops: int) -> float:
        if not held:
            held.append(build())
        call = held[0]
        clock = time.perf_counter
        start = clock()
        for _ in range(loops):
            call()
        return clock() - start

    return timed


def add_cmdline_args(cmd: list[str], args: Any) -> None:
    if args.quick:
        cmd.append("--quick")
    if args.only:
        cmd.extend(["--only", args.only])


def summary(results: dict[str, pyperf.Benchmark], quick: bool) -> str:
    """Medians, and the ratios the README quotes, from this run's results."""

    def med_ms(name: str) -> float | None:
        found = results.get(name)
        return None if found is None else percentile(found.get_values(), 50) * 1e3

    lines = ["", "medians (ms) and ratios from this run:"]
    for family in ("core", "adk"):
        one = med_ms(f"decode_{DECODE_EVENTS}[{family}, per event]")
        batch = med_ms(f"decode_{DECODE_EVENTS}[{family}, batch]")
        if one is not None and batch is not None:
            lines.append(
                f"decoding {DECODE_EVENTS:,} {family} events, one pydantic call each "
                f"{one:.2f} ms / one call for the batch {batch:.2f} ms = {one / batch:.2f}x"
            )
    n = QUICK_COPY_EVENTS if quick else FULL_COPY_EVENTS
    for family in ("core", "adk"):
        ways = {label: med_ms(f"copy_{n}[{family}, {way}]") for way, label in COPY_WAYS.items()}
        listed = ", ".join(f"{label} {v:.2f}" for label, v in ways.items() if v is not None)
        if listed:
            lines.append(f"copying {n:,} {family} events for a caller, ms: {listed}")
    return "\n".join(lines)


def main() -> None:
    argv = sys.argv[1:]
    if "--json" in argv:  # this harness's name for pyperf's -o
        argv[argv.index("--json")] = "--output"
    quick = "--quick" in argv
    if quick and "--worker" not in argv and "--fast" not in argv and "--rigorous" not in argv:
        argv.append("--fast")
    runner = pyperf.Runner(
        processes=8,
        program_args=("-m", "benchmarks.cpu"),
        add_cmdline_args=add_cmdline_args,
    )
    runner.argparser.add_argument(
        "--quick", action="store_true", help="1,000-event copies, pyperf --fast"
    )
    runner.argparser.add_argument("--only", help="run only the benchmarks naming this")
    runner.metadata["description"] = "redis-agent-sessions pure CPU work"
    args = runner.parse_args(argv)
    results: dict[str, pyperf.Benchmark] = {}
    for name, build in benchmarks(args.quick).items():
        if args.only and args.only not in name:
            continue
        found = runner.bench_time_func(name, time_func(build))
        if found is not None:
            results[name] = found
    if not args.worker and results:
        print(summary(results, args.quick))


if __name__ == "__main__":
    main()
